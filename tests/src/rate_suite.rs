//! The rate-limit conformance suite: every [`RateBackend`] must give the same
//! decisions. Each case takes the algorithm it runs with, so one function
//! covers fixed window, sliding window and GCRA.

use std::num::NonZeroU32;
use std::time::Duration;

use lock_core::Error;
use lock_core::rate::{Algorithm, Decision, Policy, Quota, RateBackend, RateLimiter};

/// The three algorithms.
pub const ALGORITHMS: [Algorithm; 3] = [
    Algorithm::FixedWindow,
    Algorithm::SlidingWindow,
    Algorithm::Gcra,
];

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN)
}

fn quota(limit: u32, period_ms: u64) -> Quota {
    Quota::new(nz(limit), Duration::from_millis(period_ms)).expect("valid quota")
}

fn limiter<B: RateBackend>(backend: &B, algorithm: Algorithm, quotas: &[Quota]) -> RateLimiter<B> {
    let policy = quotas
        .iter()
        .cloned()
        .fold(Policy::new(algorithm), Policy::quota);
    RateLimiter::new(backend.clone(), "suite", policy).expect("valid policy")
}

async fn hit<B: RateBackend>(limiter: &RateLimiter<B>, key: &str, cost: u32) -> Decision {
    limiter
        .check_cost(key, cost)
        .await
        .unwrap_or_else(|e| panic!("check {key}: {e}"))
}

/// `limit` calls are allowed with decreasing `remaining`, the next is refused
/// with a positive `retry_after` no longer than the period.
pub async fn burst_then_refused<B: RateBackend>(backend: B, algorithm: Algorithm) {
    let limiter = limiter(&backend, algorithm, &[quota(5, 2000)]);
    for expected in (0..5).rev() {
        let d = hit(&limiter, "burst", 1).await;
        assert!(d.allowed, "{algorithm:?}: refused early: {d:?}");
        assert_eq!(d.limit, 5);
        assert_eq!(d.remaining, expected, "{algorithm:?}: {d:?}");
        assert_eq!(d.retry_after, Duration::ZERO);
        assert!(d.reset_after <= Duration::from_millis(4000), "{d:?}");
    }
    let d = hit(&limiter, "burst", 1).await;
    assert!(!d.allowed, "{algorithm:?}: allowed past the limit: {d:?}");
    assert_eq!(d.remaining, 0);
    assert!(d.retry_after > Duration::ZERO);
    assert!(d.retry_after <= Duration::from_millis(4000), "{d:?}");
}

/// Waiting `retry_after` is enough for the refused call to be allowed.
pub async fn retry_after_is_enough<B: RateBackend>(backend: B, algorithm: Algorithm) {
    let limiter = limiter(&backend, algorithm, &[quota(3, 300)]);
    for _ in 0..3 {
        assert!(hit(&limiter, "retry", 1).await.allowed);
    }
    let refused = hit(&limiter, "retry", 1).await;
    assert!(!refused.allowed, "{algorithm:?}: {refused:?}");
    tokio::time::sleep(refused.retry_after).await;
    let d = hit(&limiter, "retry", 1).await;
    assert!(
        d.allowed,
        "{algorithm:?}: refused after retry_after {refused:?}: {d:?}"
    );
}

/// Cost 0 looks without consuming; cost up to the limit is fine; above it is
/// a typed error.
pub async fn cost_zero_and_cost_bounds<B: RateBackend>(backend: B, algorithm: Algorithm) {
    let limiter = limiter(&backend, algorithm, &[quota(4, 10_000)]);
    let look = hit(&limiter, "cost", 0).await;
    assert!(
        look.allowed && look.remaining == 4,
        "{algorithm:?}: {look:?}"
    );
    assert!(hit(&limiter, "cost", 2).await.allowed);
    for _ in 0..3 {
        let look = hit(&limiter, "cost", 0).await;
        assert!(look.allowed, "{algorithm:?}: {look:?}");
        assert_eq!(
            look.remaining, 2,
            "{algorithm:?}: looking consumed: {look:?}"
        );
    }
    let too_much = hit(&limiter, "cost", 3).await;
    assert!(!too_much.allowed, "{algorithm:?}: {too_much:?}");
    let d = hit(&limiter, "cost", 2).await;
    assert!(
        d.allowed && d.remaining == 0,
        "{algorithm:?}: a refused call consumed: {d:?}"
    );
    assert!(
        hit(&limiter, "cost-full", 4).await.allowed,
        "cost == limit on a fresh key"
    );
    assert!(matches!(
        limiter.check_cost("cost", 5).await,
        Err(Error::InvalidArgument { .. })
    ));
}

/// With several quotas a call is allowed only if all allow; a refused call
/// consumes from none; the deciding quota is reported.
pub async fn several_quotas_all_or_nothing<B: RateBackend>(backend: B, algorithm: Algorithm) {
    let wide = quota(10, 20_000).named("wide");
    let tight = quota(2, 20_000).named("tight");
    let wide_only = limiter(&backend, algorithm, std::slice::from_ref(&wide));
    let both = limiter(&backend, algorithm, &[wide, tight]);

    let d = hit(&both, "multi", 1).await;
    assert!(d.allowed);
    assert_eq!(d.quota.name(), Some("tight"), "{algorithm:?}: {d:?}");
    assert_eq!((d.limit, d.remaining), (2, 1));
    assert!(hit(&both, "multi", 1).await.allowed);
    for _ in 0..3 {
        let d = hit(&both, "multi", 1).await;
        assert!(!d.allowed, "{algorithm:?}: {d:?}");
        assert_eq!(d.quota.name(), Some("tight"));
    }
    // The wide quota saw only the two allowed calls.
    let look = hit(&wide_only, "multi", 0).await;
    assert_eq!(
        look.remaining, 8,
        "{algorithm:?}: refused calls consumed: {look:?}"
    );
}

/// A quota alone decides as it does next to a quota that never binds: the
/// Redis scripts take a shorter path for one quota, and both must agree.
pub async fn one_quota_decides_as_among_several<B: RateBackend>(backend: B, algorithm: Algorithm) {
    let main = quota(5, 10_000);
    let alone = limiter(&backend, algorithm, std::slice::from_ref(&main));
    let never_binds = quota(1_000, 10_000).named("loose");
    let paired = limiter(&backend, algorithm, &[main, never_binds]);
    // Looks, single hits, a costly hit, refusals, and a look after them.
    for (step, cost) in [0, 1, 2, 0, 1, 3, 1, 1, 0].into_iter().enumerate() {
        let a = hit(&alone, "solo", cost).await;
        let b = hit(&paired, "pair", cost).await;
        assert_eq!(
            (a.allowed, a.limit, a.remaining),
            (b.allowed, b.limit, b.remaining),
            "{algorithm:?} step {step} cost {cost}: {a:?} vs {b:?}"
        );
        assert_eq!(
            a.retry_after.is_zero(),
            b.retry_after.is_zero(),
            "{algorithm:?} step {step}: {a:?} vs {b:?}"
        );
        let close = |x: Duration, y: Duration| x.abs_diff(y) <= Duration::from_millis(500);
        assert!(
            close(a.retry_after, b.retry_after) && close(a.reset_after, b.reset_after),
            "{algorithm:?} step {step}: {a:?} vs {b:?}"
        );
    }
}

/// Keys do not share limits.
pub async fn keys_are_independent<B: RateBackend>(backend: B, algorithm: Algorithm) {
    let limiter = limiter(&backend, algorithm, &[quota(1, 10_000)]);
    assert!(hit(&limiter, "a", 1).await.allowed);
    assert!(!hit(&limiter, "a", 1).await.allowed);
    assert!(hit(&limiter, "b", 1).await.allowed);
}

/// Limiters of different scopes on one backend do not share limits, even
/// for the same key and policy.
pub async fn scopes_are_independent<B: RateBackend>(backend: B, algorithm: Algorithm) {
    let policy = Policy::new(algorithm).quota(quota(1, 10_000));
    let first = RateLimiter::new(backend.clone(), "suite-a", policy.clone()).expect("valid");
    let second = RateLimiter::new(backend.clone(), "suite-b", policy).expect("valid");
    assert!(hit(&first, "k", 1).await.allowed);
    assert!(!hit(&first, "k", 1).await.allowed);
    assert!(hit(&second, "k", 1).await.allowed);
    assert!(!hit(&second, "k", 1).await.allowed);
    assert!(!hit(&first, "k", 1).await.allowed);
    // Scope `suite-c` with key `x:k` is not scope `suite-c:x` with key `k`,
    // nor is a `%` in a scope read as the start of an escape.
    let policy = Policy::new(algorithm).quota(quota(1, 10_000));
    let limiters = ["suite-c", "suite-c:x", "suite-c%3Ax"]
        .map(|scope| RateLimiter::new(backend.clone(), scope, policy.clone()).expect("valid"));
    assert!(hit(&limiters[0], "x:k", 1).await.allowed);
    assert!(hit(&limiters[1], "k", 1).await.allowed);
    assert!(hit(&limiters[2], "k", 1).await.allowed);
    assert!(!hit(&limiters[1], "k", 1).await.allowed);
}

/// Bad keys, scopes and policies are typed errors.
pub async fn bad_input_is_rejected<B: RateBackend>(backend: B, algorithm: Algorithm) {
    let limiter = limiter(&backend, algorithm, &[quota(1, 1000)]);
    for key in [
        String::new(),
        "a{b}".into(),
        "x".repeat(600),
        "new\nline".into(),
    ] {
        assert!(
            matches!(limiter.check(&key).await, Err(Error::InvalidName { .. })),
            "{key:?} accepted"
        );
    }
    assert!(matches!(
        RateLimiter::new(backend.clone(), "scope", Policy::new(algorithm)),
        Err(Error::InvalidArgument { .. })
    ));
    let policy = Policy::new(algorithm).quota(quota(1, 1000));
    assert!(matches!(
        RateLimiter::new(backend.clone(), "", policy.clone()),
        Err(Error::InvalidName { .. })
    ));
    assert!(matches!(
        RateLimiter::new(backend.clone(), "{x}", policy),
        Err(Error::InvalidName { .. })
    ));
    // Two quotas of one limit, period and burst are one limit kept twice,
    // whatever their names.
    let twice = Policy::new(algorithm)
        .quota(quota(6, 60_000).named("web"))
        .quota(quota(6, 60_000).named("api"));
    assert!(matches!(
        RateLimiter::new(backend.clone(), "scope", twice),
        Err(Error::InvalidArgument { .. })
    ));
    if algorithm == Algorithm::Gcra {
        // A burst window over a year is refused; one of a year is decided.
        let year = lock_core::rate::MAX_PERIOD;
        let one_a_year = |burst| {
            let quota = Quota::new(nz(1), year).expect("a year").burst(nz(burst));
            Policy::new(algorithm).quota(quota)
        };
        for policy in [
            one_a_year(2),
            Policy::new(algorithm).quota(Quota::per_hour(nz(1)).burst(nz(u32::MAX))),
        ] {
            assert!(
                matches!(
                    RateLimiter::new(backend.clone(), "scope", policy.clone()),
                    Err(Error::InvalidArgument { .. })
                ),
                "{policy:?} accepted"
            );
        }
        // Without a burst of its own the window is the period: any limit
        // over a year is accepted, whether or not it divides a year.
        for limit in [3, 7, 86_400_001] {
            let quota = Quota::new(nz(limit), year).expect("a year");
            RateLimiter::new(
                backend.clone(),
                "scope",
                Policy::new(algorithm).quota(quota),
            )
            .unwrap_or_else(|e| panic!("{limit} a year: {e}"));
        }
        let limiter = RateLimiter::new(backend, "suite-year", one_a_year(1)).expect("valid");
        assert!(hit(&limiter, "k", 1).await.allowed);
        assert!(!hit(&limiter, "k", 1).await.allowed);
    }
}

/// Fixed window: once the window ends the whole limit is back.
pub async fn fixed_window_resets<B: RateBackend>(backend: B) {
    let limiter = limiter(&backend, Algorithm::FixedWindow, &[quota(3, 400)]);
    for _ in 0..3 {
        assert!(hit(&limiter, "fw", 1).await.allowed);
    }
    let refused = hit(&limiter, "fw", 1).await;
    assert!(!refused.allowed);
    assert_eq!(refused.retry_after, refused.reset_after);
    tokio::time::sleep(refused.retry_after + Duration::from_millis(5)).await;
    for _ in 0..3 {
        assert!(hit(&limiter, "fw", 1).await.allowed, "window did not reset");
    }
    assert!(!hit(&limiter, "fw", 1).await.allowed);
}

/// Sliding window: right after a full window rolls over, the previous window
/// still weighs, so far fewer than `limit` calls are allowed.
pub async fn sliding_window_weighs_previous<B: RateBackend>(backend: B) {
    let limiter = limiter(&backend, Algorithm::SlidingWindow, &[quota(10, 1000)]);
    // All ten calls must land in one window. Windows are aligned to the
    // backend's clock; a first call tells how far into its window it is
    // (reset_after = 2 periods - elapsed): too close to the end, start over
    // with a new key in the next window.
    let mut attempt = 0;
    let (key, mut last) = loop {
        let key = format!("sw{attempt}");
        let first = hit(&limiter, &key, 1).await;
        assert!(first.allowed, "{first:?}");
        let left_in_window = first
            .reset_after
            .saturating_sub(Duration::from_millis(1000));
        if left_in_window >= Duration::from_millis(200) {
            break (key, first);
        }
        attempt += 1;
        assert!(attempt < 5, "never early enough in a window");
        tokio::time::sleep(left_in_window + Duration::from_millis(10)).await;
    };
    for _ in 0..9 {
        last = hit(&limiter, &key, 1).await;
        assert!(last.allowed, "{last:?}");
    }
    // reset_after = time to the end of the next window; go 100 ms into it.
    let to_next_window = last.reset_after.saturating_sub(Duration::from_millis(1000));
    tokio::time::sleep(to_next_window + Duration::from_millis(100)).await;
    let mut allowed = 0;
    while hit(&limiter, &key, 1).await.allowed {
        allowed += 1;
        assert!(allowed <= 10, "sliding window allowed more than the limit");
    }
    assert!(
        (1..=6).contains(&allowed),
        "allowed {allowed} just after rollover (previous window weighs ~90%)"
    );
}

/// GCRA: after the burst, one call per `period / limit` (1 s here, so that
/// a sleep that oversleeps on a busy machine does not bring two back).
pub async fn gcra_replenishes_gradually<B: RateBackend>(backend: B) {
    let limiter = limiter(&backend, Algorithm::Gcra, &[quota(10, 10_000)]);
    for _ in 0..10 {
        assert!(hit(&limiter, "gcra", 1).await.allowed);
    }
    let refused = hit(&limiter, "gcra", 1).await;
    assert!(!refused.allowed);
    assert!(
        refused.retry_after <= Duration::from_millis(1000),
        "one unit comes back every second: {refused:?}"
    );
    tokio::time::sleep(refused.retry_after).await;
    assert!(hit(&limiter, "gcra", 1).await.allowed);
    assert!(
        !hit(&limiter, "gcra", 1).await.allowed,
        "more than one unit came back"
    );
}

/// `until_ready` waits until the call is allowed, and no longer than its
/// bound: within the bound it comes back allowed, about `retry_after`
/// later; past the bound it comes back with the refusal, at the bound.
pub async fn until_ready_waits_within_its_bound<B: RateBackend>(backend: B, algorithm: Algorithm) {
    let limiter = limiter(&backend, algorithm, &[quota(2, 400)]);
    for _ in 0..2 {
        assert!(hit(&limiter, "ready", 1).await.allowed);
    }
    let refused = hit(&limiter, "ready", 1).await;
    assert!(!refused.allowed, "{algorithm:?}: {refused:?}");

    // A bound shorter than the wait: refused, after the whole bound.
    let bound = Duration::from_millis(20).min(refused.retry_after / 2);
    let started = tokio::time::Instant::now();
    let d = limiter
        .until_ready("ready", 1, bound)
        .await
        .unwrap_or_else(|e| panic!("until_ready: {e}"));
    let waited = started.elapsed();
    assert!(!d.allowed, "{algorithm:?}: allowed before its time: {d:?}");
    assert!(
        waited >= bound,
        "{algorithm:?}: gave up after {waited:?} of {bound:?}"
    );
    assert!(
        waited < bound + Duration::from_millis(300),
        "{algorithm:?}: waited {waited:?} for a bound of {bound:?}"
    );

    // A bound long enough: allowed, after about the refusal's wait.
    let started = tokio::time::Instant::now();
    let d = limiter
        .until_ready("ready", 1, Duration::from_secs(5))
        .await
        .unwrap_or_else(|e| panic!("until_ready: {e}"));
    let waited = started.elapsed();
    assert!(d.allowed, "{algorithm:?}: not allowed within 5 s: {d:?}");
    assert!(
        waited < Duration::from_millis(400) * 5,
        "{algorithm:?}: waited {waited:?} for one unit of 2 per 400 ms"
    );
    // It took the unit it waited for.
    assert!(d.remaining < 2, "{algorithm:?}: {d:?}");
    // A cost that could never be allowed is an error, not a wait.
    assert!(matches!(
        limiter
            .until_ready("ready", 3, Duration::from_secs(5))
            .await,
        Err(Error::InvalidArgument { .. })
    ));
}

/// Instantiates the rate conformance suite as `#[tokio::test]`s, one per case
/// and algorithm. `$setup` is as for [`lock_suite!`](crate::lock_suite!).
#[macro_export]
macro_rules! rate_suite {
    ($setup:expr) => {
        $crate::rate_suite!(@with @each @one $setup);
    };
    (sequentially $backend:expr) => {
        $crate::rate_suite!(@with @seq_each @seq_one $backend);
    };
    (@with @$each:ident @$one:ident $arg:expr) => {
        $crate::rate_suite!(@$each $arg;
            burst_then_refused, retry_after_is_enough, cost_zero_and_cost_bounds,
            several_quotas_all_or_nothing, one_quota_decides_as_among_several,
            keys_are_independent, scopes_are_independent, bad_input_is_rejected,
            until_ready_waits_within_its_bound);
        $crate::rate_suite!(@$one $arg;
            fixed_window_resets, sliding_window_weighs_previous, gcra_replenishes_gradually);
    };
    (@each $setup:expr; $($case:ident),*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                for algorithm in $crate::rate_suite::ALGORITHMS {
                    let (_keep_alive, backend) = $setup.await;
                    $crate::rate_suite::$case(backend, algorithm).await;
                }
            }
        )*
    };
    (@one $setup:expr; $($case:ident),*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let (_keep_alive, backend) = $setup.await;
                $crate::rate_suite::$case(backend).await;
            }
        )*
    };
    (@seq_each $backend:expr; $($case:ident),*) => {
        $(
            for algorithm in $crate::rate_suite::ALGORITHMS {
                eprintln!("rate_suite: {} {algorithm:?}", stringify!($case));
                let name = format!("{}-{algorithm:?}", stringify!($case));
                $crate::rate_suite::$case(($backend)(&name).await, algorithm).await;
            }
        )*
    };
    (@seq_one $backend:expr; $($case:ident),*) => {
        $(
            eprintln!("rate_suite: {}", stringify!($case));
            $crate::rate_suite::$case(($backend)(stringify!($case)).await).await;
        )*
    };
}
