//! Redlock: one lock over N independent Redis servers.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::{Either, join_all};
use futures_util::stream::FuturesUnordered;
use tokio::time::Instant;

use super::redis_waiter::RedlockWaiter;
use super::{AcquireRequest, Attempt, Kind, LockBackend, LockState};
use crate::backend::{RedisBackend, RedisConfig};
use crate::error::{BackendError, Error, Result};
use crate::name::Name;

/// A lock backend over N independent Redis servers (the Redlock algorithm).
///
/// An acquisition sends `SET NX PX` to every server at once, each bounded by a
/// per-server timeout far below the lease, and succeeds only with a majority
/// (N/2 + 1) and a positive validity: lease − elapsed − drift, with drift =
/// lease/100 + 2 ms and elapsed measured on a monotonic clock. On failure the
/// lock is released on every server, including those that did not answer in
/// time. Extension and release also go to every server and count a
/// majority. A release is one self-contained command (the script's text,
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
}

/// Default bound on each server's answer.
pub const DEFAULT_PER_SERVER_TIMEOUT: Duration = Duration::from_millis(50);

impl Redlock {
    /// Redlock over already connected servers.
    ///
    /// Each backend's response timeout bounds how long a release keeps
    /// trying to reach that server after the per-server wait gave up (see
    /// [`per_server_timeout`](Self::per_server_timeout)); keep it well above
    /// the per-server timeout.
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
        })
    }

    /// Connects to every URL, each with [`RedisConfig`]'s default response
    /// timeout (2 s): how long a release keeps trying to reach a slow
    /// server. Answers are waited for [`DEFAULT_PER_SERVER_TIMEOUT`].
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
    /// to the server's own response timeout.
    pub fn per_server_timeout(mut self, timeout: Duration) -> Self {
        self.per_server_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// Longest wait between attempts while the lock is busy (default 50 ms,
    /// randomized by ±50%). Waiters are woken earlier by the release
    /// message of any server, so this bounds only how long a lost message
    /// or an attempt that lost a race costs.
    pub fn retry_delay(mut self, delay: Duration) -> Self {
        self.retry_delay = delay.max(Duration::from_millis(1));
        self
    }

    /// How many servers make a majority.
    pub fn quorum(&self) -> usize {
        self.servers.len() / 2 + 1
    }

    /// Runs `op` on every server at once, each bounded by the per-server
    /// timeout, and waits for every answer.
    async fn on_all<T, F, Fut>(&self, op: F) -> Vec<Result<T>>
    where
        F: Fn(RedisBackend) -> Fut,
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
        F: Fn(RedisBackend) -> Fut,
        Fut: Future<Output = Result<T>> + Send + 'static,
        T: Send + 'static,
    {
        let timeout = self.per_server_timeout;
        let mut pending: FuturesUnordered<_> = self
            .servers
            .iter()
            .map(|server| {
                // A server's own response timeout already bounds the call
                // unless ours is shorter: one timer per call, not two.
                let bound = (timeout < server.timeout()).then_some(timeout);
                let call = op(server.clone());
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

    /// Counts `Ok(true)` answers; a majority of them is a yes, a majority of
    /// answers without enough yeses a no, too few answers an error.
    fn tally(&self, results: &[Result<bool>]) -> Result<bool> {
        let yes = results.iter().filter(|r| matches!(r, Ok(true))).count();
        let answered = results.iter().filter(|r| r.is_ok()).count();
        if yes >= self.quorum() {
            Ok(true)
        } else if answered >= self.quorum() {
            Ok(false)
        } else {
            Err(Error::NoQuorum {
                answered,
                needed: self.quorum(),
            })
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
        let results = self
            .on_all_until(
                |server| {
                    let (name, token) = (name.clone(), token.to_owned());
                    async move { server.set_nx_px(&name, &token, lease, waits).await }
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
            return Ok(Attempt::Acquired { fence: None });
        }
        // Not ours: undo everywhere, including servers whose answer was lost
        // or not awaited, without waking waiters (a failed attempt frees
        // nothing that another attempt could get).
        let _ = self
            .on_all(|server| {
                let (name, token) = (name.clone(), token.to_owned());
                detached(async move { server.release_plain_whole(&name, &token, false).await })
            })
            .await;
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
        let results = self
            .on_all_until(
                |server| {
                    let (name, token) = (name.clone(), token.to_owned());
                    detached(async move { server.release_plain_whole(&name, &token, true).await })
                },
                |results| self.majority(results),
            )
            .await;
        self.tally(&results)
    }

    async fn extend(&self, kind: Kind, name: &Name, token: &str, lease: Duration) -> Result<bool> {
        plain_only(kind)?;
        let results = self
            .on_all_until(
                |server| {
                    let (name, token) = (name.clone(), token.to_owned());
                    async move { server.extend(kind, &name, &token, lease).await }
                },
                |results| self.majority(results),
            )
            .await;
        self.tally(&results)
    }

    async fn force_release(&self, kind: Kind, name: &Name) -> Result<bool> {
        plain_only(kind)?;
        let results = self
            .on_all(|server| {
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
            .on_all(|server| {
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
