//! Section 4, in memory: what a decision costs when two threads decide at
//! once, ours (the memory backend) against `governor`'s keyed limiter as
//! `tower_governor` uses it (keyed by `IpAddr`). Over HTTP two worker
//! threads decide at once, for one client or for many. Then the decisions
//! per second as threads are added ([`scaling`]), for many light callers
//! whose state expires between visits and for callers whose state lives.

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

/// The addresses of thread `t`'s `count` clients (at most 65,536).
fn addresses(t: u8, count: u32) -> Vec<Ipv4Addr> {
    (0..count)
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
    let own: [Vec<Ipv4Addr>; 2] = [addresses(1, KEYS_PER_THREAD), addresses(2, KEYS_PER_THREAD)];
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

/// Distinct callers each thread cycles through in [`scaling`].
const CALLERS_PER_THREAD: u32 = 4096;

/// The thread counts of [`scaling`]: 1 and 2, then doubling while the
/// machine has the cores.
fn thread_counts() -> Vec<usize> {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let mut counts = vec![1, 2];
    while counts.last().is_some_and(|&last| last * 2 <= cores) {
        counts.push(counts[counts.len() - 1] * 2);
    }
    counts
}

/// The two regimes of [`scaling`]: per second, the quota, and what it
/// makes of a caller's state between two of its visits.
const REGIMES: [(u32, &str); 2] = [
    // A caller's state expires a microsecond after its visit, long before
    // the thread comes back to it: most per-IP callers are like this.
    (1_000_000, "state expired between visits (1,000,000/s)"),
    // A caller's state lives a second: every visit but the first of a
    // round is refused.
    (1, "state live between visits (1/s)"),
];

/// Section 4, in memory, as threads are added: decisions per second of
/// ours (the memory backend's `check_now`) and of `governor`'s keyed
/// limiter (keyed by `IpAddr`, as `tower_governor` uses it), each thread
/// cycling through 4,096 distinct IPv4 callers of its own, in both
/// regimes. Every cell is measured in each of `ROUNDS` interleaved rounds
/// on limiters of their own; the table gives the median round and the
/// median of the ratios within a round, with quartiles.
pub(super) fn scaling(scale: &Scale) -> Result<(), Error> {
    // A few million a thread: long enough that starting the threads and
    // the scheduler's first moves are a small part of each cell.
    let n = scale.iterations * 300;
    let counts = thread_counts();
    let sets: Vec<Vec<Ipv4Addr>> = (1..=counts[counts.len() - 1])
        .map(|t| addresses(t as u8, CALLERS_PER_THREAD))
        .collect();
    // Per regime and thread count: decisions/s of ours and of `governor`,
    // and their ratio, one of each a round.
    let cells = REGIMES.len() * counts.len();
    let mut ours: Vec<Vec<f64>> = vec![Vec::new(); cells];
    let mut theirs: Vec<Vec<f64>> = vec![Vec::new(); cells];
    for round in 0..ROUNDS {
        for (r, &(per_second, _)) in REGIMES.iter().enumerate() {
            let per_second = NonZeroU32::new(per_second).ok_or("quota")?;
            for (c, &threads) in counts.iter().enumerate() {
                let sets = &sets[..threads];
                let rate = |ns_per_decision: f64| threads as f64 * 1e9 / ns_per_decision;
                let measure_ours = || -> Result<f64, Error> {
                    let policy = Policy::new(Algorithm::Gcra).quota(Quota::per_second(per_second));
                    let limiter = RateLimiter::new(MemoryBackend::new(), "threads", policy)?;
                    Ok(rate(per_decision(sets, n, |ip: &Ipv4Addr| {
                        std::hint::black_box(limiter.check_now(*ip, 1));
                    })))
                };
                let measure_theirs = || {
                    let limiter =
                        governor::RateLimiter::keyed(governor::Quota::per_second(per_second));
                    rate(per_decision(sets, n, |ip: &Ipv4Addr| {
                        std::hint::black_box(limiter.check_key(&IpAddr::V4(*ip))).ok();
                    }))
                };
                // Which goes first turns from round to round.
                let (o, g) = if round % 2 == 0 {
                    let o = measure_ours()?;
                    (o, measure_theirs())
                } else {
                    let g = measure_theirs();
                    (measure_ours()?, g)
                };
                ours[r * counts.len() + c].push(o);
                theirs[r * counts.len() + c].push(g);
            }
        }
    }
    println!(
        "\nIn memory, as threads are added: decisions/s in all, each thread cycling through {CALLERS_PER_THREAD} distinct IPv4 callers of its own, {n} decisions per thread, median of {ROUNDS} interleaved rounds\n"
    );
    println!(
        "| callers | threads | ours (decisions/s) | / one thread | `governor` (decisions/s) | / one thread | ours / `governor`, median of the ratios within a round (quartiles) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    let median = |values: &[f64]| median_and_quartiles(values.to_vec()).0;
    for (r, &(_, label)) in REGIMES.iter().enumerate() {
        let first = r * counts.len();
        for (c, &threads) in counts.iter().enumerate() {
            let i = first + c;
            let ratios = ours[i].iter().zip(&theirs[i]).map(|(o, g)| o / g).collect();
            let (ratio, low, high) = median_and_quartiles(ratios);
            println!(
                "| {label} | {threads} | {:.2}M | {:.2}x | {:.2}M | {:.2}x | {ratio:.2}x ({low:.2} to {high:.2}) |",
                median(&ours[i]) / 1e6,
                median(&ours[i]) / median(&ours[first]),
                median(&theirs[i]) / 1e6,
                median(&theirs[i]) / median(&theirs[first]),
            );
        }
    }
    Ok(())
}
