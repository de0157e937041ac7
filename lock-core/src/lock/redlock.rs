//! Redlock: one lock over N independent Redis servers.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::{Either, join_all};
use tokio::time::Instant;

use super::interface::{AcquireRequest, Attempt, Kind, LockBackend, LockState};
use super::kinds::redlock_only;
use super::redis_waiter::RedlockWaiter;
use super::redlock_order::{
    Book, Lines, SetState, Unsent, detached, fan_out, majority, place, refused, tally,
    until_answered,
};
use crate::backend::{RedisBackend, RedisConfig};
use crate::error::{Error, Result};
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
    tokens: Arc<Book>,
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

    /// Runs `op` on every server at once (see [`fan_out`]), returning as
    /// soon as `settled` says the answers so far decide the outcome.
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
        fan_out(&self.servers, self.per_server_timeout, op, settled).await
    }

    /// Whether `results` already hold a majority of yeses or of noes.
    fn majority(&self, results: &[Result<bool>]) -> bool {
        majority(results, self.quorum())
    }

    /// A majority's answer (see [`tally`]).
    fn tally(&self, results: &[Result<bool>]) -> Result<bool> {
        tally(results, self.quorum())
    }

    /// `token`'s lines, for commands about to send a lease of `lease`, and
    /// the end of the lease the client counts (if it was granted).
    fn lines(&self, token: &str, lease: Duration) -> (Arc<Lines>, Option<Instant>) {
        // A command may reach its server up to the per-server wait later.
        let ends = Instant::now() + sum(lease, self.per_server_timeout);
        self.tokens.lines(token, ends, self.servers.len())
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

impl LockBackend for Redlock {
    type Waiter = RedlockWaiter;

    async fn acquire(&self, request: &AcquireRequest<'_>) -> Result<Attempt> {
        redlock_only(request.kind)?;
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
            self.tokens.count(token, started + lease);
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
            self.tokens.forget(token);
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
        redlock_only(kind)?;
        // After everything sent for this token, on every server; sent again
        // to a server where it fails (an error says nothing of the key
        // there, whatever the majority said) until the server answers or
        // the longest lease sent would have ended.
        let (lines, ends) = self.tokens.take(token, self.servers.len());
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
        redlock_only(kind)?;
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
            self.tokens.count(token, started + lease);
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
        redlock_only(kind)?;
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
        redlock_only(kind)?;
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
