//! `ManualClock::advance` saturates: `Duration::MAX` moves the clock to
//! its end, never round (a wrapping add once moved it back by 1 ns).

use std::num::NonZeroU32;
use std::time::{Duration, UNIX_EPOCH};

use lock_core::backend::{ManualClock, MemoryBackend};
use lock_core::rate::{Algorithm, Policy, Quota, RateLimiter};

#[tokio::test]
async fn advancing_the_manual_clock_by_any_duration_moves_it_forward() {
    let start = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let clock = ManualClock::new(start);
    let backend = MemoryBackend::builder().clock(clock.clone()).build();
    let policy = Policy::new(Algorithm::FixedWindow)
        .quota(Quota::per_second(NonZeroU32::new(1).expect("nonzero")));
    let limiter = RateLimiter::new(backend, "api", policy).expect("valid");
    assert!(limiter.check("k").await.expect("memory").allowed);
    assert!(!limiter.check("k").await.expect("memory").allowed);

    clock.advance(Duration::MAX);
    let now = clock.now();
    let allowed = limiter.check("k").await.expect("memory").allowed;
    assert!(
        now >= start && allowed,
        "advance(Duration::MAX) moved the clock from {start:?} to {now:?}; the window that \
         should be long over still refuses: allowed = {allowed}"
    );
}
