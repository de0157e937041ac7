//! The HTTP load generator of section 4.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use lock_bench::Error;

use crate::percentile;

/// What one server did under one load.
#[derive(Debug, Clone, Copy)]
pub(super) struct Round {
    /// Requests per second.
    pub(super) rps: f64,
    /// The 99th percentile latency.
    pub(super) p99: Duration,
    /// CPU time per request, in nanoseconds, of this process's threads
    /// other than the load generator's: the servers' (and nothing else runs
    /// meanwhile). A Redis server's own work is not in it.
    pub(super) server_cpu_ns: f64,
}

/// Requests per second, p99 latency and the servers' CPU time per request
/// of `GET /` on `addr` from `concurrency` keep-alive connections over
/// loopback for `run_for`.
///
/// The load generator is a minimal HTTP/1.1 client (one pre-built request,
/// responses framed by `Content-Length`) on a runtime and threads of its
/// own, as a separate `wrk` process would be: it shares the cores with the
/// servers, but not their task queues (where it would delay, say, the Redis
/// connection's driver task behind its own tasks).
pub(super) async fn load(
    addr: SocketAddr,
    concurrency: usize,
    run_for: Duration,
) -> Result<Round, Error> {
    let before = server_threads_cpu()?;
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let result = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name(LOAD_THREADS)
            .enable_all()
            .build()
            .map_err(Error::from)
            .and_then(|runtime| runtime.block_on(generate(addr, concurrency, run_for)));
        let _ = tx.send(result.map_err(|e| e.to_string()));
    });
    let (rps, p99, requests) = rx.await??;
    let after = server_threads_cpu()?;
    // Threads that lived through the whole load: the load generator's
    // first thread, which is not named, has started and ended within it.
    // (A thread id reused within the load would read less than before; it
    // counts as nothing rather than wrapping around.)
    let cpu_ns: u64 = after
        .iter()
        .filter_map(|(tid, ns)| Some(ns.saturating_sub(*before.get(tid)?)))
        .sum();
    Ok(Round {
        rps,
        p99,
        server_cpu_ns: cpu_ns as f64 / requests.max(1) as f64,
    })
}

/// The CPU time so far, in nanoseconds, of each thread of this process
/// but the load generator's, from `/proc/self/task/<tid>/schedstat` (whose
/// first field is the time on a CPU, in nanoseconds).
fn server_threads_cpu() -> Result<HashMap<u32, u64>, Error> {
    let mut cpu = HashMap::new();
    for task in std::fs::read_dir("/proc/self/task")? {
        let task = task?;
        let path = task.path();
        // A thread may end between the listing and these reads.
        let (Ok(name), Ok(stat)) = (
            std::fs::read_to_string(path.join("comm")),
            std::fs::read_to_string(path.join("schedstat")),
        ) else {
            continue;
        };
        if name.starts_with(LOAD_THREADS) {
            continue;
        }
        let tid = task.file_name().to_string_lossy().parse()?;
        let ns = stat.split_whitespace().next().ok_or("empty schedstat")?;
        cpu.insert(tid, ns.parse()?);
    }
    Ok(cpu)
}

/// The name of the load generator's runtime threads.
const LOAD_THREADS: &str = "loadgen";

async fn generate(
    addr: SocketAddr,
    concurrency: usize,
    run_for: Duration,
) -> Result<(f64, Duration, usize), Error> {
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
    Ok((rps, percentile(&mut all, 0.99), all.len()))
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
