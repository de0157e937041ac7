//! Network latency on loopback: a TCP proxy that holds every chunk of bytes
//! for a fixed time in each direction, as a network between machines would.
//!
//! On loopback a round trip costs only the CPU of both ends, so several
//! servers on one machine answer no faster in parallel than its cores
//! allow. Behind a [`DelayProxy`] each round trip waits at least twice the
//! delay, and requests sent to several servers at once wait in parallel.
//!
//! ```no_run
//! use std::time::Duration;
//! use lock_tests::{RedisServer, latency::DelayProxy};
//!
//! let server = RedisServer::start();
//! // Round trips through `proxy.url()` take at least 1 ms.
//! let proxy = DelayProxy::to_server(&server, Duration::from_micros(500));
//! let client = redis::Client::open(proxy.url()).unwrap();
//! ```

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::RedisServer;

/// A loopback TCP proxy to one address that delays each direction by a
/// fixed time (bytes stay in order; throughput is not limited). Each
/// connection is served by threads of its own, which sleep out the delay
/// rather than spin (each chunk still costs two thread wake-ups). Dropping
/// the proxy closes every connection through it.
pub struct DelayProxy {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    streams: Arc<Mutex<Vec<TcpStream>>>,
    accept: Option<JoinHandle<()>>,
}

impl DelayProxy {
    /// Listens on a free loopback port and forwards each connection to
    /// `target`, every chunk of bytes `one_way` late in each direction.
    ///
    /// # Errors
    /// When no loopback port can be bound.
    pub fn start(target: SocketAddr, one_way: Duration) -> io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let streams = Arc::new(Mutex::new(Vec::new()));
        let accept = {
            let (stop, streams) = (stop.clone(), streams.clone());
            std::thread::Builder::new()
                .name("delay-proxy".into())
                .spawn(move || accept_loop(&listener, target, one_way, &stop, &streams))?
        };
        Ok(DelayProxy {
            addr,
            stop,
            streams,
            accept: Some(accept),
        })
    }

    /// A proxy to `server`.
    ///
    /// # Panics
    /// When no loopback port can be bound.
    pub fn to_server(server: &RedisServer, one_way: Duration) -> Self {
        let target = SocketAddr::from(([127, 0, 0, 1], server.port()));
        Self::start(target, one_way)
            .unwrap_or_else(|e| panic!("cannot start a delay proxy to {target}: {e}"))
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `redis://<addr>/`, for a proxy to a Redis server.
    pub fn url(&self) -> String {
        format!("redis://{}/", self.addr)
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let streams = self.streams.lock().unwrap_or_else(PoisonError::into_inner);
        for stream in streams.iter() {
            let _ = stream.shutdown(Shutdown::Both);
        }
        drop(streams);
        // Wakes the accept loop, which then sees `stop`.
        let _ = TcpStream::connect(self.addr);
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }
}

fn accept_loop(
    listener: &TcpListener,
    target: SocketAddr,
    one_way: Duration,
    stop: &AtomicBool,
    streams: &Mutex<Vec<TcpStream>>,
) {
    for client in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        // A client that cannot be served is closed (dropped): it sees the
        // connection fail, as it would if the server were unreachable.
        let Ok(client) = client else { continue };
        let _ = forward(client, target, one_way, streams);
    }
}

/// Connects `client` to `target` and starts the two delayed directions.
fn forward(
    client: TcpStream,
    target: SocketAddr,
    one_way: Duration,
    streams: &Mutex<Vec<TcpStream>>,
) -> io::Result<()> {
    let server = TcpStream::connect(target)?;
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    {
        let mut streams = streams.lock().unwrap_or_else(PoisonError::into_inner);
        streams.push(client.try_clone()?);
        streams.push(server.try_clone()?);
    }
    delayed_pipe(client.try_clone()?, server.try_clone()?, one_way)?;
    delayed_pipe(server, client, one_way)
}

/// Copies `from` to `to`, each chunk written `delay` after it was read: one
/// thread reads and stamps, another sleeps until each chunk is due. When
/// `from` ends, what was read is still delivered, then `to` is shut for
/// writing.
fn delayed_pipe(mut from: TcpStream, mut to: TcpStream, delay: Duration) -> io::Result<()> {
    let (chunks, due) = mpsc::channel::<(Instant, Vec<u8>)>();
    std::thread::Builder::new()
        .name("delay-proxy-read".into())
        .spawn(move || {
            let mut buffer = vec![0; 64 * 1024];
            while let Ok(n @ 1..) = from.read(&mut buffer) {
                if chunks
                    .send((Instant::now() + delay, buffer[..n].to_vec()))
                    .is_err()
                {
                    return;
                }
            }
        })?;
    std::thread::Builder::new()
        .name("delay-proxy-write".into())
        .spawn(move || {
            for (at, chunk) in due {
                let now = Instant::now();
                if at > now {
                    std::thread::sleep(at - now);
                }
                if to.write_all(&chunk).is_err() {
                    break;
                }
            }
            let _ = to.shutdown(Shutdown::Write);
        })?;
    Ok(())
}
