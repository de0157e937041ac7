//! Section 4, in memory: what a decision costs when two threads decide at
//! once, ours (the memory backend) against `governor`'s keyed limiter as
//! `tower_governor` uses it (keyed by `IpAddr`). Over HTTP two worker
//! threads decide at once, for one client or for many.

use std::net::{IpAddr, Ipv4Addr};
use std::num::NonZeroU32;
use std::time::Instant;

use lock_bench::Error;
use lock_core::backend::MemoryBackend;
use lock_core::rate::{Algorithm, Policy, Quota, RateLimiter};

use crate::{Scale, median_and_quartiles};

/// Interleaved rounds of the table.
const ROUNDS: usize = 9;

/// Keys each thread cycles through when the threads have keys of their own.
const KEYS_PER_THREAD: u32 = 1024;

/// The addresses of thread `t`'s clients.
fn addresses(t: u8) -> Vec<Ipv4Addr> {
    (0..KEYS_PER_THREAD)
        .map(|i| Ipv4Addr::from([10, t, (i / 256) as u8, (i % 256) as u8]))
        .collect()
}

/// Wall time per decision (ns) of `decide` run over each key set at once,
/// one thread per set, `n` decisions per thread.
fn per_decision<K: Sync>(sets: &[Vec<K>], n: usize, decide: impl Fn(&K) + Sync) -> f64 {
    let decide = &decide;
    // Warm-up: every key exists before the clock starts.
    for set in sets {
        set.iter().for_each(decide);
    }
    let started = Instant::now();
    std::thread::scope(|scope| {
        for set in sets {
            scope.spawn(move || set.iter().cycle().take(n).for_each(decide));
        }
    });
    started.elapsed().as_nanos() as f64 / n as f64
}

/// Three million an hour: one decision every 1.2 ms per key. Every key's
/// state then stays live between its turns: an entry expires once its
/// allowance is full again, which a finer quota reaches between turns,
/// and ours would sweep and re-insert it, which is not a decision's own
/// cost (`governor` keeps its entries until told to drop them). And the
/// two million decisions of a round on one key stay within the hour's
/// allowance, so nothing is refused.
fn per_hour() -> NonZeroU32 {
    NonZeroU32::new(3_000_000).unwrap_or(NonZeroU32::MAX)
}

pub(super) fn two_threads(scale: &Scale) -> Result<(), Error> {
    let n = scale.iterations * 100;
    let one_key = vec![Ipv4Addr::LOCALHOST];
    let own: [Vec<Ipv4Addr>; 2] = [addresses(1), addresses(2)];
    // Both are handed the address, as their layers do (ours since round
    // 18; before, the text the layer formatted, made before the clock
    // started).
    // Rows: one thread over its own keys (the reference), two threads on
    // one key, two threads on keys of their own. Each measured in
    // `ROUNDS` interleaved rounds, on limiters of their own each round; the
    // fastest kept (interference only adds time), and the ratio of ours to
    // `governor`'s within each round, whose median does not hang on one
    // lucky round (two threads on one key take turns differently from one
    // run to the next).
    let mut best = [[f64::INFINITY; 3]; 2];
    let mut ratios: [Vec<f64>; 3] = Default::default();
    for _ in 0..ROUNDS {
        let policy = Policy::new(Algorithm::Gcra).quota(Quota::per_hour(per_hour()));
        let ours = RateLimiter::new(MemoryBackend::new(), "threads", policy)?;
        let theirs = governor::RateLimiter::keyed(governor::Quota::per_hour(per_hour()));
        let ours_decide = |ip: &Ipv4Addr| {
            std::hint::black_box(ours.check_now(*ip, 1));
        };
        let theirs_decide = |ip: &Ipv4Addr| {
            std::hint::black_box(theirs.check_key(&IpAddr::V4(*ip))).ok();
        };
        let cells = [
            [
                per_decision(&[own[0].clone()], n, ours_decide),
                per_decision(&[one_key.clone(), one_key.clone()], n, ours_decide),
                per_decision(&own, n, ours_decide),
            ],
            [
                per_decision(&[own[0].clone()], n, theirs_decide),
                per_decision(&[one_key.clone(), one_key.clone()], n, theirs_decide),
                per_decision(&own, n, theirs_decide),
            ],
        ];
        for (i, ratio) in ratios.iter_mut().enumerate() {
            ratio.push(cells[0][i] / cells[1][i]);
        }
        for (row, cell) in best.iter_mut().zip(cells) {
            for (b, c) in row.iter_mut().zip(cell) {
                *b = b.min(c);
            }
        }
    }
    let [o, g] = best;
    println!(
        "\nIn memory, decisions on one thread and on two at once, {n} per thread, fastest of {ROUNDS} interleaved rounds (wall time per decision)\n"
    );
    println!(
        "| threads and keys | ours (ns) | / one thread | `governor` (ns) | / one thread | ours / `governor`, fastest rounds | median of the ratios within a round (quartiles) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    let labels = [
        "one thread, its own 1,024 keys in turn",
        "two threads, one key",
        "two threads, 1,024 keys of their own each",
    ];
    for ((i, label), ratios) in labels.iter().enumerate().zip(ratios) {
        let (median, low, high) = median_and_quartiles(ratios);
        println!(
            "| {label} | {:.0} | {:.2}x | {:.0} | {:.2}x | {:.2}x | {median:.2}x ({low:.2} to {high:.2}) |",
            o[i],
            o[i] / o[0],
            g[i],
            g[i] / g[0],
            o[i] / g[i]
        );
    }
    Ok(())
}
