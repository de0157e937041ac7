//! Section 6: Redis Cluster next to one server. Rate decisions per second
//! at 256 callers whose keys spread over every master, and lock handoff,
//! whose wake-up travels over the sharded channel of the node that owns
//! the lock.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lock_bench::Error;
use lock_core::backend::RedisBackend;
use lock_core::lock::{Lock, LockBackend, LockOptions};
use lock_core::rate::{Algorithm, Policy, Quota, RateBackend, RateLimiter};
use lock_tests::RedisServer;
use lock_tests::cluster::RedisCluster;

use crate::layers::huge;
use crate::locks::handoff;
use crate::{Scale, median_and_quartiles, micros, percentile};

/// Concurrent callers of the throughput rows.
const CALLERS: usize = 256;

/// Decisions per second of `limiter` with [`CALLERS`] tasks, each with a
/// key of its own, over `run_for`.
async fn decisions<B: RateBackend>(
    limiter: &RateLimiter<B>,
    run_for: Duration,
) -> Result<f64, Error> {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(CALLERS);
    for caller in 0..CALLERS {
        let (limiter, stop, done) = (limiter.clone(), stop.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            let key = format!("caller-{caller}");
            while !stop.load(Ordering::Relaxed) {
                let decision = limiter.check(key.as_str()).await?;
                if !decision.allowed {
                    return Err::<(), Error>(format!("{key} was refused").into());
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
            Ok(())
        }));
    }
    tokio::time::sleep(run_for).await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await??;
    }
    Ok(done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64())
}

/// `handoffs` handoffs of locks named in turn, so that they fall on every
/// master of a cluster.
async fn handoffs<B: LockBackend>(backend: &B, handoffs: usize) -> Result<Vec<Duration>, Error> {
    let options = LockOptions::new().lease(Duration::from_secs(10));
    let mut samples = Vec::with_capacity(handoffs);
    for i in 0..handoffs {
        let name = format!("handoff-{}", i % 64);
        let holder = Lock::with_options(backend.clone(), &name, options)?;
        let waiter = Lock::with_options(backend.clone(), &name, options)?;
        samples.push(handoff(&holder, &waiter).await?);
    }
    Ok(samples)
}

pub(super) async fn cluster(scale: &Scale, quick: bool) -> Result<(), Error> {
    let server = RedisServer::start();
    let cluster = RedisCluster::start();
    let one = RedisBackend::connect(&server.url()).await?;
    let many = cluster.connect().await;
    let run_for = Duration::from_millis(if quick { 700 } else { 2000 });
    const ROUNDS: usize = 3;
    println!(
        "Six nodes (three masters, one replica each) and one server, all on this machine; {CALLERS} callers with a key each, {run_for:?} per figure, {ROUNDS} interleaved rounds (the median round shown)\n"
    );
    println!(
        "| decisions/s at {CALLERS} callers | one server | cluster | cluster / one server (quartiles) |"
    );
    println!("|---|---:|---:|---:|");
    for (label, algorithm) in [
        ("GCRA", Algorithm::Gcra),
        ("fixed window", Algorithm::FixedWindow),
    ] {
        let policy = Policy::new(algorithm).quota(Quota::per_hour(huge()));
        let on_one = RateLimiter::new(one.clone(), "bench", policy.clone())?;
        let on_many = RateLimiter::new(many.clone(), "bench", policy)?;
        let (mut ones, mut manys, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            let a = decisions(&on_one, run_for).await?;
            let b = decisions(&on_many, run_for).await?;
            ones.push(a);
            manys.push(b);
            ratios.push(b / a);
        }
        let (ratio, low, high) = median_and_quartiles(ratios);
        let (one_rate, _, _) = median_and_quartiles(ones);
        let (many_rate, _, _) = median_and_quartiles(manys);
        println!(
            "| {label} | {one_rate:.0} | {many_rate:.0} | {ratio:.2}x ({low:.2} to {high:.2}) |"
        );
    }

    let n = scale.handoffs;
    let mut on_one = handoffs(&one, n).await?;
    let mut on_many = handoffs(&many, n).await?;
    println!(
        "\nLock handoff (release to the waiter holding it), {n} handoffs over 64 lock names, so that the cluster's wake-ups come from every master\n"
    );
    println!("| handoff | one server | cluster | cluster / one server |");
    println!("|---|---:|---:|---:|");
    for (label, q) in [("p50", 0.5), ("p99", 0.99)] {
        let (a, b) = (percentile(&mut on_one, q), percentile(&mut on_many, q));
        println!(
            "| {label} | {} | {} | {:.2}x |",
            micros(a),
            micros(b),
            b.as_secs_f64() / a.as_secs_f64().max(1e-9)
        );
    }
    Ok(())
}
