//! Cost of one in-memory rate-limit decision (not part of the test suite):
//! on one thread, then on two threads at once, deciding for the same key or
//! each for keys of its own. `N` sets the decisions per thread (default one
//! million).
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use lock_core::backend::MemoryBackend;
use lock_core::rate::{Algorithm, Policy, Quota, RateLimiter};

/// Keys each thread cycles through, when the threads have keys of their own.
const KEYS_PER_THREAD: usize = 1024;

#[tokio::main(flavor = "current_thread")]
async fn main() -> lock_core::Result<()> {
    // Three million an hour: one decision per key every 1.2 ms keeps each
    // key's state live between its turns (an entry expires once its
    // allowance is full again, and a finer quota would get there between
    // turns, so the table would sweep and re-insert it, which is not the
    // decision's own cost). Each phase has a hot key of its own, so the
    // default run stays within the hour's allowance on every key and
    // nothing is refused.
    let quota = Quota::per_hour(NonZeroU32::new(3_000_000).unwrap_or(NonZeroU32::MAX));
    let limiter = RateLimiter::new(
        MemoryBackend::new(),
        "x",
        Policy::new(Algorithm::Gcra).quota(quota),
    )?;
    let n: u32 = std::env::var("N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let per = |elapsed: Duration, decisions: u32| elapsed.as_nanos() as f64 / f64::from(decisions);
    let started = Instant::now();
    for _ in 0..n {
        limiter.check("127.0.0.1").await?;
    }
    println!(
        "{:.0} ns per decision through `check().await`",
        per(started.elapsed(), n)
    );
    let started = Instant::now();
    for _ in 0..n {
        if let Some(decision) = limiter.check_cost_now("127.0.0.2", 1) {
            std::hint::black_box(decision?);
        }
    }
    let one = per(started.elapsed(), n);
    println!("{one:.0} ns per decision through `check_cost_now` (what the layer calls)");

    // Each thread's keys, formatted before the clock starts.
    let keys = |thread: usize| -> Vec<String> {
        (0..KEYS_PER_THREAD)
            .map(|i| format!("10.{thread}.{}.{}", i / 256, i % 256))
            .collect()
    };
    let decide = |keys: &[String]| -> lock_core::Result<()> {
        for key in keys.iter().cycle().take(n as usize) {
            if let Some(decision) = limiter.check_cost_now(key, 1) {
                std::hint::black_box(decision?);
            }
        }
        Ok(())
    };
    let alone = keys(0);
    let started = Instant::now();
    decide(&alone)?;
    let one_many = per(started.elapsed(), n);
    println!(
        "{one_many:.0} ns per decision, one thread, {KEYS_PER_THREAD} keys in turn (reference for the two-thread rows)"
    );
    for (label, own_keys) in [("the same key", false), ("keys of its own", true)] {
        let sets: Vec<Vec<String>> = (1..=2)
            .map(|t| {
                if own_keys {
                    keys(t)
                } else {
                    vec!["127.0.0.3".to_owned()]
                }
            })
            .collect();
        let started = Instant::now();
        std::thread::scope(|scope| -> lock_core::Result<()> {
            let handles: Vec<_> = sets.iter().map(|set| scope.spawn(|| decide(set))).collect();
            for handle in handles {
                handle.join().expect("decision thread panicked")?;
            }
            Ok(())
        })?;
        let wall = per(started.elapsed(), 2 * n);
        let reference = if own_keys { one_many } else { one };
        println!(
            "{wall:.0} ns of wall time per decision, two threads, each on {label}: {:.2}x one thread's",
            wall / reference
        );
    }
    Ok(())
}
