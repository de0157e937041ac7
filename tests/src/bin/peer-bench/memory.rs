//! Section 5: resident memory of the memory backend under a stream of
//! distinct keys.

use std::num::NonZeroU32;
use std::time::Duration;

use lock_core::backend::MemoryBackend;
use lock_core::rate::{Algorithm, Policy, Quota, RateLimiter};
use lock_tests::bench::Error;

use crate::Scale;

fn resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<u64>().ok())
        })
        .map_or(0, |pages| pages * 4096)
}

pub(super) async fn memory(scale: &Scale) -> Result<(), Error> {
    let backend = MemoryBackend::new();
    // 10 per 100 ms: an idle key expires 10 ms after its last hit.
    let quota =
        Quota::new(NonZeroU32::new(10).ok_or("10")?, Duration::from_millis(100)).ok_or("quota")?;
    let limiter = RateLimiter::new(backend, "mem", Policy::new(Algorithm::Gcra).quota(quota))?;
    let before = resident_bytes();
    for i in 0..scale.keys {
        limiter.check(&format!("k{i}")).await?;
    }
    let peak = resident_bytes();
    // As many again: flat memory means this second stream adds nothing.
    for i in scale.keys..2 * scale.keys {
        limiter.check(&format!("k{i}")).await?;
    }
    let twice = resident_bytes();
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Touching keys sweeps expired ones.
    for i in 0..10_000 {
        limiter.check(&format!("after{i}")).await?;
    }
    let after = resident_bytes();
    let mb = |b: u64| b as f64 / 1048576.0;
    println!("| resident memory | MiB | vs before |");
    println!("|---|---:|---:|");
    println!("| before the stream | {:.1} | 1.00x |", mb(before));
    println!(
        "| after {} distinct keys (cap 100,000 live keys) | {:.1} | {:.2}x |",
        scale.keys,
        mb(peak),
        peak as f64 / before as f64
    );
    println!(
        "| after {} more distinct keys | {:.1} | {:.2}x (vs after the first {}: {:.2}x) |",
        scale.keys,
        mb(twice),
        twice as f64 / before as f64,
        scale.keys,
        twice as f64 / peak as f64
    );
    println!(
        "| after idle keys were evicted | {:.1} | {:.2}x |",
        mb(after),
        after as f64 / before as f64
    );
    Ok(())
}
