//! The features conformance suite on a real redis-server.

lock_tests::features_suite!(lock_tests::redis_backend());

use std::num::NonZeroU32;

use lock_core::rate::{Algorithm, Policy, Quota, RateLimiter};
use lock_tests::evalsha_calls;

/// Allow-at-most is one script call, also when fewer than asked are left
/// and under several quotas.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_at_most_is_one_round_trip() {
    let (server, backend) = lock_tests::redis_backend().await;
    let mut conn = server.connection();
    for algorithm in [
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::Gcra,
    ] {
        let policy = Policy::new(algorithm)
            .quota(Quota::per_hour(NonZeroU32::new(10).expect("10")))
            .quota(Quota::per_day(NonZeroU32::new(4).expect("4")));
        let limiter =
            RateLimiter::new(backend.clone(), format!("trips-{algorithm:?}"), policy).expect("ok");
        // Loads the script, so that the count below is of EVALSHA alone.
        limiter.check_cost("warm", 0).await.expect("backend");
        let before = evalsha_calls(&mut conn);
        let decision = limiter.allow_at_most("ann", 9).await.expect("backend");
        assert_eq!(decision.granted, 4, "{algorithm:?}: {decision:?}");
        assert_eq!(
            evalsha_calls(&mut conn) - before,
            1,
            "{algorithm:?}: allow_at_most took more than one script call"
        );
    }
}
