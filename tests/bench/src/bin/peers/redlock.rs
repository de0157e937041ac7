//! Section 3: Redlock over 5 servers, against a single server, `rslock`
//! and the fan-out of redis-rs alone.

use std::time::{Duration, Instant};

use lock_bench::Error;
use lock_core::backend::RedisBackend;
use lock_core::lock::{Lock, LockBackend, LockOptions, Redlock};
use lock_tests::RedisServer;
use lock_tests::latency::DelayProxy;

use crate::locks::{handoff, handoff_row, rslock_handoffs};
use crate::{Scale, micros, percentile, ratio_row};

/// Times one uncontended acquire, and the acquire with its release.
async fn timed<B: LockBackend>(lock: &Lock<B>) -> Result<(Duration, Duration), Error> {
    let started = Instant::now();
    let guard = lock.try_lock().await?.ok_or("busy")?;
    let acquire = started.elapsed();
    guard.release().await?;
    Ok((acquire, started.elapsed()))
}

/// The floor under a Redlock acquire on this machine: redis-rs alone (no
/// lock logic) sends the `SET NX PX` an uncontended Redlock acquire sends
/// (`try_lock`, or the first attempt of `lock`) to each of `conns` at
/// once; the time until `wanted` have answered.
/// The keys are deleted afterwards, untimed.
async fn fan_out(
    conns: &[redis::aio::ConnectionManager],
    key: &str,
    wanted: usize,
) -> Result<Duration, Error> {
    use futures_util::StreamExt;
    let started = Instant::now();
    let mut pending: futures_util::stream::FuturesUnordered<_> = conns
        .iter()
        .map(|conn| {
            let mut conn = conn.clone();
            async move {
                redis::cmd("SET")
                    .arg(key)
                    .arg("token")
                    .arg("NX")
                    .arg("PX")
                    .arg(10_000)
                    .query_async::<Option<String>>(&mut conn)
                    .await
            }
        })
        .collect();
    let mut answered = 0;
    let mut elapsed = Duration::ZERO;
    while let Some(answer) = pending.next().await {
        answer?;
        answered += 1;
        if answered == wanted {
            elapsed = started.elapsed();
        }
    }
    for conn in conns {
        redis::cmd("DEL")
            .arg(key)
            .query_async::<i64>(&mut conn.clone())
            .await?;
    }
    Ok(elapsed)
}

pub(super) async fn redlock(scale: &Scale) -> Result<(), Error> {
    let servers = RedisServer::start_many(5);
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let url_refs: Vec<&str> = urls.iter().map(String::as_str).collect();
    let options = LockOptions::new().lease(Duration::from_secs(10));
    let ours_lock = Lock::with_options(Redlock::connect(&url_refs).await?, "red", options)?;
    let single = Lock::with_options(RedisBackend::connect(&urls[0]).await?, "one", options)?;
    // Redlock over 1 and 3 of the same servers: how the cost grows with the
    // number of servers, apart from the algorithm's fixed overhead.
    let red1 = Lock::with_options(Redlock::connect(&url_refs[..1]).await?, "red1", options)?;
    let red3 = Lock::with_options(Redlock::connect(&url_refs[..3]).await?, "red3", options)?;
    // Redlock over 5 databases of the first server: the same five
    // connections and requests, answered by one process instead of five.
    let db_urls: Vec<String> = (0..5).map(|db| format!("{}{db}", urls[0])).collect();
    let db_refs: Vec<&str> = db_urls.iter().map(String::as_str).collect();
    let red_dbs = Lock::with_options(Redlock::connect(&db_refs).await?, "reddb", options)?;
    let theirs = rslock::LockManager::new(urls.clone());
    let mut raw = Vec::new();
    for server in &servers {
        raw.push(redis::aio::ConnectionManager::new(server.client()).await?);
    }
    let n = scale.iterations / 4;
    // Acquire+release, and the acquire alone, for each lock.
    let mut samples: [Vec<Duration>; 6] = Default::default();
    let mut acquires: [Vec<Duration>; 6] = Default::default();
    let (mut raw_one, mut raw_quorum) = (Vec::new(), Vec::new());
    for _ in 0..n {
        raw_one.push(fan_out(&raw[..1], "raw", 1).await?);
        raw_quorum.push(fan_out(&raw, "raw", 3).await?);
        for (lock, out) in [&ours_lock, &red1, &red3, &red_dbs]
            .into_iter()
            .zip([0, 2, 3, 5])
        {
            let (acquire, both) = timed(lock).await?;
            acquires[out].push(acquire);
            samples[out].push(both);
        }
        let (acquire, both) = timed(&single).await?;
        acquires[1].push(acquire);
        samples[1].push(both);
        let started = Instant::now();
        let lock = theirs.lock("rs-red", Duration::from_secs(10)).await?;
        acquires[4].push(started.elapsed());
        theirs.unlock(&lock).await;
        samples[4].push(started.elapsed());
    }
    println!("| operation | ours (5 servers) | reference | ratio |");
    println!("|---|---:|---:|---:|");
    for (operation, samples) in [
        ("acquire+release", &mut samples),
        ("acquire", &mut acquires),
    ] {
        let [ours, one, one_of_red, three, rs, dbs] = samples;
        for (label, q) in [("p50", 0.5), ("p99", 0.99)] {
            let o = percentile(ours, q);
            for (reference, value) in [
                ("ours on 1 server (plain lock)", percentile(one, q)),
                ("rslock (5 servers)", percentile(rs, q)),
                ("ours, Redlock over 1 server", percentile(one_of_red, q)),
                ("ours, Redlock over 3 servers", percentile(three, q)),
                (
                    "ours, Redlock over 5 databases of 1 server",
                    percentile(dbs, q),
                ),
            ] {
                ratio_row(&format!("{operation}, {label}"), o, reference, value);
            }
        }
    }
    let quantiles = [("p50", 0.5), ("p99", 0.99)];
    for (label, q) in quantiles {
        let (o, quorum) = (
            percentile(&mut acquires[0], q),
            percentile(&mut raw_quorum, q),
        );
        let reference =
            "redis-rs alone, the same `SET NX PX` to the 5 at once, until the 3rd answer";
        ratio_row(&format!("acquire, {label}"), o, reference, quorum);
    }
    // The loop above runs in the main future, on the thread that blocks on
    // the runtime, so each command crosses to a worker thread (where the
    // connections' driver tasks run) and back. A request handler runs in a
    // spawned task on a worker instead.
    let spawned = tokio::spawn(async move {
        let mut acquires: [Vec<Duration>; 2] = Default::default();
        for _ in 0..n {
            acquires[0].push(timed(&ours_lock).await?.0);
            acquires[1].push(timed(&single).await?.0);
        }
        Ok::<_, Error>(acquires)
    });
    let [mut ours, mut one] = spawned.await??;
    for (label, q) in quantiles {
        let (o, value) = (percentile(&mut ours, q), percentile(&mut one, q));
        let reference = "ours on 1 server (plain lock), also spawned";
        ratio_row(
            &format!("acquire from a spawned task, {label}"),
            o,
            reference,
            value,
        );
    }

    println!(
        "\nThe fan-out alone (redis-rs, no lock logic: the `SET NX PX` an uncontended Redlock acquire sends to each server)\n"
    );
    println!("| measure | to the 5 at once, until the 3rd answer | to 1 server | ratio |");
    println!("|---|---:|---:|---:|");
    for (label, q) in quantiles {
        let (quorum, one) = (percentile(&mut raw_quorum, q), percentile(&mut raw_one, q));
        println!(
            "| {label} | {} | {} | {:.2}x |",
            micros(quorum),
            micros(one),
            quorum.as_secs_f64() / one.as_secs_f64()
        );
    }

    // Handoff over the 5 servers: our waiter is woken by the release
    // message, rslock's retries after a random delay. Ours is also shown
    // with its retry delay raised to 10 s, so only a wake-up can explain
    // a fast handoff. Holder and waiter are separate clients with
    // connections of their own, as rslock's are.
    let holder = Lock::with_options(Redlock::connect(&url_refs).await?, "red-handoff", options)?;
    let waiter = Lock::with_options(Redlock::connect(&url_refs).await?, "red-handoff", options)?;
    let slow = Redlock::connect(&url_refs)
        .await?
        .retry_delay(Duration::from_secs(10));
    let slow_waiter = Lock::with_options(slow, "red-handoff", options)?;
    let slow_holder = holder.clone();
    let handoffs = scale.handoffs / 3;
    let (mut ours, mut ours_slow) = (Vec::new(), Vec::new());
    for _ in 0..handoffs {
        ours.push(handoff(&holder, &waiter).await?);
        ours_slow.push(handoff(&slow_holder, &slow_waiter).await?);
    }
    let mut theirs = rslock_handoffs(&urls, Duration::from_millis(10), handoffs).await?;
    let mut theirs_default =
        rslock_handoffs(&urls, Duration::from_millis(200), handoffs / 2).await?;
    println!(
        "\nHandoff over the 5 servers (release -> next holder), {handoffs} handoffs ({} for rslock's default)\n",
        handoffs / 2
    );
    println!("| measure | ours (5 servers, retry delay 50 ms) | reference | ratio |");
    println!("|---|---:|---:|---:|");
    for (label, q) in [("p50", 0.5), ("p99", 0.99)] {
        let o = percentile(&mut ours, q);
        for (reference, value) in [
            (
                "ours with the retry delay at 10 s",
                percentile(&mut ours_slow, q),
            ),
            ("rslock, retry delay 10 ms", percentile(&mut theirs, q)),
            (
                "rslock, default retry delay 200 ms",
                percentile(&mut theirs_default, q),
            ),
        ] {
            handoff_row(label, o, reference, value);
        }
    }
    with_latency(&servers, scale).await
}

/// How long the delay proxies hold bytes in each direction: round trips of
/// at least 0.2 ms and 1 ms, as between machines in one rack and across a
/// data centre.
const ONE_WAY: [Duration; 2] = [Duration::from_micros(100), Duration::from_micros(500)];

/// The acquire over 5 servers against one, with every connection behind a
/// [`DelayProxy`]: round trips then wait on the (simulated) network as well
/// as on this machine's two cores, and requests sent at once wait in
/// parallel.
async fn with_latency(servers: &[RedisServer], scale: &Scale) -> Result<(), Error> {
    let rounds = (scale.iterations / 40).max(20);
    println!(
        "\nThe acquire behind delay proxies, which hold every chunk of bytes a fixed time each way (as a network between machines would), {rounds} rounds per delay\n"
    );
    println!(
        "| delay each way | plain lock (1 server), p50 | Redlock (5 servers), p50 | Redlock (5) / plain, p50 | p99 | Redlock (3) / plain, p50 | rslock (5) / plain, p50 | redis-rs alone, 3rd answer of 5 / 1 server, p50 |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for one_way in ONE_WAY {
        let mut acquires = acquires_behind(servers, one_way, rounds).await?;
        let p50 = |acquires: &mut [Vec<Duration>; 6], i: usize| percentile(&mut acquires[i], 0.5);
        let ratio = |a: Duration, b: Duration| format!("{:.2}x", a.as_secs_f64() / b.as_secs_f64());
        let (red5, plain) = (p50(&mut acquires, 0), p50(&mut acquires, 1));
        let p99 = ratio(
            percentile(&mut acquires[0], 0.99),
            percentile(&mut acquires[1], 0.99),
        );
        println!(
            "| {} us | {} | {} | {} | {p99} | {} | {} | {} |",
            one_way.as_micros(),
            micros(plain),
            micros(red5),
            ratio(red5, plain),
            ratio(p50(&mut acquires, 2), plain),
            ratio(p50(&mut acquires, 3), plain),
            ratio(p50(&mut acquires, 4), p50(&mut acquires, 5)),
        );
    }
    Ok(())
}

/// Acquire times behind proxies to `servers` that add `one_way` each way:
/// Redlock over 5, the plain lock on 1, Redlock over 3, `rslock` over 5,
/// and the redis-rs fan-out to 5 until the 3rd answer and to 1, `rounds`
/// of each, interleaved.
async fn acquires_behind(
    servers: &[RedisServer],
    one_way: Duration,
    rounds: usize,
) -> Result<[Vec<Duration>; 6], Error> {
    let proxies: Vec<DelayProxy> = servers
        .iter()
        .map(|server| DelayProxy::to_server(server, one_way))
        .collect();
    let urls: Vec<String> = proxies.iter().map(DelayProxy::url).collect();
    let url_refs: Vec<&str> = urls.iter().map(String::as_str).collect();
    let options = LockOptions::new().lease(Duration::from_secs(10));
    let red5 = Lock::with_options(Redlock::connect(&url_refs).await?, "lat5", options)?;
    let red3 = Lock::with_options(Redlock::connect(&url_refs[..3]).await?, "lat3", options)?;
    let single = Lock::with_options(RedisBackend::connect(&urls[0]).await?, "lat1", options)?;
    let theirs = rslock::LockManager::new(urls.clone());
    let mut raw = Vec::new();
    for url in &urls {
        raw.push(redis::aio::ConnectionManager::new(redis::Client::open(url.as_str())?).await?);
    }
    let mut acquires: [Vec<Duration>; 6] = Default::default();
    for _ in 0..rounds {
        acquires[0].push(timed(&red5).await?.0);
        acquires[1].push(timed(&single).await?.0);
        acquires[2].push(timed(&red3).await?.0);
        let started = Instant::now();
        let lock = theirs.lock("rs-lat", Duration::from_secs(10)).await?;
        acquires[3].push(started.elapsed());
        theirs.unlock(&lock).await;
        acquires[4].push(fan_out(&raw, "raw-lat", 3).await?);
        acquires[5].push(fan_out(&raw[..1], "raw-lat", 1).await?);
    }
    Ok(acquires)
}

/// One Redlock acquire and release after another over 5 servers, for a
/// profiler: `--redlock-loop ours|raw <rounds>`. `raw` is redis-rs alone,
/// with no lock logic: the same `SET NX PX` to the 5 at once, then a `DEL`
/// to each (ours releases by its compare-and-delete script instead).
pub(super) async fn redlock_loop(mut args: impl Iterator<Item = String>) -> Result<(), Error> {
    let usage = "--redlock-loop ours|raw <rounds>";
    let work = args.next().ok_or(usage)?;
    let rounds: usize = args.next().ok_or(usage)?.parse()?;
    let servers = RedisServer::start_many(5);
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let url_refs: Vec<&str> = urls.iter().map(String::as_str).collect();
    let elapsed = match work.as_str() {
        "ours" => {
            let options = LockOptions::new().lease(Duration::from_secs(10));
            let lock = Lock::with_options(Redlock::connect(&url_refs).await?, "loop", options)?;
            let started = Instant::now();
            for _ in 0..rounds {
                timed(&lock).await?;
            }
            started.elapsed()
        }
        "raw" => {
            let mut raw = Vec::new();
            for server in &servers {
                raw.push(redis::aio::ConnectionManager::new(server.client()).await?);
            }
            let started = Instant::now();
            for _ in 0..rounds {
                fan_out(&raw, "loop", 3).await?;
            }
            started.elapsed()
        }
        _ => return Err(usage.into()),
    };
    println!(
        "{work}: {:.1} us per acquire and release",
        elapsed.as_secs_f64() * 1e6 / rounds as f64
    );
    Ok(())
}
