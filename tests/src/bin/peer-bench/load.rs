//! The HTTP load generator of section 4.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use lock_tests::bench::Error;

use crate::percentile;

/// Requests per second and p99 latency of `GET /` on `addr` from
/// `concurrency` keep-alive connections over loopback for `run_for`.
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
