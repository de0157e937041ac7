//! The Redis transport: one shared, multiplexed, auto-reconnecting connection,
//! scripts sent by `EVALSHA`, every call bounded by a timeout.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use redis::FromRedisValue;
use redis::aio::{ConnectionLike, ConnectionManager};

use super::config::{RedisConfig, manager_config};
use super::notify::Reader;
use super::pubsub::{Subscriber, Subscription};
use super::replicas::{Dedicated, Open, SyncReplicas};
use super::script::{Invocation, NOT_RUN_PAUSE, NOT_RUN_RETRIES, no_script, not_run};
use super::version::check_server;
use crate::error::{Error, Result};
use crate::name::{KeySpace, Name};

/// A Redis backend: one shared multiplexed connection (cloning the backend
/// shares it), plus one shared pub/sub subscriber for lock wake-ups.
///
/// Generic over the connection so a [`ConnectionManager`] (the default) and a
/// cluster connection both fit.
///
/// ```no_run
/// # async fn run() -> lock_core::Result<()> {
/// use lock_core::backend::RedisBackend;
///
/// let backend = RedisBackend::connect("redis://127.0.0.1:6379").await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisBackend<C = ConnectionManager> {
    conn: C,
    keyspace: KeySpace,
    timeout: Duration,
    pub(super) subscriber: Option<Subscriber>,
    /// Whether wake-ups go out on sharded channels (`SPUBLISH`): a
    /// cluster of Redis 7 or later.
    pub(super) sharded_pubsub: bool,
    sync: Option<SyncReplicas>,
    /// Connections of its own for synced writes, when the backend knows
    /// how to open them.
    pub(super) dedicated: Option<Arc<Dedicated<C>>>,
}

impl<C> fmt::Debug for RedisBackend<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisBackend")
            .field("keyspace", &self.keyspace)
            .field("timeout", &self.timeout)
            .field("pubsub", &self.subscriber.is_some())
            .finish_non_exhaustive()
    }
}

/// `error` naming the URL it came from, when the backend failed: "cannot
/// connect to redis://cache:6379/: Connection refused" says which of a
/// deployment's settings is wrong. The variant stays [`Error::Backend`],
/// with the server's code and redis-rs's error as the source.
fn naming_url(error: Error, url: &str) -> Error {
    match error {
        Error::Backend(source) => Error::Backend(
            source.context(format_args!("cannot connect to {}", without_password(url))),
        ),
        other => other,
    }
}

/// A failure to connect as the crate's error: redis-rs's own connect or
/// response timeout (the same bound) is the typed [`Error::Timeout`].
fn connecting(error: redis::RedisError, timeout: Duration) -> Error {
    if error.is_timeout() {
        Error::Timeout(timeout)
    } else {
        error.into()
    }
}

/// `url` with its password, if it has one, written `***`: error messages
/// end up in logs. Whatever stands between the scheme and the last `@`
/// counts as user information, so that a malformed URL is masked too.
fn without_password(url: &str) -> String {
    let start = url.find("://").map_or(0, |i| i + 3);
    let Some(at) = url.rfind('@').filter(|&at| at >= start) else {
        return url.to_owned();
    };
    match url[start..at].find(':') {
        Some(colon) => format!("{}:***{}", &url[..start + colon], &url[at..]),
        None => url.to_owned(),
    }
}

impl RedisBackend<ConnectionManager> {
    /// Connects to `url` with the default [`RedisConfig`].
    ///
    /// # Errors
    /// [`Error::Backend`] for a bad URL or a refused connection (its message
    /// names the URL, without a password), [`Error::Timeout`] when the
    /// server does not answer within the connect timeout.
    pub async fn connect(url: &str) -> Result<Self> {
        let connecting =
            async { Self::connect_with(redis::Client::open(url)?, RedisConfig::default()).await };
        connecting.await.map_err(|error| naming_url(error, url))
    }

    /// Connects with `client` and `config`: a [`ConnectionManager`] for commands
    /// (reconnects on its own) and a pub/sub subscriber made on first use.
    ///
    /// # Errors
    /// As [`connect`](Self::connect).
    pub async fn connect_with(client: redis::Client, config: RedisConfig) -> Result<Self> {
        let conn = tokio::time::timeout(
            config.connect_timeout,
            ConnectionManager::new_with_config(client.clone(), manager_config(&config)),
        )
        .await
        .map_err(|_| Error::Timeout(config.connect_timeout))?
        .map_err(|error| connecting(error, config.connect_timeout))?;
        // Part of connecting, so bounded as connecting is, on a connection
        // of its own (the shared one gives up after the response timeout).
        let check = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(config.connect_timeout))
            .set_response_timeout(Some(config.connect_timeout));
        let mut once = client
            .get_multiplexed_async_connection_with_config(&check)
            .await
            .map_err(|error| connecting(error, config.connect_timeout))?;
        check_server(&mut once, config.connect_timeout).await?;
        let open: Open<ConnectionManager> = {
            // `WAIT` may rightly take the whole sync timeout, longer than
            // the response timeout: a synced write is bounded as a whole
            // instead (see `invoke_write`).
            let manager = manager_config(&config).set_response_timeout(None);
            let (client, manager) = (client.clone(), manager);
            Arc::new(move || {
                let (client, manager) = (client.clone(), manager.clone());
                Box::pin(
                    async move { Ok(ConnectionManager::new_with_config(client, manager).await?) },
                )
            })
        };
        let mut backend = Self::from_connection(conn, config).with_subscriber(client);
        backend.dedicated = Some(Arc::new(Dedicated::new(open)));
        Ok(backend)
    }
}

/// How many replicas confirmed a synced write, of how many asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Replicated {
    pub(crate) acknowledged: u32,
    pub(crate) needed: u32,
}

impl Replicated {
    /// Whether enough replicas confirmed it.
    pub(crate) fn enough(self) -> bool {
        self.acknowledged >= self.needed
    }

    /// The error a write too few replicas confirmed gives.
    pub(crate) fn error(self) -> Error {
        Error::NotReplicated {
            acknowledged: self.acknowledged,
            needed: self.needed,
        }
    }
}

impl<C> RedisBackend<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// Wraps an existing connection. Without [`with_subscriber`](Self::with_subscriber),
    /// lock waiters poll (bounded by the holder's remaining TTL) instead of being
    /// woken by pub/sub.
    pub fn from_connection(conn: C, config: RedisConfig) -> Self {
        RedisBackend {
            conn,
            keyspace: config.keyspace,
            timeout: config.response_timeout,
            subscriber: None,
            sharded_pubsub: false,
            sync: config.sync,
            dedicated: None,
        }
    }

    /// This backend (sharing its connections) with every lock, semaphore and
    /// stock write waiting until `replicas` replicas confirmed it, for at
    /// most `timeout`: the write and `WAIT replicas timeout` go out together
    /// to the key's master, on a connection of their own (a slow `WAIT`
    /// holds no other caller's commands). 0 replicas turns it off. Rate
    /// limits and releases are not synced: a release a failover lost leaves
    /// a lock that expires with its lease.
    ///
    /// * A lock or permit that fewer replicas confirmed is released again,
    ///   and the acquire fails with [`Error::NotReplicated`] instead of
    ///   granting a lock a failover could grant twice. A renewal that fewer
    ///   replicas confirmed does not count: the guard keeps the lease it
    ///   had, and loses it if no renewal is confirmed in time.
    /// * A stock change that fewer replicas confirmed may stand on the
    ///   master, and fails with [`Error::NotReplicated`]: retry it with the
    ///   same operation or order id, which replays its first outcome.
    /// * A server whose `min-replicas-to-write` is not met refuses the write
    ///   ([`Error::NoReplicas`]).
    ///
    /// `WAIT` is not consensus: a write confirmed by a replica can still be
    /// lost if that replica is not the one promoted, and the Redis docs say
    /// so. On the server, `min-replicas-to-write 1` and
    /// `min-replicas-max-lag` narrow the window in which a master takes
    /// writes that no replica has; fencing tokens checked by the resource
    /// ([`Fence`](crate::lock::Fence)) are the guard that holds whatever
    /// the failover lost.
    ///
    /// A backend made with [`from_connection`](Self::from_connection) has
    /// no connections of its own: its synced writes use the shared one.
    ///
    /// ```no_run
    /// # async fn run() -> lock_core::Result<()> {
    /// use std::time::Duration;
    /// use lock_core::backend::RedisBackend;
    /// use lock_core::lock::Lock;
    ///
    /// let backend = RedisBackend::connect("redis://10.0.0.1:6379").await?;
    /// let synced = backend.sync_replicas(1, Duration::from_secs(1));
    /// let lock = Lock::new(synced, "payout:2024-07")?;
    /// # Ok(()) }
    /// ```
    pub fn sync_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.sync = (replicas > 0).then_some(SyncReplicas { replicas, timeout });
        self
    }

    /// Whether writes wait for replicas ([`sync_replicas`](Self::sync_replicas)).
    pub(crate) fn syncs_replicas(&self) -> bool {
        self.sync.is_some()
    }

    /// Runs a script call that writes a lock, permit or stock: as
    /// [`invoke`](Self::invoke) unless writes are synced; then with `WAIT`
    /// on a connection of its own, bounded by the response timeout and the
    /// sync timeout. The answer, and how many replicas confirmed it (none
    /// when writes are not synced).
    pub(crate) async fn invoke_write<T: FromRedisValue + Send>(
        &self,
        call: Invocation<'_>,
    ) -> Result<(T, Option<Replicated>)> {
        let Some(sync) = self.sync else {
            return Ok((self.invoke(call).await?, None));
        };
        let bound = crate::time::sum(self.timeout, sync.timeout);
        let write = async {
            match &self.dedicated {
                Some(dedicated) => dedicated.write(&call, self.sharded_pubsub, sync).await,
                None => {
                    let dedicated = Dedicated::new(Arc::new({
                        let conn = self.conn.clone();
                        move || {
                            let conn = conn.clone();
                            Box::pin(async move { Ok(conn) })
                        }
                    }));
                    dedicated.write(&call, self.sharded_pubsub, sync).await
                }
            }
        };
        let (answer, acknowledged) = tokio::time::timeout(bound, write)
            .await
            .map_err(|_| Error::Timeout(bound))??;
        Ok((
            answer,
            Some(Replicated {
                acknowledged,
                needed: sync.replicas,
            }),
        ))
    }

    /// Adds the shared pub/sub subscriber (connected on first use) that wakes
    /// lock waiters when a lock is released.
    pub fn with_subscriber(mut self, client: redis::Client) -> Self {
        self.subscriber = Some(Subscriber::new(client, self.timeout));
        self
    }

    /// The same backend (sharing its connection and subscriber) with keys
    /// under another prefix: separate limits, locks and stock on one server.
    ///
    /// # Errors
    /// As [`RedisConfig::prefix`].
    pub fn with_prefix(&self, prefix: impl AsRef<str>) -> Result<Self> {
        Ok(RedisBackend {
            keyspace: KeySpace::new(prefix)?,
            ..self.clone()
        })
    }

    /// A clone of the shared connection, for commands of your own.
    pub fn connection(&self) -> C {
        self.conn.clone()
    }

    /// The key space.
    pub fn keyspace(&self) -> &KeySpace {
        &self.keyspace
    }

    /// `<prefix>{<name>}:<suffix>`.
    pub(crate) fn key(&self, name: &Name, suffix: &str) -> String {
        self.keyspace.key(name, suffix)
    }

    /// The response timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Whether lock wake-ups go out on sharded channels (`SPUBLISH`, to
    /// `SSUBSCRIBE`rs): on a cluster of Redis 7 or later.
    pub fn sharded_pubsub(&self) -> bool {
        self.sharded_pubsub
    }

    /// Checks that the server is one this crate supports ([`connect`](RedisBackend::connect)
    /// does this at once; call it after [`from_connection`](Self::from_connection)).
    /// A server that does not say its version (`INFO` refused to an ACL
    /// user) is taken as supported, with a warning.
    ///
    /// # Errors
    /// [`Error::UnsupportedServer`] for a server older than
    /// [`MIN_REDIS_VERSION`](super::MIN_REDIS_VERSION); backend failures.
    pub async fn check_server(&self) -> Result<()> {
        check_server(&mut self.conn.clone(), self.timeout)
            .await
            .map(drop)
    }

    /// Runs a script call on the shared connection, bounded by the
    /// response timeout: `EVALSHA`, then on `NOSCRIPT` the same call as
    /// `EVAL` with the script's text (see [`LuaScript`](super::script::LuaScript)).
    pub(crate) async fn invoke<T: FromRedisValue>(&self, call: Invocation<'_>) -> Result<T> {
        let mut conn = self.conn.clone();
        let sharded = self.sharded_pubsub;
        self.bounded(async move {
            let (mut whole, mut retries, mut pause) = (false, 0, NOT_RUN_PAUSE);
            loop {
                match call.cmd(sharded, whole).query_async(&mut conn).await {
                    Err(error) if no_script(&error) && !whole => whole = true,
                    // Never again after a failed connection: the call may
                    // have run. Only an answer that says it did not.
                    Err(error) if not_run(&error) && retries < NOT_RUN_RETRIES => {
                        retries += 1;
                        tokio::time::sleep(pause).await;
                        pause *= 2;
                    }
                    answer => return answer,
                }
            }
        })
        .await
    }

    /// Awaits a call on the connection, bounded by the response timeout.
    pub(crate) async fn bounded<T>(
        &self,
        call: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T> {
        match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok(value)) => Ok(value),
            // The connection's own response timeout, the same bound, may
            // fire first: the same typed error either way.
            Ok(Err(error)) if error.is_timeout() => Err(Error::Timeout(self.timeout)),
            Ok(Err(error)) => Err(error.into()),
            Err(_) => Err(Error::Timeout(self.timeout)),
        }
    }

    /// A local waiter's registration on `channel`, whose messages `reader`
    /// reads (see [`Reader`]); none without a subscriber.
    pub(crate) fn subscription(
        &self,
        channel: String,
        reader: Option<Reader>,
    ) -> Option<Subscription> {
        self.subscriber
            .as_ref()
            .map(|s| s.register(channel, reader))
    }
}
