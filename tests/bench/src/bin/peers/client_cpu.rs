//! Section 7: what a call costs the client, in CPU time of this process
//! (Redis runs in processes of its own), with enough concurrent callers
//! that the connection is always busy. Ours next to redis-rs alone on the
//! very connection our backend uses (a `ConnectionManager` on one server,
//! a cluster connection on the cluster), calling a one-`INCR` script by
//! `EVALSHA` as redis-rs's `Script` does.
//!
//! Closed loop, every caller calls again as soon as it is answered, so a
//! server that works longer per call (our GCRA script against one `INCR`)
//! answers fewer calls a second, and the client's threads park and wake
//! more often per call: that shows in the client's CPU per call although
//! the client does no more (the table counts the client's thread wake-ups
//! per call beside its CPU). So each setup is also measured **paced**: every
//! row at the same rate of script calls, [`PACE`], well below what any row
//! reaches, with the CPU of the pacing alone (the same tasks waking on
//! the same schedule and calling nothing) measured in the same round and
//! taken off each row before the ratio.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use lock_bench::Error;
use lock_core::backend::RedisBackend;
use lock_core::lock::backend::RELEASE_REMEMBERED;
use lock_core::lock::{Lock, LockBackend, LockOptions};
use lock_core::name::Name;
use lock_core::rate::{RateBackend, RateLimiter};
use lock_tests::RedisServer;
use lock_tests::cluster::RedisCluster;
use redis::aio::ConnectionLike;

use crate::layers::gcra_policy;
use crate::median_and_quartiles;

/// Our GCRA script, as the decision sends it.
const GCRA: &str = include_str!("../../../../../lock-core/src/rate/algorithm/gcra.lua");
/// Our plain lock's scripts, as its acquire (after the fencing prelude)
/// and its release send them.
const LOCK_ACQUIRE: [&str; 2] = [
    include_str!("../../../../../lock-core/src/lock/kinds/fence.lua"),
    include_str!("../../../../../lock-core/src/lock/kinds/plain/acquire.lua"),
];
const LOCK_RELEASE: &str =
    include_str!("../../../../../lock-core/src/lock/kinds/plain/release.lua");

/// Concurrent callers, each with a key (or a lock) of its own.
const CALLERS: usize = 256;

/// Script calls per second, all callers together, in the paced rounds:
/// under a third of the slowest row's closed-loop rate on this machine.
const PACE: f64 = 40_000.0;

/// What the callers do, one call (or cycle) at a time.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Work {
    /// Nothing: a paced caller wakes on its schedule and calls nothing,
    /// what the pacing itself costs.
    Pacing,
    /// redis-rs alone: `EVALSHA` of a one-`INCR` script.
    Script,
    /// redis-rs alone: `EVALSHA` of our GCRA script, with the keys and
    /// arguments of our decision: what Redis's share of the work does to
    /// the client's (a busier server answers in smaller batches).
    GcraScript,
    /// Our GCRA decision.
    Decision,
    /// redis-rs alone: `EVALSHA` of our lock's acquire script, then of its
    /// release script, with our keys and arguments (two calls).
    LockScripts,
    /// Our lock, taken and released (two calls), with a fixed lease.
    Cycle,
    /// The same with the default lease (a watchdog renews it).
    CycleWatchdog,
}

impl Work {
    /// The pacing first and redis-rs alone second: [`rounds`] counts on it.
    const ALL: [Work; 7] = [
        Work::Pacing,
        Work::Script,
        Work::GcraScript,
        Work::Decision,
        Work::LockScripts,
        Work::Cycle,
        Work::CycleWatchdog,
    ];

    fn named(name: &str) -> Option<Work> {
        Work::ALL.into_iter().find(|work| work.name() == name)
    }

    fn name(self) -> &'static str {
        match self {
            Work::Pacing => "pacing",
            Work::Script => "script",
            Work::GcraScript => "gcra-script",
            Work::Decision => "decision",
            Work::LockScripts => "lock-scripts",
            Work::Cycle => "cycle",
            Work::CycleWatchdog => "watchdog",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Work::Pacing => "the pacing alone (no call), per unit",
            Work::Script => "redis-rs alone, `EVALSHA` of a one-`INCR` script",
            Work::GcraScript => "redis-rs alone, `EVALSHA` of our GCRA script",
            Work::Decision => "ours, GCRA decision",
            Work::LockScripts => {
                "redis-rs alone, `EVALSHA` of our lock's acquire and release scripts, per cycle"
            }
            Work::Cycle => "ours, lock acquire + release (10 s lease), per cycle",
            Work::CycleWatchdog => "ours, the same with the default watchdog lease",
        }
    }

    /// Script calls per unit of work.
    fn calls(self) -> f64 {
        match self {
            Work::Pacing | Work::Script | Work::GcraScript | Work::Decision => 1.0,
            Work::LockScripts | Work::Cycle | Work::CycleWatchdog => 2.0,
        }
    }
}

/// The CPU time so far of every thread of this process, in nanoseconds,
/// and how many times it was put on a CPU (a wake-up, or a return after
/// preemption), from `/proc/self/task/<tid>/schedstat` (its first and
/// third fields).
fn threads_cpu() -> Result<HashMap<u32, Spent>, Error> {
    let mut cpu = HashMap::new();
    for task in std::fs::read_dir("/proc/self/task")? {
        let task = task?;
        // A thread may end between the listing and the read.
        let Ok(stat) = std::fs::read_to_string(task.path().join("schedstat")) else {
            continue;
        };
        let mut fields = stat.split_whitespace();
        let ns = fields.next().ok_or("empty schedstat")?.parse()?;
        let runs = fields.nth(1).ok_or("short schedstat")?.parse()?;
        cpu.insert(
            task.file_name().to_string_lossy().parse()?,
            Spent { ns, runs },
        );
    }
    Ok(cpu)
}

/// What the threads of this process spent: CPU nanoseconds, and times
/// put on a CPU.
#[derive(Clone, Copy, Default)]
struct Spent {
    ns: u64,
    runs: u64,
}

/// What the threads alive now spent since `before` (a thread started
/// meanwhile counts from zero; the runtime's threads live through).
fn cpu_since(before: &HashMap<u32, Spent>) -> Result<Spent, Error> {
    Ok(threads_cpu()?
        .iter()
        .fold(Spent::default(), |sum, (tid, now)| {
            let then = before.get(tid).copied().unwrap_or_default();
            Spent {
                ns: sum.ns + now.ns.saturating_sub(then.ns),
                runs: sum.runs + now.runs.saturating_sub(then.runs),
            }
        }))
}

/// Client CPU nanoseconds per unit of `work`, units per second, and the
/// client's threads' wake-ups per unit, with
/// [`CALLERS`] tasks at once for `run_for`: each calling again as soon as
/// it is answered, or with `paced`, all together at [`PACE`] script calls a
/// second, each on a schedule of its own.
async fn measure<C>(
    backend: &RedisBackend<C>,
    work: Work,
    run_for: Duration,
    paced: bool,
) -> Result<(f64, f64, f64), Error>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
    RedisBackend<C>: RateBackend + LockBackend,
{
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let script = Arc::new(match work {
        Work::GcraScript => redis::Script::new(GCRA),
        Work::LockScripts => redis::Script::new(&LOCK_ACQUIRE.concat()),
        _ => redis::Script::new("return redis.call('INCR', KEYS[1])"),
    });
    // Sent as our release sends it: on sharded channels where the backend
    // wakes waiters on them.
    let release = Arc::new(redis::Script::new(&if backend.sharded_pubsub() {
        LOCK_RELEASE.replace("'PUBLISH'", "'SPUBLISH'")
    } else {
        LOCK_RELEASE.to_owned()
    }));
    let limiter = RateLimiter::new(backend.clone(), "cpu", gcra_policy())?;
    let fixed = LockOptions::new().lease(Duration::from_secs(10));
    let mut tasks = Vec::with_capacity(CALLERS);
    // Each caller's period, and where in it the caller starts: the calls
    // spread evenly over time.
    let period = Duration::from_secs_f64(CALLERS as f64 * work.calls() / PACE);
    let first = tokio::time::Instant::now();
    for caller in 0..CALLERS {
        let (stop, done, script, release) =
            (stop.clone(), done.clone(), script.clone(), release.clone());
        let (backend, limiter) = (backend.clone(), limiter.clone());
        let key = format!("cpu-{caller}");
        let lock = match work {
            Work::CycleWatchdog => Lock::new(backend.clone(), &key)?,
            _ => Lock::with_options(backend.clone(), &key, fixed)?,
        };
        // The plain lock's keys for this caller, from the backend's key
        // space: the lock, its fencing counter, its release channel, and
        // where its releases are remembered (by token).
        let keys = {
            let (space, name) = (backend.keyspace(), Name::new(&key)?);
            [
                space.key(&name, "lock"),
                space.key(&name, "fence"),
                space.key(&name, "released"),
                space.key(&name, "lock:last"),
            ]
        };
        let mut next = first + period.mul_f64(caller as f64 / CALLERS as f64);
        tasks.push(tokio::spawn(async move {
            let mut conn = backend.connection();
            let mut cycles = 0u64;
            while !stop.load(Ordering::Relaxed) {
                if paced || work == Work::Pacing {
                    tokio::time::sleep_until(next).await;
                    next += period;
                }
                match work {
                    Work::Pacing => {}
                    Work::Script => {
                        let _: i64 = script.key(&key).invoke_async(&mut conn).await?;
                    }
                    Work::GcraScript => {
                        // One quota of a billion an hour, in nanosecond ticks.
                        let _: redis::Value = script
                            .key(format!("lock:{{cpu:{key}}}:0"))
                            .arg(1)
                            .arg(3_600)
                            .arg(3_600_000_000_000_u64)
                            .arg(1_000)
                            .invoke_async(&mut conn)
                            .await?;
                    }
                    Work::LockScripts => {
                        // The keys and arguments our plain lock sends, a
                        // fresh 32-digit token each cycle.
                        cycles += 1;
                        let token = format!("{caller:08x}{cycles:024x}");
                        let [lock, fence, channel, last] = &keys;
                        let taken: Vec<i64> = script
                            .key(lock)
                            .key(fence)
                            .arg(&token)
                            .arg(10_000)
                            .arg("0")
                            // The fencing counter's TTL (a week), as ours sends.
                            .arg(604_800_000)
                            .invoke_async(&mut conn)
                            .await?;
                        if taken.first() != Some(&1) {
                            return Err::<(), Error>(format!("{key} was busy").into());
                        }
                        let released: i64 = release
                            .key(lock)
                            .key(format!("{last}:{token}"))
                            .arg(&token)
                            .arg(channel)
                            .arg(RELEASE_REMEMBERED.as_millis() as u64)
                            .invoke_async(&mut conn)
                            .await?;
                        if released != 1 {
                            return Err::<(), Error>(format!("{key} was not released").into());
                        }
                    }
                    Work::Decision => {
                        if !limiter.check(key.as_str()).await?.allowed {
                            return Err::<(), Error>(format!("{key} was refused").into());
                        }
                    }
                    Work::Cycle | Work::CycleWatchdog => {
                        let guard = lock.try_lock().await?.ok_or("busy")?;
                        guard.release().await?;
                    }
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
            Ok(())
        }));
    }
    // Every caller has made its first calls (scripts loaded, subscriber
    // idle) before the count starts.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (before, counted) = (threads_cpu()?, done.load(Ordering::Relaxed));
    let started = tokio::time::Instant::now();
    tokio::time::sleep(run_for).await;
    let (spent, units) = (cpu_since(&before)?, done.load(Ordering::Relaxed) - counted);
    let elapsed = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await??;
    }
    let units = units.max(1) as f64;
    Ok((
        spent.ns as f64 / units,
        units / elapsed.as_secs_f64(),
        spent.runs as f64 / units,
    ))
}

/// One setup's figures, over interleaved rounds: per work, the CPU per
/// unit of each round and its ratio to redis-rs alone per script call
/// (per unit divided by its calls) in the same round; `paced`, each row's
/// CPU per unit less the pacing's per unit before the ratio (the pacing
/// row is run only then).
async fn rounds<C>(
    backend: &RedisBackend<C>,
    rounds: usize,
    run_for: Duration,
    paced: bool,
) -> Result<Vec<Figures>, Error>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
    RedisBackend<C>: RateBackend + LockBackend,
{
    let mut figures: Vec<Figures> = Work::ALL.iter().map(|_| Figures::default()).collect();
    for round in 0..rounds {
        // Every other round in the reverse order, so that no work always
        // comes first or right after another.
        let mut order: Vec<usize> = (0..Work::ALL.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        let mut ns = [0.0; Work::ALL.len()];
        for i in order {
            if Work::ALL[i] == Work::Pacing && !paced {
                continue;
            }
            let (per_unit, rate, wakes) = measure(backend, Work::ALL[i], run_for, paced).await?;
            ns[i] = per_unit;
            figures[i].rate.push(rate);
            figures[i].wakes.push(wakes / Work::ALL[i].calls());
        }
        // Work::ALL[0] is the pacing, Work::ALL[1] redis-rs alone: the
        // reference of the round.
        // Every unit of work (a lock cycle too) waits for its turn once,
        // as each unit of the pacing does: one unit of it comes off.
        let pacing = ns[0];
        let net = |work: Work, ns: f64| (ns - pacing) / work.calls();
        let reference = net(Work::Script, ns[1]);
        for ((work, figures), ns) in Work::ALL.into_iter().zip(&mut figures).zip(ns) {
            figures.ns.push(ns);
            figures.ratio.push(net(work, ns) / reference);
        }
    }
    Ok(figures)
}

#[derive(Default)]
struct Figures {
    ns: Vec<f64>,
    rate: Vec<f64>,
    /// The client's threads' wake-ups per script call.
    wakes: Vec<f64>,
    ratio: Vec<f64>,
}

impl Figures {
    /// `µs (quartiles) | per second | wake-ups per call | ratio
    /// (quartiles)` of the median round.
    fn cells(&self) -> String {
        let (ns, ns_low, ns_high) = median_and_quartiles(self.ns.clone());
        let (rate, _, _) = median_and_quartiles(self.rate.clone());
        let (wakes, _, _) = median_and_quartiles(self.wakes.clone());
        let (ratio, low, high) = median_and_quartiles(self.ratio.clone());
        format!(
            "{:.1} ({:.1} to {:.1}) | {:.0}k | {wakes:.2} | {ratio:.2}x ({low:.2} to {high:.2})",
            ns / 1e3,
            ns_low / 1e3,
            ns_high / 1e3,
            rate / 1e3
        )
    }
}

pub(super) async fn client_cpu(quick: bool) -> Result<(), Error> {
    let server = RedisServer::start();
    let cluster = RedisCluster::start();
    let one = RedisBackend::connect(&server.url()).await?;
    let many = cluster.connect().await;
    // Many short rounds rather than a few long ones: what the other
    // processes on the machine do drifts from second to second, and a ratio
    // within a round compares figures taken close together.
    let (n, run_for) = if quick {
        (5, Duration::from_millis(400))
    } else {
        (15, Duration::from_millis(700))
    };
    println!(
        "CPU time of this process (every thread, from /proc/self/task/*/schedstat) per call, {CALLERS} tasks on the 2-thread runtime, {run_for:?} per figure, {n} interleaved rounds; the median round, quartiles in brackets. Ratio: per script call (a lock cycle is two) to redis-rs alone in the same round. Closed loop (each task calls again when answered), then paced ({PACE:.0} script calls/s in all)\n"
    );
    for (label, figures, paced) in [
        ("one server", rounds(&one, n, run_for, false).await?, false),
        (
            "cluster (3 masters)",
            rounds(&many, n, run_for, false).await?,
            false,
        ),
        (
            "one server, paced",
            rounds(&one, n, run_for, true).await?,
            true,
        ),
        (
            "cluster (3 masters), paced",
            rounds(&many, n, run_for, true).await?,
            true,
        ),
    ] {
        let ratio = if paced {
            "ratio per call, the pacing taken off"
        } else {
            "ratio per call"
        };
        println!(
            "| {label}: client CPU per call | µs | per second | client thread wake-ups per call | {ratio} |"
        );
        println!("|---|---:|---:|---:|---:|");
        for (work, figures) in Work::ALL.into_iter().zip(&figures) {
            if work == Work::Pacing && !paced {
                continue;
            }
            println!("| {} | {} |", work.label(), figures.cells());
        }
        println!();
    }
    Ok(())
}

/// One work alone for `seconds`, for a profiler: `--cpu-loop <work>
/// <seconds> [cluster]`, work one of `script`, `gcra-script`, `decision`,
/// `lock-scripts`, `cycle`, `watchdog`.
pub(super) async fn cpu_loop(mut args: impl Iterator<Item = String>) -> Result<(), Error> {
    let usage =
        "--cpu-loop script|gcra-script|decision|lock-scripts|cycle|watchdog <seconds> [cluster]";
    let work = args.next().as_deref().and_then(Work::named).ok_or(usage)?;
    let run_for = Duration::from_secs_f64(args.next().ok_or(usage)?.parse()?);
    let (ns, rate, wakes) = if args.next().as_deref() == Some("cluster") {
        let cluster = RedisCluster::start();
        measure(&cluster.connect().await, work, run_for, false).await?
    } else {
        let server = RedisServer::start();
        let backend = RedisBackend::connect(&server.url()).await?;
        measure(&backend, work, run_for, false).await?
    };
    println!(
        "{}: {:.2} µs CPU per unit, {rate:.0}/s, {wakes:.2} thread wake-ups per unit",
        work.label(),
        ns / 1e3
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_spent_cpu() {
        let before = threads_cpu().expect("schedstat");
        assert!(!before.is_empty());
        let mut x = 0u64;
        for i in 0..1_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        let spent = cpu_since(&before).expect("schedstat");
        assert!(spent.ns > 0);
    }
}
