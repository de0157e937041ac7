//! Section 5: resident memory of the memory backend under a stream of
//! distinct keys.

use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use lock_bench::Error;
use lock_core::backend::MemoryBackend;
use lock_core::rate::{Algorithm, Policy, Quota, RateLimiter};

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
    // 10 per 10 s: an idle key expires a second after its last hit, and
    // the stream brings far more than the cap's worth of new keys in a
    // second, so the tables fill to the cap and evict, however fast this
    // machine runs the stream. (With keys that expire sooner than the cap
    // fills, the tables' size would follow the stream's speed, and so vary
    // from run to run with the load on the machine.)
    let quota =
        Quota::new(NonZeroU32::new(10).ok_or("10")?, Duration::from_secs(10)).ok_or("quota")?;
    let limiter = RateLimiter::new(backend, "mem", Policy::new(Algorithm::Gcra).quota(quota))?;
    let before = resident_bytes();
    // Each stream gives the resident memory after it, and the time one
    // decision took on average (each for a new key, formatted in the loop).
    let stream = |round: usize| {
        let limiter = &limiter;
        async move {
            let started = Instant::now();
            for i in 0..scale.keys {
                limiter.check(&format!("k{round}-{i}")).await?;
            }
            let per_key = started.elapsed().as_nanos() as f64 / scale.keys as f64;
            Ok::<_, Error>((resident_bytes(), per_key))
        }
    };
    let first = stream(1).await?;
    // More of the same: flat memory means these streams add nothing. The
    // last stream is compared with the second as well as with the first.
    let second = stream(2).await?;
    let mut last = second;
    for round in 3..=scale.streams {
        last = stream(round).await?;
    }
    // Every key of the streams has expired a second after its last hit.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    // Touching keys sweeps expired ones, and a shard's table shrinks once a
    // sweep has left it mostly empty.
    for i in 0..10_000 {
        limiter.check(&format!("after{i}")).await?;
    }
    let after = resident_bytes();
    let mb = |b: u64| b as f64 / 1048576.0;
    let keys = scale.keys;
    println!(
        "| resident memory | MiB | vs before | vs after the first {keys} | ns per decision in the stream |"
    );
    println!("|---|---:|---:|---:|---:|");
    println!("| before the stream | {:.1} | 1.00x | | |", mb(before));
    let row = |label: String, bytes: u64, per_key: Option<f64>| {
        println!(
            "| {label} | {:.1} | {:.2}x | {:.2}x | {} |",
            mb(bytes),
            bytes as f64 / before as f64,
            bytes as f64 / first.0 as f64,
            per_key.map_or(String::new(), |ns| format!("{ns:.0}")),
        );
    };
    row(
        format!("after {keys} distinct keys (cap 100,000 live keys)"),
        first.0,
        Some(first.1),
    );
    row(format!("after {keys} more"), second.0, Some(second.1));
    row(
        format!(
            "after {} distinct keys in all ({:.2}x the figure after {})",
            scale.streams * keys,
            last.0 as f64 / second.0 as f64,
            2 * keys
        ),
        last.0,
        Some(last.1),
    );
    row("after idle keys were evicted".to_owned(), after, None);
    // The first stream again, through `governor`'s keyed limiter keyed by
    // the same text (its memory is not measured: this process's heap
    // already holds what ours freed). It keeps every key until told to
    // drop them, as `tower_governor` does from a thread of its own.
    let burst = NonZeroU32::new(10).ok_or("10")?;
    let theirs = governor::RateLimiter::keyed(
        governor::Quota::with_period(Duration::from_secs(1))
            .ok_or("period")?
            .allow_burst(burst),
    );
    let started = Instant::now();
    for i in 0..keys {
        std::hint::black_box(theirs.check_key(&format!("k1-{i}"))).ok();
    }
    let theirs_per_key = started.elapsed().as_nanos() as f64 / keys as f64;
    println!(
        "\nThe first stream through `governor`'s keyed limiter (same quota, keyed by the same text, never cleaned): {theirs_per_key:.0} ns per decision; ours / `governor`: {:.2}x",
        first.1 / theirs_per_key
    );
    Ok(())
}
