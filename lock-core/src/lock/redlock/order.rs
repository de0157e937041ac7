//! Redlock's per-token bookkeeping: the order of one token's commands on
//! each server (a line per server), what became of an attempt's `SET`
//! (which its undo needs), and how a failed release or undo is sent again.
//! It also sends to every server at once, and runs a command that must
//! outlive its caller's wait. See [`Redlock`](super::Redlock) for why each
//! exists.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::Either;
use futures_util::stream::FuturesUnordered;
use tokio::sync::OwnedMutexGuard;
use tokio::time::Instant;

use crate::backend::RedisBackend;
use crate::error::{BackendError, Error, Result};

/// What a [`Redlock`](super::Redlock) and its clones sent for each token
/// in use.
#[derive(Debug, Default)]
pub(super) struct Book(Mutex<Tokens>);

impl Book {
    fn tokens(&self) -> MutexGuard<'_, Tokens> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `token`'s lines on `servers` servers, for commands whose keys a
    /// server may keep until `ends`, and the end of the lease the client
    /// counts (if it was granted).
    pub(super) fn lines(
        &self,
        token: &str,
        ends: Instant,
        servers: usize,
    ) -> (Arc<Lines>, Option<Instant>) {
        let mut tokens = self.tokens();
        if !tokens.live.contains_key(token) {
            tokens.prune(Instant::now());
        }
        let sent = tokens.live.entry(token.into()).or_insert_with(|| Sent {
            lines: Weak::new(),
            counted: None,
            ends,
        });
        sent.ends = sent.ends.max(ends);
        let lines = sent.lines.upgrade().unwrap_or_else(|| {
            let lines = Arc::new(Lines::new(servers));
            sent.lines = Arc::downgrade(&lines);
            lines
        });
        (lines, sent.counted)
    }

    /// Forgets `token` if none of its leases is counted by the client.
    pub(super) fn forget(&self, token: &str) {
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
    pub(super) fn count(&self, token: &str, until: Instant) {
        if let Some(sent) = self.tokens().live.get_mut(token) {
            sent.counted = Some(until);
        }
    }

    /// Takes `token`'s record for its release: its lines (on `servers`
    /// servers), and the latest a server may keep its key (`None` when
    /// nothing is known of it).
    pub(super) fn take(&self, token: &str, servers: usize) -> (Arc<Lines>, Option<Instant>) {
        let sent = self.tokens().live.remove(token);
        let lines = sent
            .as_ref()
            .and_then(|sent| sent.lines.upgrade())
            .unwrap_or_else(|| Arc::new(Lines::new(servers)));
        (lines, sent.map(|sent| sent.ends))
    }
}

/// One token's commands as this client sent them (see [`Redlock`]).
#[derive(Debug, Default)]
struct Tokens {
    pub(super) live: HashMap<Box<str>, Sent>,
    /// Size at which the next new token first drops the records no
    /// longer needed.
    pub(super) prune_at: usize,
}

impl Tokens {
    /// Forgets the tokens with no command in their lines and no key a
    /// server could still keep, when enough have gathered (amortized
    /// constant time per token).
    pub(super) fn prune(&mut self, now: Instant) {
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
    pub(super) lines: Weak<Lines>,
    /// The end of the lease the client counts, from the start of the
    /// acquire or extend that granted it.
    pub(super) counted: Option<Instant>,
    /// The latest a server may keep the key: the end of the longest lease
    /// sent, from when it was sent, plus the per-server wait.
    pub(super) ends: Instant,
}

/// One token's line on each server: a tokio mutex, which hands its turn
/// out in the order it was asked for.
#[derive(Debug)]
pub(super) struct Lines(Box<[Arc<tokio::sync::Mutex<()>>]>);

impl Lines {
    pub(super) fn new(servers: usize) -> Self {
        Lines((0..servers).map(|_| Arc::default()).collect())
    }
}

type Queued = Pin<Box<dyn Future<Output = OwnedMutexGuard<()>> + Send>>;

/// A place in one server's line, taken when the command is made (before
/// any task runs it), so the line's order is the order of the calls.
pub(super) struct Place {
    _lines: Arc<Lines>,
    turn: Turn,
}

enum Turn {
    Now(OwnedMutexGuard<()>),
    Queued(Queued),
}

/// Takes a place in server `server`'s line of `lines` now.
pub(super) fn place(lines: &Arc<Lines>, server: usize) -> Place {
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
    pub(super) async fn run<T>(
        self,
        bound: Duration,
        call: impl Future<Output = Result<T>>,
    ) -> Result<T> {
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
pub(super) struct SetState(AtomicU8);

impl SetState {
    pub(super) const WAITING: u8 = 0;
    pub(super) const SENT: u8 = 1;
    pub(super) const REFUSED: u8 = 2;
    pub(super) const UNSENT: u8 = 3;

    pub(super) fn note(&self, state: u8) {
        self.0.store(state, Ordering::Release);
    }

    /// Whether the `SET` is known to have set nothing.
    pub(super) fn nothing_to_undo(&self) -> bool {
        matches!(self.0.load(Ordering::Acquire), Self::REFUSED | Self::UNSENT)
    }
}

/// Notes a `SET` that ends (answered, timed out or dropped) while still
/// waiting for its turn as never sent.
pub(super) struct Unsent<'a>(pub(super) &'a SetState);

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
pub(super) fn refused(error: &Error) -> bool {
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
pub(super) async fn until_answered<T, F, Fut>(until: Instant, send: F) -> Result<T>
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

/// Runs `op` on every server at once, each bounded by the per-server
/// timeout, and returns as soon as `settled` says the answers so far
/// decide the outcome (or every server has answered). Every request is
/// sent before the first answer is read, and calls still running then
/// finish in the background, so each server sees the same commands in
/// the same order whether or not the caller waited for it.
pub(super) async fn fan_out<T, F, Fut>(
    servers: &[RedisBackend],
    timeout: Duration,
    op: F,
    settled: impl Fn(&[Result<T>]) -> bool,
) -> Vec<Result<T>>
where
    F: Fn(usize, RedisBackend) -> Fut,
    Fut: Future<Output = Result<T>> + Send + 'static,
    T: Send + 'static,
{
    let mut pending: FuturesUnordered<_> = servers
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

/// Runs `call` in a task of its own, so that it outlives the caller's wait.
/// redis-rs never sends a queued command whose caller stopped waiting: a
/// release held back past the per-server timeout by a stalled connection
/// would be dropped, and the key it undoes kept for its whole lease. In a
/// task of its own it is sent when the connection moves again, unless the
/// server's own response timeout runs out first.
pub(super) fn detached<T, F>(call: F) -> impl Future<Output = Result<T>> + Send + 'static
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
