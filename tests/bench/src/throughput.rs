//! Decision throughput next to `redis-benchmark` running the very same call.

use std::num::NonZeroU32;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use lock_core::backend::RedisBackend;
use lock_core::counter::Stock;
use lock_core::rate::{Algorithm, Policy, Quota, RateLimiter};

use lock_tests::RedisServer;

use crate::Error;

/// One kind of decision to measure.
#[derive(Clone)]
pub enum Workload {
    /// A rate-limit check.
    Rate(RateLimiter<RedisBackend>),
    /// A stock decrement.
    Stock(Stock<RedisBackend>),
}

impl Workload {
    /// One call.
    pub async fn call(&self) -> Result<(), Error> {
        match self {
            Workload::Rate(limiter) => {
                limiter.check("bench-key").await?;
            }
            Workload::Stock(stock) => {
                stock.decrement("bench-item", 1).await?;
            }
        }
        Ok(())
    }
}

/// Calls per second with `callers` concurrent tasks over `run_for`.
pub async fn throughput(
    workload: &Workload,
    callers: usize,
    run_for: Duration,
) -> Result<f64, Error> {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..callers {
        let (workload, stop, done) = (workload.clone(), stop.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                workload.call().await?;
                done.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<(), Error>(())
        }));
    }
    tokio::time::sleep(run_for).await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await??;
    }
    Ok(done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64())
}

/// Makes one call while MONITOR watches and returns the EVALSHA it sent.
pub async fn record_call(server: &RedisServer, workload: &Workload) -> Result<Vec<String>, Error> {
    let mut monitor = server.client().get_async_monitor().await?;
    let mut lines = monitor.on_message::<String>();
    workload.call().await?;
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        let Ok(Some(line)) = tokio::time::timeout(Duration::from_secs(5), lines.next()).await
        else {
            break;
        };
        let args = monitor_args(&line);
        if args
            .first()
            .is_some_and(|c| c.eq_ignore_ascii_case("evalsha"))
        {
            return Ok(args);
        }
    }
    Err("no EVALSHA seen by MONITOR".into())
}

/// The quoted arguments of a MONITOR line.
pub fn monitor_args(line: &str) -> Vec<String> {
    let mut args = Vec::new();
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c != '"' {
            continue;
        }
        let mut arg = String::new();
        while let Some(c) = chars.next() {
            match c {
                '"' => break,
                '\\' => arg.extend(chars.next()),
                c => arg.push(c),
            }
        }
        args.push(arg);
    }
    args
}

/// Requests per second reported by `redis-benchmark` for `args`.
pub fn redis_benchmark(
    server: &RedisServer,
    args: &[String],
    requests: u64,
    extra: &[&str],
) -> Result<f64, Error> {
    let out = Command::new("redis-benchmark")
        .args(["-h", "127.0.0.1", "-p", &server.port().to_string(), "-q"])
        .args(["-n", &requests.to_string()])
        .args(extra)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run redis-benchmark (apt-get install redis-tools): {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    // "...: 123456.79 requests per second, p50=..." (the last \r-separated part)
    let summary = text.rsplit('\r').next().unwrap_or(&text);
    summary
        .split_whitespace()
        .zip(summary.split_whitespace().skip(1))
        .find(|(_, next)| *next == "requests")
        .and_then(|(n, _)| n.parse().ok())
        .ok_or_else(|| format!("unexpected redis-benchmark output: {text:?}").into())
}

/// Prints the decision-throughput table: each rate-limit algorithm and stock
/// decrements at 1/16/256 callers, next to `redis-benchmark` on the same call.
///
/// # Errors
/// When the server or `redis-benchmark` fails.
pub async fn throughput_table(quick: bool) -> Result<(), Error> {
    let run_for = Duration::from_millis(if quick { 700 } else { 3000 });
    let requests = if quick { 50_000 } else { 200_000 };
    let server = RedisServer::start();
    let backend = RedisBackend::connect(&server.url()).await?;
    let version = Command::new(lock_tests::server_binary())
        .arg("--version")
        .output()?;
    println!("redis: {}", String::from_utf8_lossy(&version.stdout).trim());
    println!(
        "machine: {} cores; each figure measured for {run_for:?} ({requests} requests for redis-benchmark)\n",
        std::thread::available_parallelism().map_or(0, usize::from)
    );

    let huge = NonZeroU32::new(1_000_000_000).ok_or("limit")?;
    let mut workloads = Vec::new();
    for (label, algorithm) in [
        ("fixed window", Algorithm::FixedWindow),
        ("sliding window", Algorithm::SlidingWindow),
        ("GCRA", Algorithm::Gcra),
    ] {
        let policy = Policy::new(algorithm).quota(Quota::per_hour(huge));
        let limiter = RateLimiter::new(backend.clone(), "bench", policy)?;
        workloads.push((label, Workload::Rate(limiter)));
    }
    let stock = Stock::new(backend.clone());
    stock.set("bench-item", 1 << 50).await?;
    workloads.push(("stock decrement", Workload::Stock(stock)));

    println!(
        "| workload | ours c=1 | ours c=16 | ours c=256 | redis-benchmark -c 50 | redis-benchmark -c 50 -P 16 | c=256 / -c 50 | c=256 / -P 16 |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for (label, workload) in workloads {
        let args = record_call(&server, &workload).await?;
        let mut ours = Vec::new();
        for callers in [1, 16, 256] {
            ours.push(throughput(&workload, callers, run_for).await?);
        }
        let plain = redis_benchmark(&server, &args, requests, &["-c", "50"])?;
        let pipelined = redis_benchmark(&server, &args, requests, &["-c", "50", "-P", "16"])?;
        println!(
            "| {label} | {:.0} | {:.0} | {:.0} | {plain:.0} | {pipelined:.0} | {:.2}x | {:.2}x |",
            ours[0],
            ours[1],
            ours[2],
            ours[2] / plain,
            ours[2] / pipelined
        );
    }
    Ok(())
}
