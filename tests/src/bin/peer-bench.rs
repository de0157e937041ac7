//! Benchmarks against the peers, measured side by side in one run. Every
//! figure comes with a reference measured in the same run, as a ratio.
//!
//! ```text
//! cargo run --release -p lock-tests --features peers --bin peer-bench [-- --quick]
//! ```
//!
//! 1. decision throughput vs `redis-benchmark` on the same call;
//! 2. lock latency: uncontended acquire+release vs two round trips
//!    (`redis-benchmark -c 1`), and handoff (release -> next holder) for our
//!    pub/sub wake-up vs `rslock` (retry polling);
//! 3. Redlock over 5 servers: ours vs `rslock`, and vs our single server;
//! 4. HTTP: axum with our layer (memory) vs `tower_governor`, our layer on
//!    Redis vs no layer, actix-web with our middleware vs `actix-limitation`;
//!    in process, the same layers' time, allocations and (under `valgrind`,
//!    when it is installed) instructions per request;
//! 5. resident memory of the memory backend after one million distinct keys.

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use lock_core::backend::{MemoryBackend, RedisBackend};
use lock_core::lock::{Lock, LockBackend, LockOptions, Redlock};
use lock_core::rate::{Algorithm, Policy, Quota, RateLimiter};
use lock_tests::RedisServer;
use lock_tests::bench::{Error, throughput_table};
use lock_tests::http::TestServer;
use lock_tower::RateLimitLayer;
use lock_tower::key::{GlobalKey, PeerIp};

/// Counts heap allocations, so the layer table can show allocations per
/// request next to time per request.
struct Counting;

static ALLOCATIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator.
#[allow(unsafe_code)] // benchmark instrumentation only
unsafe impl std::alloc::GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: the caller upholds `alloc`'s contract.
        unsafe { std::alloc::System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        // SAFETY: the caller upholds `dealloc`'s contract.
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: the caller upholds `realloc`'s contract.
        unsafe { std::alloc::System.realloc(ptr, layout, new) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

struct Scale {
    iterations: usize,
    handoffs: usize,
    http_for: Duration,
    keys: usize,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Error> {
    let quick = std::env::args().any(|a| a == "--quick");
    let scale = if quick {
        Scale {
            iterations: 2_000,
            handoffs: 100,
            http_for: Duration::from_secs(3),
            keys: 1_000_000,
        }
    } else {
        Scale {
            iterations: 10_000,
            handoffs: 300,
            http_for: Duration::from_secs(7),
            keys: 1_000_000,
        }
    };
    if std::env::args().any(|a| a == "--memory-probe") {
        return memory(&scale).await;
    }
    let mut layer_loop_args = std::env::args().skip_while(|a| a != "--layer-loop").skip(1);
    if let Some(router) = layer_loop_args.next() {
        let n = layer_loop_args
            .next()
            .ok_or("--layer-loop <router> <requests>")?
            .parse()?;
        return layer_loop(&router, n).await;
    }
    // `--only 3,4` runs just those sections.
    let only: Option<Vec<String>> = std::env::args()
        .skip_while(|a| a != "--only")
        .nth(1)
        .map(|list| list.split(',').map(str::to_owned).collect());
    let run = |section: &str| only.as_ref().is_none_or(|o| o.iter().any(|s| s == section));
    if run("1") {
        println!("## 1. Decision throughput\n");
        throughput_table(quick).await?;
    }
    if run("2") {
        println!("\n## 2. Lock latency\n");
        lock_latency(&scale).await?;
    }
    if run("3") {
        println!("\n## 3. Redlock over 5 servers\n");
        redlock(&scale).await?;
    }
    if run("4") || run("4a") {
        println!("\n## 4. HTTP\n");
        layer_cost(&scale).await?;
    }
    if run("4") || run("4i") {
        layer_instructions(quick)?;
    }
    if run("4") || run("4c") {
        actix_layer_cost(&scale)?;
    }
    if run("4") {
        http(&scale).await?;
    }
    if run("5") {
        println!("\n## 5. Memory\n");
        // In a fresh process, so the heap left by the sections before does
        // not blur the figures.
        let status = Command::new(std::env::current_exe()?)
            .arg("--memory-probe")
            .status()?;
        if !status.success() {
            return Err(format!("memory probe failed: {status}").into());
        }
    }
    Ok(())
}

fn micros(d: Duration) -> String {
    format!("{:.0} us", d.as_secs_f64() * 1e6)
}

fn percentile(samples: &mut [Duration], q: f64) -> Duration {
    samples.sort_unstable();
    samples
        .get(((samples.len().max(1) - 1) as f64 * q).round() as usize)
        .copied()
        .unwrap_or_default()
}

fn mean(samples: &[Duration]) -> Duration {
    samples.iter().sum::<Duration>() / u32::try_from(samples.len().max(1)).unwrap_or(u32::MAX)
}

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

async fn lock_latency(scale: &Scale) -> Result<(), Error> {
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
    let waiter = Lock::with_options(backend.clone(), "handoff", options)?;
    let holder = Lock::with_options(backend, "handoff", options)?;
    let mut ours = Vec::with_capacity(scale.handoffs);
    let mut idle_pings = Vec::with_capacity(scale.handoffs);
    for _ in 0..scale.handoffs {
        tokio::time::sleep(Duration::from_millis(3)).await;
        let started = Instant::now();
        let _: String = redis::cmd("PING").query_async(&mut conn).await?;
        idle_pings.push(started.elapsed());
        ours.push(handoff(&holder, &waiter).await?);
    }
    let urls = [server.url()];
    let mut theirs = rslock_handoffs(&urls, Duration::from_millis(10), scale.handoffs).await?;
    let mut theirs_default =
        rslock_handoffs(&urls, Duration::from_millis(200), scale.handoffs / 5).await?;
    for (label, q) in [("p50", 0.5), ("p99", 0.99)] {
        let (o, t, d) = (
            percentile(&mut ours, q),
            percentile(&mut theirs, q),
            percentile(&mut theirs_default, q),
        );
        let ping = percentile(&mut idle_pings, q);
        let reference = "one PING after the same 3 ms idle";
        ratio_row(&format!("handoff {label}"), o, reference, ping);
        for (reference, t) in [
            ("rslock, retry delay 10 ms", t),
            ("rslock, default retry delay 200 ms", d),
        ] {
            handoff_row(label, o, reference, t);
        }
    }
    Ok(())
}

/// A table row: ours against a reference, and the ratio.
fn ratio_row(measure: &str, ours: Duration, reference: &str, value: Duration) {
    println!(
        "| {measure} | {} | {reference}: {} | {:.2}x |",
        micros(ours),
        micros(value),
        ours.as_secs_f64() / value.as_secs_f64()
    );
}

/// A handoff table row: ours against a reference, as a ratio and as how
/// many times faster.
fn handoff_row(label: &str, ours: Duration, reference: &str, value: Duration) {
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
async fn handoff<B: LockBackend>(holder: &Lock<B>, waiter: &Lock<B>) -> Result<Duration, Error> {
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
async fn rslock_handoffs(
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

/// Times one uncontended acquire, and the acquire with its release.
async fn timed<B: LockBackend>(lock: &Lock<B>) -> Result<(Duration, Duration), Error> {
    let started = Instant::now();
    let guard = lock.try_lock().await?.ok_or("busy")?;
    let acquire = started.elapsed();
    guard.release().await?;
    Ok((acquire, started.elapsed()))
}

/// The floor under a Redlock acquire on this machine: redis-rs alone (no
/// lock logic) sends the `SET NX PX` + `PTTL` pipeline a Redlock acquire
/// sends to each of `conns` at once; the time until `wanted` have answered.
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
                redis::pipe()
                    .cmd("SET")
                    .arg(key)
                    .arg("token")
                    .arg("NX")
                    .arg("PX")
                    .arg(10_000)
                    .cmd("PTTL")
                    .arg(key)
                    .query_async::<(Option<String>, i64)>(&mut conn)
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

async fn redlock(scale: &Scale) -> Result<(), Error> {
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
        let reference = "redis-rs alone, the same pipeline to the 5 at once, until the 3rd answer";
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
        "\nThe fan-out alone (redis-rs, no lock logic: the `SET NX PX` + `PTTL` pipeline a Redlock acquire sends to each server)\n"
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
    Ok(())
}

/// Requests per second and p99 latency of `GET /` on `addr` from
/// `concurrency` keep-alive connections over loopback for `run_for`.
///
/// The load generator is a minimal HTTP/1.1 client (one pre-built request,
/// responses framed by `Content-Length`) on a runtime and threads of its
/// own, as a separate `wrk` process would be: it shares the cores with the
/// servers, but not their task queues (where it would delay, say, the Redis
/// connection's driver task behind its own tasks).
async fn load(
    addr: SocketAddr,
    concurrency: usize,
    run_for: Duration,
) -> Result<(f64, Duration), Error> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let result = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("loadgen")
            .enable_all()
            .build()
            .map_err(Error::from)
            .and_then(|runtime| runtime.block_on(generate(addr, concurrency, run_for)));
        let _ = tx.send(result.map_err(|e| e.to_string()));
    });
    Ok(rx.await??)
}

async fn generate(
    addr: SocketAddr,
    concurrency: usize,
    run_for: Duration,
) -> Result<(f64, Duration), Error> {
    let deadline = Instant::now() + run_for;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        tasks.push(tokio::spawn(async move {
            let mut connection = Connection::open(addr).await?;
            let mut samples = Vec::new();
            while Instant::now() < deadline {
                let begun = Instant::now();
                let status = connection.get().await?;
                if !(200..300).contains(&status) {
                    return Err(format!(
                        "GET {addr} answered {status}: the limit is meant to stay open"
                    )
                    .into());
                }
                samples.push(begun.elapsed());
            }
            Ok::<_, Error>(samples)
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await??);
    }
    let rps = all.len() as f64 / started.elapsed().as_secs_f64();
    Ok((rps, percentile(&mut all, 0.99)))
}

/// One keep-alive HTTP/1.1 connection of the load generator.
struct Connection {
    stream: tokio::net::TcpStream,
    buffer: Vec<u8>,
}

impl Connection {
    async fn open(addr: SocketAddr) -> Result<Self, Error> {
        let stream = tokio::net::TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(Connection {
            stream,
            buffer: Vec::with_capacity(4096),
        })
    }

    /// Sends `GET /` and reads the whole response; returns its status.
    async fn get(&mut self) -> Result<u16, Error> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        self.stream
            .write_all(b"GET / HTTP/1.1\r\nHost: bench\r\n\r\n")
            .await?;
        self.buffer.clear();
        loop {
            if let Some((status, length)) = Self::complete(&self.buffer)? {
                if self.buffer.len() > length {
                    return Err("unexpected bytes after the response".into());
                }
                return Ok(status);
            }
            if self.stream.read_buf(&mut self.buffer).await? == 0 {
                return Err("connection closed mid-response".into());
            }
        }
    }

    /// `(status, total length)` once `buffer` holds a whole response.
    fn complete(buffer: &[u8]) -> Result<Option<(u16, usize)>, Error> {
        let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") else {
            return Ok(None);
        };
        let head = std::str::from_utf8(&buffer[..end])?;
        let status: u16 = head.get(9..12).ok_or("short status line")?.parse()?;
        let length: usize = head
            .lines()
            .filter_map(|line| line.split_once(':'))
            .find(|(name, _)| name.eq_ignore_ascii_case("content-length"))
            .ok_or("response without Content-Length")?
            .1
            .trim()
            .parse()?;
        let total = end + 4 + length;
        Ok((buffer.len() >= total).then_some((status, total)))
    }
}

fn huge() -> NonZeroU32 {
    NonZeroU32::new(1_000_000_000).unwrap_or(NonZeroU32::MAX)
}

fn gcra_policy() -> Policy {
    Policy::new(Algorithm::Gcra).quota(Quota::per_hour(huge()))
}

/// Our memory layer by peer address, as configured by default.
fn memory_layer() -> Result<RateLimitLayer<MemoryBackend, PeerIp>, Error> {
    let limiter = RateLimiter::new(MemoryBackend::new(), "http", gcra_policy())?;
    Ok(RateLimitLayer::new(limiter, PeerIp::new()))
}

/// Our memory layer sending rate-limit fields on refusals only, as
/// `tower_governor` does by default.
fn quiet_layer() -> Result<RateLimitLayer<MemoryBackend, PeerIp>, Error> {
    Ok(memory_layer()?.headers_on_success(false))
}

/// Nanoseconds per request through `app`, called in process (no socket),
/// one request at a time, as the peer address arrives from axum.
async fn per_request(app: Router, n: usize) -> Result<(f64, f64), Error> {
    use tower::{Service, ServiceExt};
    let peer: SocketAddr = "10.1.2.3:4567".parse()?;
    let mut app = app.into_service::<axum::body::Body>();
    let request = || {
        let mut request = http::Request::new(axum::body::Body::empty());
        request
            .extensions_mut()
            .insert(axum::extract::ConnectInfo(peer));
        request
    };
    // Warm up, then measure.
    for _ in 0..n / 10 {
        app.ready().await?.call(request()).await?;
    }
    let allocations = ALLOCATIONS.load(std::sync::atomic::Ordering::Relaxed);
    let started = Instant::now();
    for _ in 0..n {
        let response = app.ready().await?.call(request()).await?;
        if !response.status().is_success() {
            return Err(format!("refused: {}", response.status()).into());
        }
    }
    let elapsed = started.elapsed();
    let allocations = ALLOCATIONS.load(std::sync::atomic::Ordering::Relaxed) - allocations;
    Ok((
        elapsed.as_nanos() as f64 / n as f64,
        allocations as f64 / n as f64,
    ))
}

/// What the rate-limit layers cost per request without HTTP around them.
async fn layer_cost(scale: &Scale) -> Result<(), Error> {
    let n = scale.iterations * 5;
    let mut rows = Vec::new();
    // Interleaved rounds; each router's fastest round is reported (on a
    // shared machine, interference only ever adds time). Columns in the
    // order of `LAYER_ROUTERS`.
    const ROUNDS: usize = 9;
    for _ in 0..ROUNDS {
        let mut row = [(0.0, 0.0); LAYER_ROUTERS.len()];
        for (cell, name) in row.iter_mut().zip(LAYER_ROUTERS) {
            *cell = per_request(layer_router(name)?, n).await?;
        }
        rows.push(row);
    }
    let fastest = |i: usize| {
        rows.iter()
            .map(|r: &[(f64, f64); LAYER_ROUTERS.len()]| r[i].0)
            .fold(f64::INFINITY, f64::min)
    };
    let allocations = |i: usize| rows[0][i].1;
    let bare = fastest(0);
    println!(
        "In process (no socket), one request at a time, {n} requests per round, fastest of {ROUNDS} interleaved rounds\n"
    );
    println!("| router | ns/request | layer cost (ns) | allocations/request |");
    println!("|---|---:|---:|---:|");
    println!("| axum, no layer | {bare:.0} | 0 | {:.1} |", allocations(0));
    for (i, label) in LAYER_LABELS.iter().enumerate().skip(1) {
        println!(
            "| {label} | {:.0} | {:.0} | {:.1} |",
            fastest(i),
            fastest(i) - bare,
            allocations(i)
        );
    }
    like_for_like("layer cost", |i| fastest(i) - bare);
    Ok(())
}

/// The like-for-like ratios of a per-router measure of the layers, given by
/// position in [`LAYER_ROUTERS`].
fn like_for_like(measure: &str, layer: impl Fn(usize) -> f64) {
    println!("\n| like for like | ratio of {measure} |\n|---|---:|");
    println!(
        "| fields on every response: ours / tower_governor with headers | {:.2}x |",
        layer(1) / layer(4)
    );
    println!(
        "| no fields on allowed responses: ours / tower_governor | {:.2}x |\n",
        layer(2) / layer(3)
    );
}

/// The axum routers whose layers are compared in process, by name.
const LAYER_ROUTERS: [&str; 5] = ["bare", "ours", "ours-quiet", "governor", "governor-headers"];
/// How the tables name [`LAYER_ROUTERS`].
const LAYER_LABELS: [&str; 5] = [
    "axum, no layer",
    "axum + ours (memory)",
    "axum + ours (memory), fields on refusals only",
    "axum + tower_governor",
    "axum + tower_governor with headers",
];

fn layer_router(name: &str) -> Result<Router, Error> {
    use tower_governor::governor::GovernorConfigBuilder;
    let hello = Router::new().route("/", get(|| async { "hello" }));
    Ok(match name {
        "bare" => hello,
        "ours" => hello.layer(memory_layer()?),
        "ours-quiet" => hello.layer(quiet_layer()?),
        "governor" => hello.layer(tower_governor::GovernorLayer::new(
            GovernorConfigBuilder::default()
                .per_nanosecond(1)
                .burst_size(u32::MAX)
                .finish()
                .ok_or("governor config")?,
        )),
        // `use_headers` changes the builder's type: it must be chained.
        "governor-headers" => hello.layer(tower_governor::GovernorLayer::new(
            GovernorConfigBuilder::default()
                .per_nanosecond(1)
                .burst_size(u32::MAX)
                .use_headers()
                .finish()
                .ok_or("governor config")?,
        )),
        other => return Err(format!("no router named {other}").into()),
    })
}

/// Calls the router `name` in process `n` times, after a warm-up of a tenth
/// as many; run under `valgrind` by [`layer_instructions`].
async fn layer_loop(name: &str, n: usize) -> Result<(), Error> {
    per_request(layer_router(name)?, n).await?;
    Ok(())
}

/// Instructions per request of each layer, counted by `valgrind`'s
/// cachegrind: unlike time, the count barely moves with the load on a
/// shared machine. Each router runs `n` and `2n` requests in a child
/// process; the difference, divided by `n`, leaves out start-up and
/// warm-up (which also scales with `n`, hence the 1.1).
fn layer_instructions(quick: bool) -> Result<(), Error> {
    if Command::new("valgrind").arg("--version").output().is_err() {
        println!(
            "Instructions per request: skipped, `valgrind` is not installed (`apt-get install valgrind`).\n"
        );
        return Ok(());
    }
    let n: usize = if quick { 20_000 } else { 100_000 };
    let count = |router: &str, requests: usize| -> Result<f64, Error> {
        let output = Command::new("valgrind")
            .args(["--tool=cachegrind", "--cache-sim=no"])
            .arg("--cachegrind-out-file=/dev/null")
            .arg(std::env::current_exe()?)
            .args(["--layer-loop", router, &requests.to_string()])
            .output()?;
        if !output.status.success() {
            return Err(format!("valgrind on {router}: {}", output.status).into());
        }
        let stderr = String::from_utf8_lossy(&output.stderr);
        let refs = stderr
            .lines()
            .find_map(|line| line.split_once("I   refs:").or(line.split_once("I refs:")))
            .ok_or("no instruction count in valgrind's output")?
            .1
            .trim()
            .replace(',', "");
        Ok(refs.parse::<u64>()? as f64)
    };
    let mut per = Vec::new();
    for router in LAYER_ROUTERS {
        let once = count(router, n)?;
        let twice = count(router, 2 * n)?;
        // `per_request` warms up with a tenth of its requests.
        per.push((twice - once) / (1.1 * n as f64));
    }
    let bare = per[0];
    println!(
        "In process under valgrind (cachegrind), instructions per request: {n} and {} requests per router, difference divided\n",
        2 * n
    );
    println!("| router | instructions/request | layer (instructions) |\n|---|---:|---:|");
    for (label, per) in LAYER_LABELS.iter().zip(&per) {
        println!("| {label} | {per:.0} | {:.0} |", per - bare);
    }
    like_for_like("layer instructions", |i| per[i] - bare);
    Ok(())
}

/// Times `$n` calls of the actix service `$app` with requests from `$request`;
/// nanoseconds and heap allocations per request (building the request
/// included).
macro_rules! actix_per_request {
    ($app:expr, $request:expr, $n:expr) => {{
        let allocations = ALLOCATIONS.load(std::sync::atomic::Ordering::Relaxed);
        let started = Instant::now();
        for _ in 0..$n {
            let response = actix_web::test::call_service($app, $request()).await;
            if !response.status().is_success() {
                return Err(format!("status {}", response.status()));
            }
        }
        let elapsed = started.elapsed();
        let allocations = ALLOCATIONS.load(std::sync::atomic::Ordering::Relaxed) - allocations;
        (
            elapsed.as_nanos() as f64 / $n as f64,
            allocations as f64 / $n as f64,
        )
    }};
}

/// Our actix-web middleware in process (`actix_web::test`, no socket), one
/// request at a time with the ten headers a browser typically sends, from a
/// trusted proxy with `X-Forwarded-For`. actix-web 4 has its own `http`
/// types, so a request is copied into `http` 1 types for the key extractor,
/// with only the header fields the extractor reads.
fn actix_layer_cost(scale: &Scale) -> Result<(), Error> {
    use actix_web::{App, HttpResponse, test, web};
    const ROUNDS: usize = 9;
    let n = scale.iterations * 2;
    let rows = std::thread::spawn(move || {
        actix_web::rt::System::new().block_on(async move {
            let limiter = |scope: &str| {
                RateLimiter::new(MemoryBackend::new(), scope, gcra_policy())
                    .map_err(|e| e.to_string())
            };
            let hello = || web::get().to(|| async { HttpResponse::Ok().body("hello") });
            let peer =
                lock_actix::RateLimit::new(RateLimitLayer::new(limiter("peer")?, PeerIp::new()));
            let header = lock_actix::RateLimit::new(RateLimitLayer::new(
                limiter("header")?,
                lock_tower::key::HeaderKey::new(http::HeaderName::from_static("x-user")),
            ));
            let client = lock_actix::RateLimit::new(RateLimitLayer::new(
                limiter("client")?,
                lock_tower::key::ClientIp::new(["10.0.0.0/8".parse().map_err(|_| "a network")?]),
            ));
            // A closure may read any field, so every one is copied.
            let closure = lock_actix::RateLimit::new(RateLimitLayer::new(
                limiter("closure")?,
                |request: lock_tower::key::RequestParts<'_>| {
                    Some(request.headers.get("x-user")?.to_str().ok()?.to_owned())
                },
            ));
            let bare = test::init_service(App::new().route("/", hello())).await;
            let peer = test::init_service(App::new().wrap(peer).route("/", hello())).await;
            let header = test::init_service(App::new().wrap(header).route("/", hello())).await;
            let client = test::init_service(App::new().wrap(client).route("/", hello())).await;
            let closure = test::init_service(App::new().wrap(closure).route("/", hello())).await;
            let request = || {
                let mut request = test::TestRequest::get()
                    .uri("/")
                    .peer_addr(SocketAddr::from(([10, 0, 0, 1], 40000)));
                for field in BROWSER_HEADERS {
                    request = request.insert_header(field);
                }
                request
                    .insert_header(("x-forwarded-for", "203.0.113.7"))
                    .insert_header(("x-user", "u-42"))
                    .to_request()
            };
            let mut rows = Vec::with_capacity(ROUNDS);
            for _ in 0..ROUNDS {
                rows.push([
                    actix_per_request!(&bare, request, n),
                    actix_per_request!(&peer, request, n),
                    actix_per_request!(&header, request, n),
                    actix_per_request!(&client, request, n),
                    actix_per_request!(&closure, request, n),
                ]);
            }
            Ok::<_, String>(rows)
        })
    })
    .join()
    .map_err(|_| "the actix table panicked")??;
    let fastest = |i: usize| rows.iter().map(|r| r[i].0).fold(f64::INFINITY, f64::min);
    let allocations = |i: usize| rows[0][i].1;
    let bare = fastest(0);
    println!(
        "\nactix-web in process (no socket), one request at a time with {} header fields, {n} requests per round, fastest of {ROUNDS} interleaved rounds\n",
        BROWSER_HEADERS.len() + 2
    );
    println!(
        "| app | ns/request | middleware cost (ns) | allocations/request |\n|---|---:|---:|---:|"
    );
    println!(
        "| actix, no middleware | {bare:.0} | 0 | {:.1} |",
        allocations(0)
    );
    for (label, i) in [
        ("actix + ours (memory), key: peer IP (no field copied)", 1),
        (
            "actix + ours (memory), key: a header (that field copied)",
            2,
        ),
        (
            "actix + ours (memory), key: client IP behind a proxy (X-Forwarded-For copied)",
            3,
        ),
        (
            "actix + ours (memory), key: a closure reading a header (every field copied)",
            4,
        ),
    ] {
        println!(
            "| {label} | {:.0} | {:.0} | {:.1} |",
            fastest(i),
            fastest(i) - bare,
            allocations(i)
        );
    }
    Ok(())
}

/// What a browser sends with a page request, besides the key header.
const BROWSER_HEADERS: [(&str, &str); 10] = [
    ("host", "shop.example.com"),
    (
        "user-agent",
        "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36",
    ),
    (
        "accept",
        "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
    ),
    ("accept-language", "en-US,en;q=0.9"),
    ("accept-encoding", "gzip, deflate, br"),
    ("cookie", "session=3f2a9c1e7b; theme=dark; cart=42"),
    ("referer", "https://shop.example.com/sale"),
    ("sec-fetch-mode", "navigate"),
    ("sec-fetch-site", "same-origin"),
    ("upgrade-insecure-requests", "1"),
];

async fn http(scale: &Scale) -> Result<(), Error> {
    let hello = || Router::new().route("/", get(|| async { "hello" }));
    let redis = RedisServer::start();
    let backend = RedisBackend::connect(&redis.url()).await?;

    let bare = TestServer::start(hello()).await;
    let ours_memory = TestServer::start(hello().layer(memory_layer()?)).await;
    let governor = tower_governor::governor::GovernorConfigBuilder::default()
        .per_nanosecond(1)
        .burst_size(u32::MAX)
        .finish()
        .ok_or("governor config")?;
    let theirs_memory =
        TestServer::start(hello().layer(tower_governor::GovernorLayer::new(governor))).await;
    let ours_quiet = TestServer::start(hello().layer(quiet_layer()?)).await;
    // The same with rate-limit headers on every response, as ours sends.
    let governor_headers = tower_governor::governor::GovernorConfigBuilder::default()
        .per_nanosecond(1)
        .burst_size(u32::MAX)
        .use_headers()
        .finish()
        .ok_or("governor config")?;
    let theirs_memory_headers =
        TestServer::start(hello().layer(tower_governor::GovernorLayer::new(governor_headers)))
            .await;
    let ours_redis = TestServer::start(hello().layer(RateLimitLayer::new(
        RateLimiter::new(backend.clone(), "http", gcra_policy())?,
        PeerIp::new(),
    )))
    .await;

    let ours_actix = actix_server(ActixVariant::Ours(redis.url(), true))?;
    // actix-limitation sends no rate-limit fields at all.
    let ours_actix_quiet = actix_server(ActixVariant::Ours(redis.url(), false))?;
    let theirs_actix = actix_server(ActixVariant::Limitation(redis.url()))?;
    let bare_actix = actix_server(ActixVariant::Bare)?;
    let targets = [
        ("axum, no layer", bare.addr()),
        ("axum + ours (memory)", ours_memory.addr()),
        ("axum + tower_governor", theirs_memory.addr()),
        (
            "axum + tower_governor with headers",
            theirs_memory_headers.addr(),
        ),
        ("axum + ours (redis)", ours_redis.addr()),
        ("actix + ours (redis)", ours_actix.0),
        ("actix + actix-limitation (redis)", theirs_actix.0),
        (
            "axum + ours (memory), fields on refusals only",
            ours_quiet.addr(),
        ),
        ("actix, no layer", bare_actix.0),
        (
            "actix + ours (redis), fields on refusals only",
            ours_actix_quiet.0,
        ),
    ];
    // Each level of concurrency in interleaved rounds, so drift on a shared
    // machine hits every server alike; each server's median round is
    // reported. At 32 connections a server that waits on Redis round trips
    // is partly idle; at 128 every server here is saturated.
    const ROUNDS: u32 = 5;
    const LEVELS: [usize; 2] = [32, 128];
    let mut results: Vec<Vec<Vec<(f64, Duration)>>> =
        vec![vec![Vec::new(); targets.len()]; LEVELS.len()];
    for (&concurrency, level) in LEVELS.iter().zip(results.iter_mut()) {
        for _ in 0..ROUNDS {
            for ((_, addr), result) in targets.iter().zip(level.iter_mut()) {
                result.push(load(*addr, concurrency, scale.http_for / ROUNDS).await?);
            }
        }
    }
    // Each comparison is the median over rounds of the two servers' ratio
    // in the same round: drift between rounds cancels out.
    let paired = |level: &[Vec<(f64, Duration)>], a: usize, b: usize| {
        let mut ratios: Vec<f64> = level[a]
            .iter()
            .zip(&level[b])
            .map(|(x, y)| x.0 / y.0)
            .collect();
        ratios.sort_by(f64::total_cmp);
        ratios[ratios.len() / 2]
    };
    let comparisons = [
        (
            "fields on every response: ours (memory) / tower_governor with headers",
            1,
            3,
        ),
        (
            "no fields on allowed responses: ours (memory) / tower_governor",
            7,
            2,
        ),
        ("ours (memory, default) / tower_governor (default)", 1, 2),
        ("ours (memory) / no layer", 1, 0),
        ("ours (redis) / no layer", 4, 0),
        ("actix: ours (redis, default) / actix-limitation", 5, 6),
        (
            "actix, no fields on allowed responses (actix-limitation sends none): ours (redis) / actix-limitation",
            9,
            6,
        ),
        ("actix: ours (redis) / no layer", 5, 8),
        ("actix: actix-limitation / no layer", 6, 8),
    ];
    println!(
        "\nKeep-alive connections over loopback; at each level, {ROUNDS} interleaved rounds of {:?} per server, median round\n",
        scale.http_for / ROUNDS
    );
    let header: String = LEVELS
        .iter()
        .map(|c| format!(" requests/s, {c} conns | p99, {c} conns |"))
        .collect();
    println!("| server |{header}");
    println!("|---|{}", "---:|".repeat(2 * LEVELS.len()));
    for (i, (label, _)) in targets.iter().enumerate() {
        let cells: String = results
            .iter()
            .map(|level| {
                let mut rounds = level[i].clone();
                rounds.sort_by(|a, b| a.0.total_cmp(&b.0));
                let (rps, p99) = rounds[rounds.len() / 2];
                format!(" {rps:.0} | {} |", micros(p99))
            })
            .collect();
        println!("| {label} |{cells}");
    }
    let header: String = LEVELS.iter().map(|c| format!(" {c} conns |")).collect();
    println!("\n| comparison of requests/s (median of the ratios within a round) |{header}");
    println!("|---|{}", "---:|".repeat(LEVELS.len()));
    for (label, a, b) in comparisons {
        let cells: String = results
            .iter()
            .map(|level| format!(" {:.2}x |", paired(level, a, b)))
            .collect();
        println!("| {label} |{cells}");
    }
    Ok(())
}

enum ActixVariant {
    Bare,
    /// Our middleware; whether allowed responses carry rate-limit fields.
    Ours(String, bool),
    Limitation(String),
}

/// An actix-web hello server with one worker on its own thread; stops with
/// the process. Our backend connects inside the actix system, as it would in
/// an `#[actix_web::main]` application, so its connection is driven there.
fn actix_server(
    variant: ActixVariant,
) -> Result<(SocketAddr, actix_web::dev::ServerHandle), Error> {
    use actix_web::{App, HttpServer, web};
    fn hello() -> actix_web::Route {
        web::get().to(|| async { "hello" })
    }
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        actix_web::rt::System::new().block_on(async move {
            // One worker, any free port: the address and the running server.
            macro_rules! start {
                ($factory:expr) => {{
                    let bound = HttpServer::new($factory)
                        .workers(1)
                        .disable_signals()
                        .bind(("127.0.0.1", 0))?;
                    let addr = bound.addrs().first().copied().ok_or("no address")?;
                    (addr, bound.run())
                }};
            }
            let server = async {
                let started = match variant {
                    ActixVariant::Bare => start!(|| App::new().route("/", hello())),
                    ActixVariant::Ours(url, fields_on_success) => {
                        let limiter = RateLimiter::new(
                            RedisBackend::connect(&url).await?,
                            "actix",
                            Policy::new(Algorithm::FixedWindow).quota(Quota::per_hour(huge())),
                        )?;
                        let middleware = lock_actix::RateLimit::new(
                            RateLimitLayer::new(limiter, GlobalKey::new())
                                .headers_on_success(fields_on_success),
                        );
                        start!(move || App::new().wrap(middleware.clone()).route("/", hello()))
                    }
                    ActixVariant::Limitation(url) => {
                        let limiter = actix_limitation::Limiter::builder(url)
                            .key_by(|_req: &actix_web::dev::ServiceRequest| {
                                Some("global".to_owned())
                            })
                            .limit(1_000_000_000)
                            .period(Duration::from_secs(3600))
                            .build()?;
                        let limiter = web::Data::new(limiter);
                        start!(move || {
                            App::new()
                                .wrap(actix_limitation::RateLimiter::default())
                                .app_data(limiter.clone())
                                .route("/", hello())
                        })
                    }
                };
                Ok::<_, Error>(started)
            };
            match server.await {
                Ok((addr, server)) => {
                    let _ = tx.send(Ok((addr, server.handle())));
                    let _ = server.await;
                }
                Err(e) => {
                    let _ = tx.send(Err(e.to_string()));
                }
            }
        });
    });
    Ok(rx.recv()??)
}

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

async fn memory(scale: &Scale) -> Result<(), Error> {
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
