//! Redlock: one lock over N independent Redis servers.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::{Either, join_all};
use futures_util::stream::FuturesUnordered;
use tokio::sync::OwnedMutexGuard;
use tokio::time::Instant;

use super::redis_waiter::RedlockWaiter;
use super::{AcquireRequest, Attempt, Kind, LockBackend, LockState};
use crate::backend::{RedisBackend, RedisConfig};
use crate::error::{BackendError, Error, Result};
use crate::name::Name;
use crate::time::sum;

/// A lock backend over N independent Redis servers (the Redlock algorithm).
///
/// An acquisition sends `SET NX PX` to every server at once, each bounded by a
/// per-server timeout far below the lease, and succeeds only with a majority
/// (N/2 + 1) and a positive validity: lease − elapsed − drift, with drift =
/// lease/100 + 2 ms and elapsed measured on a monotonic clock. On failure the
/// lock is released on every server, including those that did not answer in
/// time. Extension and release also go to every server and count a
/// majority.
///
/// Each server sees one token's commands in the order they were made: a
/// command waits in that token's line for the server until every earlier
/// one was handed to the connection or dropped (a dropped command is never
/// sent). Without it, commands that wait for the same reconnect (a
/// restarted server, a dropped connection) go out in whatever order their
/// tasks happen to run: an attempt's undo could delete the next attempt's
/// fresh grant, or a release run before the `SET` or extend it undoes.
/// A release or undo that fails on a server is sent to it again, in the
/// background, until the server answers or the longest lease sent for the
/// token would have ended anyway; an extend that is not counted sets the
/// servers back to the lease the client still counts.
///
/// A release is one self-contained command (the script's text,
/// not its hash), so it takes effect when it reaches a slow server, after
/// the `SET` it undoes, whether or not anyone still waits for its answer.
/// It is sent from a task of its own, which keeps it queued until the
/// server's response timeout even after the per-server wait gave up:
/// redis-rs drops a queued command whose caller stopped waiting, so a
/// release held back by a stalled connection would otherwise be lost.
/// Use it with [`Lock`](super::Lock) like any backend: guards, watchdog
/// and lease-lost signal work the same, and waiters are woken by pub/sub
/// when the holder releases (see [`RedlockWaiter`]).
///
/// Plain locks only, without fencing tokens: N independent counters cannot
/// give one monotonic sequence.
///
/// ```no_run
/// # async fn run() -> lock_core::Result<()> {
/// use std::time::Duration;
/// use lock_core::lock::{Lock, Redlock};
///
/// let redlock = Redlock::connect(&[
///     "redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379",
/// ]).await?;
/// let lock = Lock::new(redlock, "invoice:2024-07")?;
/// if let Some(guard) = lock.lock(Duration::from_secs(2)).await? {
///     guard.release().await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Redlock {
    servers: Arc<[RedisBackend]>,
    per_server_timeout: Duration,
    retry_delay: Duration,
    /// What was sent for each token in use (shared by clones).
    tokens: Arc<Mutex<Tokens>>,
}

/// Default bound on each server's answer.
pub const DEFAULT_PER_SERVER_TIMEOUT: Duration = Duration::from_millis(50);

impl Redlock {
    /// Redlock over already connected servers.
    ///
    /// Each backend's response timeout bounds how long one try of a release
    /// keeps trying to reach that server after the per-server wait gave up
    /// (see [`per_server_timeout`](Self::per_server_timeout)); keep it well
    /// above the per-server timeout. A try that fails is repeated until
    /// the lock's lease would have ended.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] with no server.
    pub fn new(servers: Vec<RedisBackend>) -> Result<Self> {
        if servers.is_empty() {
            return Err(Error::invalid_argument(
                "servers",
                "Redlock needs at least one",
            ));
        }
        Ok(Redlock {
            servers: servers.into(),
            per_server_timeout: DEFAULT_PER_SERVER_TIMEOUT,
            retry_delay: Duration::from_millis(50),
            tokens: Arc::default(),
        })
    }

    /// Connects to every URL, each with [`RedisConfig`]'s default response
    /// timeout (2 s): how long one try of a release keeps trying to reach a
    /// slow server. Answers are waited for [`DEFAULT_PER_SERVER_TIMEOUT`].
    ///
    /// # Errors
    /// A bad URL or a server that cannot be reached.
    pub async fn connect(urls: &[&str]) -> Result<Self> {
        let config = RedisConfig::default().connect_timeout(Duration::from_secs(2));
        let connects = urls.iter().map(|url| {
            let config = config.clone();
            async move { RedisBackend::connect_with(redis::Client::open(*url)?, config).await }
        });
        let servers = join_all(connects)
            .await
            .into_iter()
            .collect::<Result<_>>()?;
        Self::new(servers)
    }

    /// Bound on each server's answer (default 50 ms); keep it far below the
    /// lease. A release whose wait it ends is still sent to that server, up
    /// to the server's own response timeout, and again while it fails.
    pub fn per_server_timeout(mut self, timeout: Duration) -> Self {
        self.per_server_timeout = timeout.clamp(Duration::from_millis(1), crate::time::FOREVER);
        self
    }

    /// Longest wait between attempts while the lock is busy (default 50 ms,
    /// randomized by ±50%). Waiters are woken earlier by the release
    /// message of any server, so this bounds only how long a lost message
    /// or an attempt that lost a race costs.
    pub fn retry_delay(mut self, delay: Duration) -> Self {
        self.retry_delay = delay.clamp(Duration::from_millis(1), crate::time::FOREVER);
        self
    }

    /// How many servers make a majority.
    pub fn quorum(&self) -> usize {
        self.servers.len() / 2 + 1
    }

    /// Runs `op` on every server (with its index) at once, each bounded by
    /// the per-server timeout, and waits for every answer.
    async fn on_all<T, F, Fut>(&self, op: F) -> Vec<Result<T>>
    where
        F: Fn(usize, RedisBackend) -> Fut,
        Fut: Future<Output = Result<T>> + Send + 'static,
        T: Send + 'static,
    {
        self.on_all_until(op, |_| false).await
    }

    /// Runs `op` on every server at once, each bounded by the per-server
    /// timeout, and returns as soon as `settled` says the answers so far
    /// decide the outcome (or every server has answered). Every request is
    /// sent before the first answer is read, and calls still running then
    /// finish in the background, so each server sees the same commands in
    /// the same order whether or not the caller waited for it.
    async fn on_all_until<T, F, Fut>(
        &self,
        op: F,
        settled: impl Fn(&[Result<T>]) -> bool,
    ) -> Vec<Result<T>>
    where
        F: Fn(usize, RedisBackend) -> Fut,
        Fut: Future<Output = Result<T>> + Send + 'static,
        T: Send + 'static,
    {
        let timeout = self.per_server_timeout;
        let mut pending: FuturesUnordered<_> = self
            .servers
            .iter()
            .enumerate()
            .map(|(i, server)| {
                // A server's own response timeout already bounds the call
                // unless ours is shorter: one timer per call, not two.
                let bound = (timeout < server.timeout()).then_some(timeout);
                let call = op(i, server.clone());
                async move {
                    match bound {
                        Some(bound) => tokio::time::timeout(bound, call)
                            .await
                            .unwrap_or(Err(Error::Timeout(bound))),
                        None => call.await,
                    }
                }
            })
            .collect();
        let mut results = Vec::with_capacity(pending.len());
        while let Some(result) = pending.next().await {
            results.push(result);
            if settled(&results) {
                break;
            }
        }
        if !pending.is_empty()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(async move { while pending.next().await.is_some() {} });
        }
        results
    }

    /// Whether `results` already hold a majority of yeses or of noes.
    fn majority(&self, results: &[Result<bool>]) -> bool {
        let yes = results.iter().filter(|r| matches!(r, Ok(true))).count();
        let no = results.iter().filter(|r| matches!(r, Ok(false))).count();
        yes >= self.quorum() || no >= self.quorum()
    }

    /// A majority's answer: yes when a majority said yes; no only when the
    /// yeses and the servers that did not answer (each of which may have
    /// said yes) together fall short of a majority; otherwise unknown, an
    /// error. A release that reached two of the three servers holding the
    /// lock, while the third did not answer, does not know whether the
    /// lock was still held on a majority: it says so rather than "no".
    fn tally(&self, results: &[Result<bool>]) -> Result<bool> {
        let yes = results.iter().filter(|r| matches!(r, Ok(true))).count();
        let no = results.iter().filter(|r| matches!(r, Ok(false))).count();
        let unanswered = results.len() - yes - no;
        if yes >= self.quorum() {
            Ok(true)
        } else if yes + unanswered < self.quorum() {
            Ok(false)
        } else {
            Err(Error::NoQuorum {
                answered: yes.max(no),
                needed: self.quorum(),
            })
        }
    }

    fn tokens(&self) -> MutexGuard<'_, Tokens> {
        self.tokens.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `token`'s lines, for commands about to send a lease of `lease`, and
    /// the end of the lease the client counts (if it was granted).
    fn lines(&self, token: &str, lease: Duration) -> (Arc<Lines>, Option<Instant>) {
        let now = Instant::now();
        // A command may reach its server up to the per-server wait later.
        let ends = now + sum(lease, self.per_server_timeout);
        let mut tokens = self.tokens();
        if !tokens.live.contains_key(token) {
            tokens.prune(now);
        }
        let sent = tokens.live.entry(token.into()).or_insert_with(|| Sent {
            lines: Weak::new(),
            counted: None,
            ends,
        });
        sent.ends = sent.ends.max(ends);
        let lines = sent.lines.upgrade().unwrap_or_else(|| {
            let lines = Arc::new(Lines::new(self.servers.len()));
            sent.lines = Arc::downgrade(&lines);
            lines
        });
        (lines, sent.counted)
    }

    /// Forgets `token` if none of its leases is counted by the client.
    fn forget(&self, token: &str) {
        let mut tokens = self.tokens();
        if tokens
            .live
            .get(token)
            .is_some_and(|sent| sent.counted.is_none())
        {
            tokens.live.remove(token);
        }
    }

    /// Notes that the client counts `token`'s lease until `until`.
    fn count(&self, token: &str, until: Instant) {
        if let Some(sent) = self.tokens().live.get_mut(token) {
            sent.counted = Some(until);
        }
    }

    /// Takes `token`'s record for its release: its lines, and the latest a
    /// server may keep its key (`None` when nothing is known of it).
    fn take(&self, token: &str) -> (Arc<Lines>, Option<Instant>) {
        let sent = self.tokens().live.remove(token);
        let lines = sent
            .as_ref()
            .and_then(|sent| sent.lines.upgrade())
            .unwrap_or_else(|| Arc::new(Lines::new(self.servers.len())));
        (lines, sent.map(|sent| sent.ends))
    }

    /// How long a command waits for its turn in a line before it is
    /// dropped unsent: the per-server wait, or longer for one that retries
    /// until `until`.
    fn turn_bound(&self, until: Option<Instant>) -> Duration {
        let left = until.map_or(Duration::ZERO, |until| {
            until.saturating_duration_since(Instant::now())
        });
        left.max(self.per_server_timeout)
    }
}

/// One token's commands as this client sent them (see [`Redlock`]).
#[derive(Debug, Default)]
struct Tokens {
    live: HashMap<Box<str>, Sent>,
    /// Size at which the next new token first drops the records no
    /// longer needed.
    prune_at: usize,
}

impl Tokens {
    /// Forgets the tokens with no command in their lines and no key a
    /// server could still keep, when enough have gathered (amortized
    /// constant time per token).
    fn prune(&mut self, now: Instant) {
        if self.live.len() < self.prune_at {
            return;
        }
        self.live
            .retain(|_, sent| sent.ends > now || sent.lines.strong_count() > 0);
        self.prune_at = (2 * self.live.len()).max(64);
    }
}

/// What was sent for one token.
#[derive(Debug)]
struct Sent {
    /// Its line on each server, while a command waits or runs in it.
    lines: Weak<Lines>,
    /// The end of the lease the client counts, from the start of the
    /// acquire or extend that granted it.
    counted: Option<Instant>,
    /// The latest a server may keep the key: the end of the longest lease
    /// sent, from when it was sent, plus the per-server wait.
    ends: Instant,
}

/// One token's line on each server: a tokio mutex, which hands its turn
/// out in the order it was asked for.
#[derive(Debug)]
struct Lines(Box<[Arc<tokio::sync::Mutex<()>>]>);

impl Lines {
    fn new(servers: usize) -> Self {
        Lines((0..servers).map(|_| Arc::default()).collect())
    }
}

type Queued = Pin<Box<dyn Future<Output = OwnedMutexGuard<()>> + Send>>;

/// A place in one server's line, taken when the command is made (before
/// any task runs it), so the line's order is the order of the calls.
struct Place {
    _lines: Arc<Lines>,
    turn: Turn,
}

enum Turn {
    Now(OwnedMutexGuard<()>),
    Queued(Queued),
}

/// Takes a place in server `server`'s line of `lines` now.
fn place(lines: &Arc<Lines>, server: usize) -> Place {
    let line = &lines.0[server];
    // A free line has no one queued (a turn given back goes to the first
    // in the queue), so taking it at once keeps the order.
    if let Ok(turn) = line.clone().try_lock_owned() {
        return Place {
            _lines: lines.clone(),
            turn: Turn::Now(turn),
        };
    }
    let mut queued: Queued = Box::pin(line.clone().lock_owned());
    // The first poll takes the turn or joins the queue; later polls keep
    // that place (and register the waker of whoever awaits it).
    let turn = match queued
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(turn) => Turn::Now(turn),
        Poll::Pending => Turn::Queued(queued),
    };
    Place {
        _lines: lines.clone(),
        turn,
    }
}

impl Place {
    /// Runs `call` in its turn (held until `call` is answered or dropped),
    /// waiting at most `bound` for it; a call whose turn did not come is
    /// never sent.
    async fn run<T>(self, bound: Duration, call: impl Future<Output = Result<T>>) -> Result<T> {
        let _turn = match self.turn {
            Turn::Now(turn) => turn,
            Turn::Queued(queued) => tokio::time::timeout(bound, queued)
                .await
                .map_err(|_| Error::Timeout(bound))?,
        };
        call.await
    }
}

/// What became of one attempt's `SET` on one server, which its undo needs
/// to know: still waiting for its turn, sent (the key may be ours),
/// refused (another holder's key), or never sent.
#[derive(Debug, Default)]
struct SetState(AtomicU8);

impl SetState {
    const WAITING: u8 = 0;
    const SENT: u8 = 1;
    const REFUSED: u8 = 2;
    const UNSENT: u8 = 3;

    fn note(&self, state: u8) {
        self.0.store(state, Ordering::Release);
    }

    /// Whether the `SET` is known to have set nothing.
    fn nothing_to_undo(&self) -> bool {
        matches!(self.0.load(Ordering::Acquire), Self::REFUSED | Self::UNSENT)
    }
}

/// Notes a `SET` that ends (answered, timed out or dropped) while still
/// waiting for its turn as never sent.
struct Unsent<'a>(&'a SetState);

impl Drop for Unsent<'_> {
    fn drop(&mut self) {
        let _ = self.0.0.compare_exchange(
            SetState::WAITING,
            SetState::UNSENT,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }
}

/// First pause before a release or undo that failed on a server is sent
/// again; each further pause doubles, up to [`RESEND_MAX`].
const RESEND_FIRST: Duration = Duration::from_millis(10);
const RESEND_MAX: Duration = Duration::from_secs(1);
/// How often a release or undo is sent to one server at most: enough to
/// outlast a reconnect (about 2.3 s of pauses), few enough that a server
/// that stays down does not gather a task per attempt for a whole lease.
/// A key such a server still holds when it comes back expires with its
/// lease.
const RESEND_TRIES: u32 = 8;

/// Whether `error` says the connection could not be made at all: the
/// command never left.
fn refused(error: &Error) -> bool {
    match error {
        Error::Backend(error) => std::error::Error::source(error)
            .and_then(|source| source.downcast_ref::<redis::RedisError>())
            .is_some_and(redis::RedisError::is_connection_refusal),
        _ => false,
    }
}

/// Sends what `send` makes until the server answers, at most
/// [`RESEND_TRIES`] times, and not once another try could only end after
/// `until` (when the key it removes has expired anyway). It is
/// idempotent: a compare-and-delete by token.
async fn until_answered<T, F, Fut>(until: Instant, send: F) -> Result<T>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let mut pause = RESEND_FIRST;
    let mut tries = 1;
    loop {
        match send().await {
            Ok(answer) => return Ok(answer),
            Err(error) if tries >= RESEND_TRIES || Instant::now() + pause >= until => {
                return Err(error);
            }
            Err(error) => {
                tracing::debug!(%error, ?pause, "a Redlock release did not reach a server; sending it again");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(RESEND_MAX);
                tries += 1;
            }
        }
    }
}

/// Runs `call` in a task of its own, so that it outlives the caller's wait.
/// redis-rs never sends a queued command whose caller stopped waiting: a
/// release held back past the per-server timeout by a stalled connection
/// would be dropped, and the key it undoes kept for its whole lease. In a
/// task of its own it is sent when the connection moves again, unless the
/// server's own response timeout runs out first.
fn detached<T, F>(call: F) -> impl Future<Output = Result<T>> + Send + 'static
where
    F: Future<Output = Result<T>> + Send + 'static,
    T: Send + 'static,
{
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            let task = runtime.spawn(call);
            Either::Left(async move {
                match task.await {
                    Ok(result) => result,
                    Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
                    Err(_) => Err(Error::Backend(BackendError::new(
                        std::io::Error::other("the runtime shut down before the server answered"),
                        None,
                    ))),
                }
            })
        }
        Err(_) => Either::Right(call),
    }
}

fn plain_only(kind: Kind) -> Result<()> {
    if kind == Kind::Plain {
        Ok(())
    } else {
        Err(Error::invalid_argument(
            "kind",
            "Redlock supports plain locks only",
        ))
    }
}

impl LockBackend for Redlock {
    type Waiter = RedlockWaiter;

    async fn acquire(&self, request: &AcquireRequest<'_>) -> Result<Attempt> {
        plain_only(request.kind)?;
        if request.fencing {
            return Err(Error::invalid_argument(
                "fencing",
                "Redlock cannot issue monotonic fencing tokens",
            ));
        }
        let started = Instant::now();
        let (name, token, lease) = (request.name, request.token, request.lease);
        let waits = request.waits;
        let quorum = self.quorum();
        let (lines, _) = self.lines(token, lease);
        let bound = self.per_server_timeout;
        let sets: Arc<[SetState]> = self.servers.iter().map(|_| SetState::default()).collect();
        let results = self
            .on_all_until(
                |i, server| {
                    let (name, token, sets) = (name.clone(), token.to_owned(), sets.clone());
                    let place = place(&lines, i);
                    async move {
                        let set = &sets[i];
                        let _unsent = Unsent(set);
                        place
                            .run(bound, async {
                                set.note(SetState::SENT);
                                let attempt = server.set_nx_px(&name, &token, lease, waits).await;
                                match &attempt {
                                    Ok(Attempt::Busy { .. }) => set.note(SetState::REFUSED),
                                    // No connection: the `SET` never left.
                                    Err(error) if refused(error) => set.note(SetState::UNSENT),
                                    _ => {}
                                }
                                attempt
                            })
                            .await
                    }
                },
                // Settled once a majority granted it, or a majority refused.
                |results| {
                    let taken = results
                        .iter()
                        .filter(|r| matches!(r, Ok(Attempt::Acquired { .. })))
                        .count();
                    let busy = results
                        .iter()
                        .filter(|r| matches!(r, Ok(Attempt::Busy { .. })))
                        .count();
                    taken >= quorum || busy >= quorum
                },
            )
            .await;
        let taken = results
            .iter()
            .filter(|r| matches!(r, Ok(Attempt::Acquired { .. })))
            .count();
        let validity = request
            .lease
            .checked_sub(started.elapsed() + self.clock_drift(request.lease));
        if taken >= self.quorum() && validity.is_some_and(|v| !v.is_zero()) {
            self.count(token, started + lease);
            return Ok(Attempt::Acquired { fence: None });
        }
        // Not ours: undo everywhere, including servers whose answer was lost
        // or not awaited, without waking waiters (a failed attempt frees
        // nothing that another attempt could get). Each undo runs after
        // its server's `SET` and before anything sent later for this token
        // (the next attempt's `SET`), and is sent again while it fails,
        // until the attempt's keys would have expired anyway. A `SET` that
        // was refused, or never went out, has nothing to undo.
        let until = started + sum(lease, bound);
        let wait = self.turn_bound(Some(until));
        let _ = self
            .on_all(|i, server| {
                if sets[i].nothing_to_undo() {
                    return Either::Left(std::future::ready(Ok(false)));
                }
                let (name, token, sets) = (name.clone(), token.to_owned(), sets.clone());
                let place = place(&lines, i);
                Either::Right(detached(async move {
                    place
                        .run(wait, async {
                            // In line after the `SET`: now its fate is known.
                            if sets[i].nothing_to_undo() {
                                return Ok(false);
                            }
                            until_answered(until, || {
                                server.release_plain_whole(&name, &token, false)
                            })
                            .await
                        })
                        .await
                }))
            })
            .await;
        // Nothing of this attempt can be left on any server: forget the
        // token (a later attempt with it records it again), so refused
        // attempts do not gather records for their whole lease.
        if sets.iter().all(SetState::nothing_to_undo) {
            self.forget(token);
        }
        let answered = results.iter().filter(|r| r.is_ok()).count();
        if answered < self.quorum() {
            return Err(Error::NoQuorum {
                answered,
                needed: self.quorum(),
            });
        }
        let retry_in = results
            .iter()
            .filter_map(|r| match r {
                Ok(Attempt::Busy { retry_in, .. }) => *retry_in,
                _ => None,
            })
            .min();
        Ok(Attempt::busy(retry_in))
    }

    async fn release(&self, kind: Kind, name: &Name, token: &str) -> Result<bool> {
        plain_only(kind)?;
        // After everything sent for this token, on every server; sent again
        // to a server where it fails (an error says nothing of the key
        // there, whatever the majority said) until the server answers or
        // the longest lease sent would have ended.
        let (lines, ends) = self.take(token);
        let until = ends.unwrap_or_else(Instant::now);
        let wait = self.turn_bound(ends);
        let results = self
            .on_all_until(
                |i, server| {
                    let (name, token) = (name.clone(), token.to_owned());
                    let place = place(&lines, i);
                    detached(async move {
                        place
                            .run(wait, async {
                                until_answered(until, || {
                                    server.release_plain_whole(&name, &token, true)
                                })
                                .await
                            })
                            .await
                    })
                },
                |results| self.majority(results),
            )
            .await;
        self.tally(&results)
    }

    async fn extend(&self, kind: Kind, name: &Name, token: &str, lease: Duration) -> Result<bool> {
        plain_only(kind)?;
        let started = Instant::now();
        let (lines, counted) = self.lines(token, lease);
        let bound = self.per_server_timeout;
        let results = self
            .on_all_until(
                |i, server| {
                    let (name, token) = (name.clone(), token.to_owned());
                    place(&lines, i).run(bound, async move {
                        server.extend(kind, &name, &token, lease).await
                    })
                },
                |results| self.majority(results),
            )
            .await;
        let extended = self.tally(&results);
        if matches!(extended, Ok(true)) {
            self.count(token, started + lease);
            return extended;
        }
        // Not counted, but some servers may have taken it: set every server
        // back to the lease the client still counts (none left: gone), in
        // line after the extend, so none keeps the key longer than that.
        if let Some(counted) = counted {
            let wait = self.turn_bound(None);
            for (i, server) in self.servers.iter().enumerate() {
                let (server, name, token) = (server.clone(), name.clone(), token.to_owned());
                let place = place(&lines, i);
                drop(detached(async move {
                    place
                        .run(wait, async {
                            match counted.checked_duration_since(Instant::now()) {
                                Some(left) if !left.is_zero() => {
                                    server.extend(kind, &name, &token, left).await
                                }
                                _ => server.release_plain_whole(&name, &token, true).await,
                            }
                        })
                        .await
                }));
            }
        }
        extended
    }

    async fn force_release(&self, kind: Kind, name: &Name) -> Result<bool> {
        plain_only(kind)?;
        let results = self
            .on_all(|_, server| {
                let name = name.clone();
                async move { server.force_release(kind, &name).await }
            })
            .await;
        if results.iter().filter(|r| r.is_ok()).count() < self.quorum() {
            return self.tally(&results);
        }
        Ok(results.iter().any(|r| matches!(r, Ok(true))))
    }

    /// The state a majority of servers agree on (the same holder); `None`
    /// when no holder has a majority.
    async fn inspect(&self, kind: Kind, name: &Name) -> Result<Option<LockState>> {
        plain_only(kind)?;
        let results = self
            .on_all(|_, server| {
                let name = name.clone();
                async move { server.inspect(kind, &name).await }
            })
            .await;
        let answers: Vec<Option<LockState>> = results.into_iter().filter_map(Result::ok).collect();
        if answers.len() < self.quorum() {
            return Err(Error::NoQuorum {
                answered: answers.len(),
                needed: self.quorum(),
            });
        }
        let held = answers.iter().flatten().find(|state| {
            let agree = answers
                .iter()
                .flatten()
                .filter(|other| other.holder == state.holder)
                .count();
            agree >= self.quorum()
        });
        // The shortest lease among the servers that agree is the one to count on.
        Ok(held.map(|state| {
            let remaining = answers
                .iter()
                .flatten()
                .filter(|other| other.holder == state.holder)
                .filter_map(|other| other.remaining)
                .min();
            LockState {
                remaining,
                ..state.clone()
            }
        }))
    }

    fn waiter(&self, kind: Kind, name: &Name, token: &str) -> RedlockWaiter {
        RedlockWaiter::new(
            self.retry_delay,
            self.per_server_timeout,
            self.servers
                .iter()
                .map(|server| server.waiter(kind, name, token))
                .collect(),
        )
    }

    fn clock_drift(&self, lease: Duration) -> Duration {
        lease / 100 + Duration::from_millis(2)
    }
}
