//! Network faults between clients and one server: a loopback TCP proxy
//! whose behaviour can be switched while connections run through it.
//!
//! A [`FaultProxy`] forwards each accepted connection to its target, the
//! bytes of each direction in order. [`set`](FaultProxy::set) chooses what
//! it does with them from then on (for every connection through it, old
//! and new):
//!
//! * [`Fault::Pass`]: forward at once (also [`heal`](FaultProxy::heal)).
//! * [`Fault::Delay`]: hold every chunk that long in each direction.
//! * [`Fault::CutAfterForward`]: forward the next chunk a client sends
//!   (whole commands, as clients write them) to the server, then close
//!   both sides of that connection as soon as the server answers, without
//!   passing the answer on: the command ran, the client never hears of it.
//!   One shot: the proxy passes again afterwards.
//! * [`Fault::CutRandom`]: the next chunk in either direction is cut at a
//!   random byte (from the proxy's seed) and the connection closed: a
//!   command the server may get in part, or an answer the client gets in
//!   part. One shot.
//! * [`Fault::BlackHole`]: nothing is forwarded either way, new
//!   connections are accepted but stay silent too; what was sent meanwhile
//!   is delivered after [`heal`](FaultProxy::heal), as TCP would after a
//!   partition.
//!
//! ```no_run
//! use std::time::Duration;
//! use lock_tests::{RedisServer, fault_proxy::{Fault, FaultProxy}};
//!
//! let server = RedisServer::start();
//! let proxy = FaultProxy::to_server(&server, 7);
//! let client = redis::Client::open(proxy.url()).unwrap();
//! proxy.set(Fault::CutAfterForward); // the next command runs unheard
//! proxy.set(Fault::BlackHole);       // a partition ...
//! proxy.heal();                      // ... healed
//! ```

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::RedisServer;

/// What a [`FaultProxy`] does with the bytes it forwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Forward at once.
    Pass,
    /// Forward every chunk this long after it was read, in each direction.
    Delay(Duration),
    /// Forward the next chunk from a client, then close that connection
    /// before the server's answer reaches the client (one shot).
    CutAfterForward,
    /// Cut the next chunk in either direction at a random byte and close
    /// the connection (one shot).
    CutRandom,
    /// Forward nothing either way until healed.
    BlackHole,
}

/// A loopback TCP proxy to one address with switchable faults (see the
/// [module docs](self)). Dropping it closes every connection through it.
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

struct Shared {
    target: SocketAddr,
    state: Mutex<State>,
    changed: Condvar,
    stop: AtomicBool,
    cuts: AtomicU64,
}

struct State {
    fault: Fault,
    /// What a one-shot cut turns into once it has fired.
    then: Fault,
    rng: StdRng,
    conns: Vec<Arc<Conn>>,
}

/// One proxied connection: both sockets, and whether it is being cut.
struct Conn {
    client: TcpStream,
    server: TcpStream,
    /// A client chunk went to the server under `CutAfterForward`: the next
    /// answer is dropped and the connection closed.
    cut_pending: AtomicBool,
    closed: AtomicBool,
}

impl Conn {
    fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        let _ = self.client.shutdown(Shutdown::Both);
        let _ = self.server.shutdown(Shutdown::Both);
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    ToServer,
    ToClient,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl FaultProxy {
    /// Listens on a free loopback port and forwards each connection to
    /// `target`, passing bytes until told otherwise; `seed` drives
    /// [`Fault::CutRandom`].
    ///
    /// # Errors
    /// When no loopback port can be bound.
    pub fn start(target: SocketAddr, seed: u64) -> io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            target,
            state: Mutex::new(State {
                fault: Fault::Pass,
                then: Fault::Pass,
                rng: StdRng::seed_from_u64(seed),
                conns: Vec::new(),
            }),
            changed: Condvar::new(),
            stop: AtomicBool::new(false),
            cuts: AtomicU64::new(0),
        });
        let accept = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("fault-proxy".into())
                .spawn(move || accept_loop(&listener, &shared))?
        };
        Ok(FaultProxy {
            addr,
            shared,
            accept: Some(accept),
        })
    }

    /// A proxy to `server`.
    ///
    /// # Panics
    /// When no loopback port can be bound.
    pub fn to_server(server: &RedisServer, seed: u64) -> Self {
        let target = SocketAddr::from(([127, 0, 0, 1], server.port()));
        Self::start(target, seed)
            .unwrap_or_else(|e| panic!("cannot start a fault proxy to {target}: {e}"))
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `redis://<addr>/`, for a proxy to a Redis server.
    pub fn url(&self) -> String {
        format!("redis://{}/", self.addr)
    }

    /// Switches to `fault`, for every connection, at once.
    pub fn set(&self, fault: Fault) {
        self.set_then(fault, Fault::Pass);
    }

    /// Switches to `fault`, which (when it is a one-shot cut) turns into
    /// `then` as it fires: e.g. a cut, then a slow network for the
    /// reconnection and whatever the client retries on it.
    pub fn set_then(&self, fault: Fault, then: Fault) {
        let mut state = self.shared.state();
        state.fault = fault;
        state.then = then;
        drop(state);
        self.shared.changed.notify_all();
    }

    /// Back to [`Fault::Pass`]: what a black hole held is delivered now.
    pub fn heal(&self) {
        self.set(Fault::Pass);
    }

    /// The fault in force (a one-shot cut that has fired reads as what it
    /// turned into).
    pub fn fault(&self) -> Fault {
        self.shared.state().fault
    }

    /// How many connections a cut has closed so far.
    pub fn cuts(&self) -> u64 {
        self.shared.cuts.load(Ordering::SeqCst)
    }

    /// Closes every open connection now (an abrupt reset of them all).
    pub fn cut_all(&self) {
        for conn in self.shared.state().conns.drain(..) {
            conn.close();
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.cut_all();
        self.shared.changed.notify_all();
        // Wakes the accept loop, which then sees `stop`.
        let _ = TcpStream::connect(self.addr);
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    for client in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        // A client that cannot be served is closed: it sees the connection
        // fail, as it would if the server were unreachable.
        let Ok(client) = client else { continue };
        let _ = serve(client, shared);
    }
}

/// Connects `client` to the target and starts both directions.
fn serve(client: TcpStream, shared: &Arc<Shared>) -> io::Result<()> {
    let server = TcpStream::connect(shared.target)?;
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    let conn = Arc::new(Conn {
        client: client.try_clone()?,
        server: server.try_clone()?,
        cut_pending: AtomicBool::new(false),
        closed: AtomicBool::new(false),
    });
    {
        let mut state = shared.state();
        state.conns.retain(|c| !c.closed.load(Ordering::SeqCst));
        state.conns.push(conn.clone());
    }
    pipe(
        client.try_clone()?,
        server.try_clone()?,
        Direction::ToServer,
        &conn,
        shared,
    )?;
    pipe(server, client, Direction::ToClient, &conn, shared)
}

/// Copies `from` to `to`: one thread reads and stamps each chunk, another
/// writes it as the fault in force says.
fn pipe(
    mut from: TcpStream,
    to: TcpStream,
    direction: Direction,
    conn: &Arc<Conn>,
    shared: &Arc<Shared>,
) -> io::Result<()> {
    let (chunks, received) = mpsc::channel::<(Instant, Vec<u8>)>();
    std::thread::Builder::new()
        .name("fault-proxy-read".into())
        .spawn(move || {
            let mut buffer = vec![0; 64 * 1024];
            while let Ok(n @ 1..) = from.read(&mut buffer) {
                if chunks.send((Instant::now(), buffer[..n].to_vec())).is_err() {
                    return;
                }
            }
        })?;
    let (conn, shared) = (conn.clone(), shared.clone());
    std::thread::Builder::new()
        .name("fault-proxy-write".into())
        .spawn(move || {
            let mut to = to;
            for (read_at, chunk) in received {
                if !deliver(&mut to, read_at, &chunk, direction, &conn, &shared) {
                    conn.close();
                    return;
                }
            }
            let _ = to.shutdown(Shutdown::Write);
        })?;
    Ok(())
}

/// Writes one chunk as the fault in force says; false when the connection
/// is (to be) closed.
fn deliver(
    to: &mut TcpStream,
    read_at: Instant,
    chunk: &[u8],
    direction: Direction,
    conn: &Conn,
    shared: &Shared,
) -> bool {
    loop {
        if conn.closed.load(Ordering::SeqCst) || shared.stop.load(Ordering::SeqCst) {
            return false;
        }
        if direction == Direction::ToClient && conn.cut_pending.load(Ordering::SeqCst) {
            // The answer to what went through under `CutAfterForward`.
            shared.cuts.fetch_add(1, Ordering::SeqCst);
            return false;
        }
        let mut state = shared.state();
        match state.fault {
            Fault::Pass => break,
            Fault::Delay(delay) => {
                let now = Instant::now();
                let due = read_at + delay;
                if now >= due {
                    break;
                }
                // Re-read the fault at least every 20 ms: a heal ends the wait.
                let wait = (due - now).min(Duration::from_millis(20));
                drop(shared.changed.wait_timeout(state, wait));
            }
            Fault::BlackHole => {
                let wait = Duration::from_millis(50);
                drop(shared.changed.wait_timeout(state, wait));
            }
            Fault::CutAfterForward => {
                if direction == Direction::ToClient {
                    break;
                }
                state.fault = state.then;
                drop(state);
                // Set before the write: the answer cannot come before it.
                conn.cut_pending.store(true, Ordering::SeqCst);
                return to.write_all(chunk).is_ok();
            }
            Fault::CutRandom => {
                state.fault = state.then;
                let at = state.rng.random_range(0..=chunk.len());
                drop(state);
                let _ = to.write_all(&chunk[..at]);
                shared.cuts.fetch_add(1, Ordering::SeqCst);
                return false;
            }
        }
    }
    to.write_all(chunk).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server on loopback, for the proxy to forward to.
    fn echo() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                std::thread::spawn(move || {
                    let mut stream = stream;
                    let mut buf = [0u8; 1024];
                    while let Ok(n @ 1..) = stream.read(&mut buf) {
                        if stream.write_all(&buf[..n]).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        addr
    }

    fn round_trip(stream: &mut TcpStream, bytes: &[u8]) -> io::Result<Vec<u8>> {
        stream.write_all(bytes)?;
        let mut answer = vec![0; bytes.len()];
        stream.read_exact(&mut answer)?;
        Ok(answer)
    }

    #[test]
    fn passes_cuts_and_black_holes() {
        let proxy = FaultProxy::start(echo(), 1).unwrap();
        let mut a = TcpStream::connect(proxy.addr()).unwrap();
        a.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        assert_eq!(round_trip(&mut a, b"ping").unwrap(), b"ping");

        proxy.set(Fault::CutAfterForward);
        assert!(
            round_trip(&mut a, b"lost").is_err(),
            "the answer came through"
        );
        assert_eq!(proxy.cuts(), 1);
        assert_eq!(proxy.fault(), Fault::Pass, "a cut is one shot");

        let mut b = TcpStream::connect(proxy.addr()).unwrap();
        b.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        proxy.set(Fault::BlackHole);
        b.write_all(b"held").unwrap();
        let mut buf = [0u8; 4];
        assert!(b.read_exact(&mut buf).is_err(), "a black hole answered");
        proxy.heal();
        b.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        b.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"held");
    }
}
