//! Redlock: one lock over N independent Redis servers.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use tokio::time::Instant;

mod calls;
mod order;
mod tally;
mod waiter;

use self::order::{Book, Lines, fan_out};
use self::tally::{majority, tally};
use crate::backend::{RedisBackend, RedisConfig};
use crate::error::{Error, Result};
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
/// when the holder releases (see `RedlockWaiter`).
///
/// Plain locks only, without fencing tokens: N independent counters cannot
/// give one monotonic sequence. A [`LockBackend`](super::LockBackend) is
/// asked for a kind with each call, so a
/// [`ReentrantLock`](super::ReentrantLock), a fair [`Lock`](super::Lock), a
/// [`Semaphore`](super::Semaphore) or a [`ReadWriteLock`](super::ReadWriteLock)
/// over Redlock compiles, and its first call fails with
/// [`Error::InvalidArgument`], as does a [`Lock`](super::Lock) with
/// fencing tokens.
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
