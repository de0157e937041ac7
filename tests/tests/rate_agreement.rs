//! Rate limits decide exactly and alike: GCRA never lets through more than
//! its quota, on either backend, for quotas whose interval is not a whole
//! number of microseconds; and the same calls at the same times get the
//! same decisions in memory (on a manual clock) as on a real
//! `redis-server`, for every algorithm.

use std::num::NonZeroU32;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lock_core::backend::{ManualClock, MemoryBackend, RedisBackend};
use lock_core::rate::{Algorithm, Decision, Policy, Quota, RateBackend, RateLimiter};
use lock_tests::{redis_backend, within};
use rand::Rng;

const DAY: Duration = Duration::from_secs(86_400);

/// (limit, period, cost per call when hammering).
fn quotas() -> Vec<(u32, Duration, u32)> {
    vec![
        (1, Duration::from_millis(1), 1),
        (501, Duration::from_millis(1), 400),
        (3, Duration::from_secs(7), 1),
        (150_000, Duration::from_secs(1), 1000),
        (700_000, Duration::from_secs(1), 10_000),
        (u32::MAX, DAY, 100),
    ]
}

fn gcra(limit: u32, period: Duration) -> Policy {
    let quota = Quota::new(NonZeroU32::new(limit).expect("positive"), period).expect("valid");
    Policy::new(Algorithm::Gcra).quota(quota)
}

/// The most a quota may let through in `elapsed`: the burst, the rate over
/// the time, and one unit of rounding.
fn bound(limit: u32, period: Duration, elapsed: Duration) -> u128 {
    let limit = u128::from(limit);
    limit + limit * elapsed.as_nanos() / period.as_nanos() + 1
}

/// Takes the whole burst in one call, then `cost` at a time, as fast as the
/// backend answers, for `span`: the units allowed and the time it took.
async fn hammer<B: RateBackend>(
    limiter: &RateLimiter<B>,
    key: &str,
    limit: u32,
    cost: u32,
    span: Duration,
) -> (u128, Duration) {
    let started = Instant::now();
    let first = limiter.check_cost(key, limit).await.expect("backend");
    assert!(
        first.allowed,
        "the first call takes the whole burst: {first:?}"
    );
    let mut allowed = u128::from(limit);
    while started.elapsed() < span {
        if limiter
            .check_cost(key, cost)
            .await
            .expect("backend")
            .allowed
        {
            allowed += u128::from(cost);
        }
    }
    (allowed, started.elapsed())
}

/// On Redis, hammering each quota for 300 ms never gets more than
/// `limit + rate × elapsed + 1` through (the elapsed time measured around
/// all the calls, so the bound is if anything generous).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gcra_on_redis_never_exceeds_the_quota() {
    let (_server, backend) = redis_backend().await;
    for (limit, period, cost) in quotas() {
        let limiter =
            RateLimiter::new(backend.clone(), "exact", gcra(limit, period)).expect("valid");
        let key = format!("{limit}-{}", period.as_millis());
        let (allowed, elapsed) =
            hammer(&limiter, &key, limit, cost, Duration::from_millis(300)).await;
        let most = bound(limit, period, elapsed);
        assert!(
            allowed <= most,
            "{limit} per {period:?}: {allowed} units in {elapsed:?}, at most {most}"
        );
    }
}

/// In memory, on a manual clock, calls every few microseconds for twenty
/// periods (or 200,000 calls) never get more through than the bound, over
/// any span from the start.
#[tokio::test]
async fn gcra_in_memory_never_exceeds_the_quota() {
    for (limit, period, cost) in quotas() {
        let start = UNIX_EPOCH + Duration::from_secs(1_750_000_000);
        let clock = ManualClock::new(start);
        let backend = MemoryBackend::builder().clock(clock.clone()).build();
        let limiter = RateLimiter::new(backend, "exact", gcra(limit, period)).expect("valid");
        let step = (period / limit).max(Duration::from_nanos(1)) / 3 + Duration::from_nanos(7);
        let steps = (20 * period.as_nanos() / step.as_nanos()).min(200_000);
        let mut allowed = 0u128;
        for i in 0..steps {
            let cost = if i == 0 { limit } else { cost.min(limit) };
            if limiter
                .check_now("k", cost)
                .expect("memory decides at once")
                .expect("valid")
                .allowed
            {
                allowed += u128::from(cost);
            }
            let elapsed = clock.now().duration_since(start).expect("forward");
            let most = bound(limit, period, elapsed);
            assert!(
                allowed <= most,
                "{limit} per {period:?}: {allowed} units in {elapsed:?}, at most {most}"
            );
            clock.advance(step);
        }
        // The rounding costs little: most of the rate gets through.
        let elapsed = clock.now().duration_since(start).expect("forward");
        let least = bound(limit, period, elapsed) * 99 / 100 - u128::from(cost) - 2;
        assert!(
            allowed >= least,
            "{limit} per {period:?}: only {allowed} of {least}"
        );
    }
}

/// Takes the whole of a sliding window's 10 per second in one call, then
/// tries every 5 ms until a call is allowed again: how long that took, and
/// the longest call (what a poll can be late by).
async fn sliding_reopens_after<B: RateBackend>(
    limiter: RateLimiter<B>,
    key: String,
) -> (Duration, Duration) {
    let started = Instant::now();
    let mut longest = Duration::ZERO;
    within(Duration::from_secs(5), "a call allowed again", async {
        // One call: ten could straddle a window's edge on a slow machine.
        let all = limiter.check_cost(&key, 10).await.expect("backend");
        assert!(all.allowed, "the first ten units were refused: {all:?}");
        loop {
            let asked = Instant::now();
            let allowed = limiter.check(&key).await.expect("backend").allowed;
            longest = longest.max(asked.elapsed());
            if allowed {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    (started.elapsed(), longest)
}

/// The same calls at the same real times on both backends: a sliding
/// window's first unit comes back at the same time in memory as on Redis
/// (both align windows to Unix time), in three trials.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sliding_window_reopens_at_the_same_time_on_both() {
    let (_server, redis) = redis_backend().await;
    let memory = MemoryBackend::new();
    let ten = Quota::per_second(NonZeroU32::new(10).expect("positive"));
    let policy = Policy::new(Algorithm::SlidingWindow).quota(ten);
    for trial in 0..3 {
        let on_redis = RateLimiter::new(redis.clone(), "reopen", policy.clone()).expect("valid");
        let in_memory = RateLimiter::new(memory.clone(), "reopen", policy.clone()).expect("valid");
        let key = format!("k{trial}");
        let ((redis_took, redis_call), (memory_took, memory_call)) = tokio::join!(
            sliding_reopens_after(on_redis, key.clone()),
            sliding_reopens_after(in_memory, key),
        );
        // A poll is late by at most its sleep and its call.
        let slack = Duration::from_millis(60) + redis_call.max(memory_call);
        assert!(
            redis_took.abs_diff(memory_took) <= slack,
            "trial {trial}: allowed again after {redis_took:?} on Redis, {memory_took:?} in \
             memory (calls took up to {redis_call:?} / {memory_call:?})"
        );
        tokio::time::sleep(Duration::from_millis(rand::rng().random_range(100..400))).await;
    }
}

/// Redis's clock, as `SystemTime`.
async fn redis_time(backend: &RedisBackend) -> SystemTime {
    let (secs, micros): (u64, u64) = redis::cmd("TIME")
        .query_async(&mut backend.connection())
        .await
        .expect("TIME");
    UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_micros(micros)
}

/// Whether two decisions agree: the same answer and remaining, times
/// within `slack` (what is not known of when the call was decided).
fn agree(a: &Decision, b: &Decision, slack: Duration) -> bool {
    let close = |x: Duration, y: Duration| x.abs_diff(y) <= slack;
    a.allowed == b.allowed
        && a.remaining == b.remaining
        && a.quota_index == b.quota_index
        && close(a.retry_after, b.retry_after)
        && close(a.reset_after, b.reset_after)
}

/// A random sequence of calls (costs 0 to 3, a few milliseconds to a
/// tenth of a second apart, on two keys) on Redis, replayed in memory at
/// the times Redis saw them: every decision agrees. A call's time is known
/// to within its round trip (Redis's clock read before and after it): the
/// replay takes the middle, so times agree within half the round trip, and
/// where the middle lands across a window's edge from Redis, one end of the
/// round trip must agree instead. A window's start or a GCRA arrival time
/// was set by an earlier call, replayed as uncertainly: times agree within
/// the largest half round trip so far, plus 1 ms for Redis's whole
/// milliseconds (PTTL), and at a window's edge this call's time may be
/// moved as far as that earlier call's was. On a loaded machine round trips of milliseconds
/// are common, and a slack of this call's trip alone failed the test where
/// both sides decided alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_and_redis_decide_alike() {
    let (_server, redis) = redis_backend().await;
    let quota = |limit, ms| {
        Quota::new(
            NonZeroU32::new(limit).expect("positive"),
            Duration::from_millis(ms),
        )
        .expect("valid")
    };
    for algorithm in [
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::Gcra,
    ] {
        for policy in [
            Policy::new(algorithm).quota(quota(10, 1000)),
            Policy::new(algorithm)
                .quota(quota(3, 300))
                .quota(quota(7, 1500)),
        ] {
            let scope = format!("agree-{algorithm:?}-{}", policy.quotas().len());
            let on_redis = RateLimiter::new(redis.clone(), &scope, policy.clone()).expect("valid");
            // (key, cost, Redis time before and after, Redis's decision)
            let mut calls = Vec::new();
            for i in 0..40 {
                let key = if i % 3 == 0 { "b" } else { "a" };
                let cost = rand::rng().random_range(0..=3);
                let before = redis_time(&redis).await;
                let decision = on_redis.check_cost(key, cost).await.expect("redis");
                let after = redis_time(&redis).await;
                calls.push((key, cost, before, after, decision));
                let pause = rand::rng().random_range(1..=80);
                tokio::time::sleep(Duration::from_millis(pause)).await;
            }
            let replay = |times: &[SystemTime]| {
                let clock = ManualClock::new(times[0]);
                let memory = MemoryBackend::builder().clock(clock.clone()).build();
                let limiter = RateLimiter::new(memory, &scope, policy.clone()).expect("valid");
                let mut last = None;
                for ((key, cost, ..), at) in calls.iter().zip(times) {
                    clock.set(*at);
                    last = limiter.check_now(*key, *cost).expect("at once").ok();
                }
                last.expect("a decision")
            };
            let mut times = Vec::new();
            let mut earlier = Duration::ZERO;
            for (i, (key, cost, before, after, on_redis)) in calls.iter().enumerate() {
                let trip = after.duration_since(*before).unwrap_or_default();
                let middle = *before + trip / 2;
                // The call was decided somewhere within its round trip, the
                // state it met by calls known as loosely.
                earlier = earlier.max(trip / 2);
                let slack = earlier + Duration::from_millis(1);
                // An earlier call that started a window (or set an arrival
                // time) was replayed up to `earlier` off: at a window's edge
                // this call's own time, moved as far, must agree instead.
                let candidates = [
                    middle,
                    *before,
                    *after,
                    *before - (earlier - trip / 2),
                    *after + (earlier - trip / 2),
                ];
                let chosen = candidates.into_iter().find(|at| {
                    times.push(*at);
                    let in_memory = replay(&times);
                    times.pop();
                    agree(on_redis, &in_memory, slack)
                });
                let Some(at) = chosen else {
                    times.push(middle);
                    panic!(
                        "{scope}, call {i} ({key} cost {cost}): Redis {on_redis:?}, memory {:?}",
                        replay(&times)
                    );
                };
                // Replayed this far from the middle: later calls' state
                // is known as loosely.
                earlier = earlier.max(trip / 2 + at_from(middle, at));
                times.push(at);
            }
        }
    }
}

/// How far apart `a` and `b` are.
fn at_from(a: SystemTime, b: SystemTime) -> Duration {
    a.duration_since(b)
        .or_else(|_| b.duration_since(a))
        .unwrap_or_default()
}
