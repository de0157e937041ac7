//! Cost of one in-memory rate-limit decision (not part of the test suite).
use std::num::NonZeroU32;
use std::time::Instant;

use lock_core::backend::MemoryBackend;
use lock_core::rate::{Algorithm, Policy, Quota, RateLimiter};

#[tokio::main(flavor = "current_thread")]
async fn main() -> lock_core::Result<()> {
    let quota = Quota::per_hour(NonZeroU32::new(1_000_000_000).unwrap_or(NonZeroU32::MAX));
    let limiter = RateLimiter::new(
        MemoryBackend::new(),
        "x",
        Policy::new(Algorithm::Gcra).quota(quota),
    )?;
    let n: u32 = std::env::var("N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let started = Instant::now();
    for _ in 0..n {
        limiter.check("127.0.0.1").await?;
    }
    println!(
        "{:.0} ns per decision through `check().await`",
        started.elapsed().as_nanos() as f64 / f64::from(n)
    );
    let started = Instant::now();
    for _ in 0..n {
        if let Some(decision) = limiter.check_cost_now("127.0.0.1", 1) {
            std::hint::black_box(decision?);
        }
    }
    println!(
        "{:.0} ns per decision through `check_cost_now` (what the layer calls)",
        started.elapsed().as_nanos() as f64 / f64::from(n)
    );
    Ok(())
}
