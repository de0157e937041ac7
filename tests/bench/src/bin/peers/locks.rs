//! Section 2: lock latency, uncontended and on handoff, against two round
//! trips and against `rslock`.

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_bench::Error;
use lock_core::backend::RedisBackend;
use lock_core::lock::{Lock, LockBackend, LockOptions};
use lock_tests::RedisServer;
use lock_tests::latency::DelayProxy;

use crate::{Scale, mean, micros, percentile, ratio_row};

/// Mean latency of one unpipelined SET from `redis-benchmark -c 1`.
fn round_trip(server: &RedisServer, n: usize) -> Result<Duration, Error> {
    let out = Command::new("redis-benchmark")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &server.port().to_string(),
            "-q",
            "-c",
            "1",
        ])
        .args(["-n", &n.to_string(), "SET", "rtt", "v"])
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let summary = text.rsplit('\r').next().unwrap_or(&text);
    let rps: f64 = summary
        .split_whitespace()
        .zip(summary.split_whitespace().skip(1))
        .find(|(_, next)| *next == "requests")
        .and_then(|(n, _)| n.parse().ok())
        .ok_or_else(|| format!("unexpected redis-benchmark output: {text:?}"))?;
    Ok(Duration::from_secs_f64(1.0 / rps))
}

pub(super) async fn lock_latency(scale: &Scale) -> Result<(), Error> {
    let server = RedisServer::start();
    let backend = RedisBackend::connect(&server.url()).await?;
    let options = LockOptions::new().lease(Duration::from_secs(10));
    let lock = Lock::with_options(backend.clone(), "bench", options)?;
    let mut samples = Vec::with_capacity(scale.iterations);
    for _ in 0..scale.iterations {
        let started = Instant::now();
        let guard = lock.try_lock().await?.ok_or("busy")?;
        guard.release().await?;
        samples.push(started.elapsed());
    }
    let ours = mean(&samples);
    let two_trips = round_trip(&server, scale.iterations)? * 2;
    // The same two round trips through redis-rs on our shared connection.
    let mut conn = backend.connection();
    let mut pings = Vec::with_capacity(scale.iterations);
    for _ in 0..scale.iterations {
        let started = Instant::now();
        let _: String = redis::cmd("PING").query_async(&mut conn).await?;
        let _: String = redis::cmd("PING").query_async(&mut conn).await?;
        pings.push(started.elapsed());
    }
    let client_trips = mean(&pings);
    println!("| measure | ours | reference | ratio |");
    println!("|---|---:|---:|---:|");
    let measure = "uncontended acquire+release, mean";
    let reference = "two round trips (redis-benchmark -c 1)";
    ratio_row(measure, ours, reference, two_trips);
    let reference = "two PINGs through redis-rs on the same connection";
    ratio_row(measure, ours, reference, client_trips);

    // Handoff: the holder releases; how long until the waiter holds it?
    // Each handoff starts after 3 ms of idle, and a round trip after idle
    // costs more than one back to back (sleeping threads and vCPUs must be
    // woken), so a PING after the same idle is measured alongside.
    // The fair lock's release hands the lock to the first waiter in the
    // same script and tells it so: no attempt of the waiter's own follows.
    let waiter = Lock::with_options(backend.clone(), "handoff", options)?;
    let holder = Lock::with_options(backend.clone(), "handoff", options)?;
    let fair = options.fair(true);
    let fair_waiter = Lock::with_options(backend.clone(), "fair-handoff", fair)?;
    let fair_holder = Lock::with_options(backend, "fair-handoff", fair)?;
    let mut ours = Vec::with_capacity(scale.handoffs);
    let mut ours_fair = Vec::with_capacity(scale.handoffs);
    let mut idle_pings = Vec::with_capacity(scale.handoffs);
    for _ in 0..scale.handoffs {
        tokio::time::sleep(Duration::from_millis(3)).await;
        let started = Instant::now();
        let _: String = redis::cmd("PING").query_async(&mut conn).await?;
        idle_pings.push(started.elapsed());
        ours.push(handoff(&holder, &waiter).await?);
        ours_fair.push(handoff(&fair_holder, &fair_waiter).await?);
    }
    let urls = [server.url()];
    let mut theirs = rslock_handoffs(&urls, Duration::from_millis(10), scale.handoffs).await?;
    let mut theirs_default =
        rslock_handoffs(&urls, Duration::from_millis(200), scale.handoffs / 5).await?;
    for (lock, ours) in [("", &mut ours), (", fair lock", &mut ours_fair)] {
        for (label, q) in [("p50", 0.5), ("p99", 0.99)] {
            let (o, t, d) = (
                percentile(ours, q),
                percentile(&mut theirs, q),
                percentile(&mut theirs_default, q),
            );
            let label = format!("{label}{lock}");
            let ping = percentile(&mut idle_pings, q);
            let reference = "one PING after the same 3 ms idle";
            ratio_row(&format!("handoff {label}"), o, reference, ping);
            for (reference, t) in [
                ("rslock, retry delay 10 ms", t),
                ("rslock, default retry delay 200 ms", d),
            ] {
                handoff_row(&label, o, reference, t);
            }
        }
    }
    handoffs_with_latency(&server, scale, options).await
}

/// Handoffs with every connection behind a [`DelayProxy`] (holder and waiter
/// on one client, as two tasks of one service on another machine would be):
/// there the plain lock's waiter, woken by the release, still needs a round
/// trip of its own, and the fair lock's does not.
async fn handoffs_with_latency(
    server: &RedisServer,
    scale: &Scale,
    options: LockOptions,
) -> Result<(), Error> {
    let rounds = (scale.handoffs / 2).max(20);
    println!(
        "\nHandoff behind a delay proxy, which holds every chunk of bytes a fixed time each way (as a network between machines would), {rounds} handoffs per delay\n"
    );
    println!(
        "| delay each way | one PING after the same 3 ms idle, p50 | plain lock, p50 | fair lock, p50 | fair / plain, p50 | rslock (retry delay 10 ms), p50 | plain / PING | fair / PING |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for one_way in [Duration::from_micros(100), Duration::from_micros(500)] {
        let proxy = DelayProxy::to_server(server, one_way);
        let backend = RedisBackend::connect(&proxy.url()).await?;
        let mut conn = backend.connection();
        let fair = options.fair(true);
        let plain = Lock::with_options(backend.clone(), "far-handoff", options)?;
        let fair = Lock::with_options(backend, "far-fair-handoff", fair)?;
        let (mut pings, mut ours, mut ours_fair) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..rounds {
            tokio::time::sleep(Duration::from_millis(3)).await;
            let started = Instant::now();
            let _: String = redis::cmd("PING").query_async(&mut conn).await?;
            pings.push(started.elapsed());
            ours.push(handoff(&plain, &plain).await?);
            ours_fair.push(handoff(&fair, &fair).await?);
        }
        let mut theirs = rslock_handoffs(&[proxy.url()], Duration::from_millis(10), rounds).await?;
        let [ping, o, f, t] = [&mut pings, &mut ours, &mut ours_fair, &mut theirs]
            .map(|samples| percentile(samples, 0.5));
        let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
        println!(
            "| {} us | {} | {} | {} | {:.2}x | {} | {:.2}x | {:.2}x |",
            one_way.as_micros(),
            micros(ping),
            micros(o),
            micros(f),
            ratio(f, o),
            micros(t),
            ratio(o, ping),
            ratio(f, ping),
        );
    }
    Ok(())
}

/// A handoff table row: ours against a reference, as a ratio and as how
/// many times faster.
pub(super) fn handoff_row(label: &str, ours: Duration, reference: &str, value: Duration) {
    println!(
        "| handoff {label} | {} | {reference}: {} | {:.3}x ({:.1}x faster) |",
        micros(ours),
        micros(value),
        ours.as_secs_f64() / value.as_secs_f64(),
        value.as_secs_f64() / ours.as_secs_f64().max(1e-9)
    );
}

/// One handoff: `holder` takes the lock and `waiter`, in a spawned task,
/// waits for it; the time from the holder calling `release()` to the
/// waiter holding the lock. The waiter has 3 ms to start waiting.
pub(super) async fn handoff<B: LockBackend>(
    holder: &Lock<B>,
    waiter: &Lock<B>,
) -> Result<Duration, Error> {
    let guard = holder.try_lock().await?.ok_or("busy")?;
    let waiter = waiter.clone();
    let next = tokio::spawn(async move {
        let guard = waiter
            .lock(Duration::from_secs(10))
            .await?
            .ok_or("waited 10 s")?;
        let at = Instant::now();
        guard.release().await?;
        Ok::<_, Error>(at)
    });
    tokio::time::sleep(Duration::from_millis(3)).await;
    let released = Instant::now();
    guard.release().await?;
    Ok(next.await??.saturating_duration_since(released))
}

/// Handoff latencies with rslock over `urls`, whose waiter retries after a
/// random delay of up to `delay`.
pub(super) async fn rslock_handoffs(
    urls: &[String],
    delay: Duration,
    handoffs: usize,
) -> Result<Vec<Duration>, Error> {
    let mut a = rslock::LockManager::new(urls.to_vec());
    let mut b = rslock::LockManager::new(urls.to_vec());
    a.set_retry(u32::MAX, delay);
    b.set_retry(u32::MAX, delay);
    let b = Arc::new(b);
    let mut theirs = Vec::with_capacity(handoffs);
    for _ in 0..handoffs {
        let lock = a
            .acquire_no_guard("rs-handoff", Duration::from_secs(10))
            .await?;
        let b = b.clone();
        let next = tokio::spawn(async move {
            let lock = b
                .acquire_no_guard("rs-handoff", Duration::from_secs(10))
                .await?;
            let at = Instant::now();
            b.unlock(&lock).await;
            Ok::<_, Error>(at)
        });
        tokio::time::sleep(Duration::from_millis(3)).await;
        let released = Instant::now();
        a.unlock(&lock).await;
        theirs.push(next.await??.saturating_duration_since(released));
    }
    Ok(theirs)
}
