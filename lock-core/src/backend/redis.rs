//! The Redis transport: one shared, multiplexed, auto-reconnecting connection,
//! scripts sent by `EVALSHA`, every call bounded by a timeout.

use std::fmt;
use std::time::Duration;

use redis::FromRedisValue;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};

use super::pubsub::{Subscriber, Subscription};
use super::script::{Invocation, no_script};
use crate::error::{Error, Result};
use crate::key::{KeySpace, Name};

/// Settings of a [`RedisBackend`].
///
/// ```
/// use std::time::Duration;
/// use lock_core::backend::RedisConfig;
///
/// let config = RedisConfig::default()
///     .prefix("shop:")
///     .unwrap()
///     .response_timeout(Duration::from_millis(500));
/// assert_eq!(config.keyspace().prefix(), "shop:");
/// ```
#[derive(Clone, Debug)]
pub struct RedisConfig {
    keyspace: KeySpace,
    response_timeout: Duration,
    connect_timeout: Duration,
}

impl Default for RedisConfig {
    fn default() -> Self {
        RedisConfig {
            keyspace: KeySpace::default(),
            response_timeout: Duration::from_secs(2),
            connect_timeout: Duration::from_secs(2),
        }
    }
}

impl RedisConfig {
    /// Prefix of every key written (default [`DEFAULT_PREFIX`](crate::key::DEFAULT_PREFIX)).
    ///
    /// # Errors
    /// [`Error::InvalidName`] for a prefix with braces, control characters or
    /// more than [`MAX_PREFIX_LEN`](crate::key::MAX_PREFIX_LEN) bytes.
    pub fn prefix(mut self, prefix: impl AsRef<str>) -> Result<Self> {
        self.keyspace = KeySpace::new(prefix)?;
        Ok(self)
    }

    /// Longest wait for any one reply (default 2 s). A call that takes longer
    /// fails with [`Error::Timeout`], and its outcome is unknown: a command
    /// already sent may still be carried out, and one still queued on the
    /// connection when the wait ends is not sent at all. Retry stock
    /// operations with the same operation or order id, which replays the
    /// first outcome. Locks give back what a timed-out acquire may have
    /// taken, in the background, within this same bound. Zero is taken as 1 ms.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// Longest wait for a connection to be made (default 2 s). Zero is taken as 1 ms.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// The key space.
    pub fn keyspace(&self) -> &KeySpace {
        &self.keyspace
    }

    /// The response timeout.
    pub fn get_response_timeout(&self) -> Duration {
        self.response_timeout
    }
}

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
    subscriber: Option<Subscriber>,
    /// Whether wake-ups go out on sharded channels (`SPUBLISH`): a
    /// cluster of Redis 7 or later.
    sharded_pubsub: bool,
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

impl RedisBackend<ConnectionManager> {
    /// Connects to `url` with the default [`RedisConfig`].
    ///
    /// # Errors
    /// [`Error::Redis`] for a bad URL or a refused connection, [`Error::Timeout`]
    /// when the server does not answer within the connect timeout.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(redis::Client::open(url)?, RedisConfig::default()).await
    }

    /// Connects with `client` and `config`: a [`ConnectionManager`] for commands
    /// (reconnects on its own) and a pub/sub subscriber made on first use.
    ///
    /// # Errors
    /// As [`connect`](Self::connect).
    pub async fn connect_with(client: redis::Client, config: RedisConfig) -> Result<Self> {
        let manager_config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(config.response_timeout))
            .set_connection_timeout(Some(config.connect_timeout))
            .set_number_of_retries(2)
            .set_max_delay(config.connect_timeout);
        let conn = tokio::time::timeout(
            config.connect_timeout,
            ConnectionManager::new_with_config(client.clone(), manager_config),
        )
        .await
        .map_err(|_| Error::Timeout(config.connect_timeout))??;
        // Part of connecting, so bounded as connecting is, on a connection
        // of its own (the shared one gives up after the response timeout).
        let check = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(config.connect_timeout))
            .set_response_timeout(Some(config.connect_timeout));
        let mut once = client
            .get_multiplexed_async_connection_with_config(&check)
            .await?;
        check_server_on(&mut once, config.connect_timeout).await?;
        Ok(Self::from_connection(conn, config).with_subscriber(client))
    }
}

/// The oldest Redis supported: the scripts read the server's clock
/// (`TIME`) before they write, which Redis allows from 5.0 on.
pub const MIN_REDIS_VERSION: &str = "5.0";

/// The `major.minor` of a `redis_version:` line in `INFO server`'s answer.
fn server_version(info: &str) -> Option<(u32, u32, &str)> {
    let version = info
        .lines()
        .find_map(|line| line.strip_prefix("redis_version:"))?
        .trim();
    let mut parts = version.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor, version))
}

/// Asks the server on `conn` its version, within `timeout`, and refuses one
/// older than [`MIN_REDIS_VERSION`].
async fn check_server_on(conn: &mut impl ConnectionLike, timeout: Duration) -> Result<()> {
    let mut info = redis::cmd("INFO");
    info.arg("server");
    let info = match tokio::time::timeout(timeout, info.query_async::<String>(conn)).await {
        Ok(Ok(info)) => info,
        Ok(Err(error)) if error.code() == Some("NOPERM") => {
            tracing::warn!(%error, "cannot read the Redis version (INFO is not allowed); {MIN_REDIS_VERSION} or later is needed");
            return Ok(());
        }
        Ok(Err(error)) => return Err(error.into()),
        Err(_) => return Err(Error::Timeout(timeout)),
    };
    check_version(&info)
}

/// Refuses a server older than [`MIN_REDIS_VERSION`], given its `INFO`.
fn check_version(info: &str) -> Result<()> {
    match server_version(info) {
        Some((major, _, version)) if major < 5 => Err(Error::UnsupportedServer {
            version: version.to_owned(),
            minimum: MIN_REDIS_VERSION,
        }),
        _ => Ok(()),
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
        }
    }

    /// Adds the shared pub/sub subscriber (connected on first use) that wakes
    /// lock waiters when a lock is released.
    pub fn with_subscriber(mut self, client: redis::Client) -> Self {
        self.subscriber = Some(Subscriber::new(client, self.timeout));
        self
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

    /// Whether wake-ups go out on sharded channels.
    pub(crate) fn sharded_pubsub(&self) -> bool {
        self.sharded_pubsub
    }

    /// Checks that the server is one this crate supports ([`connect`](RedisBackend::connect)
    /// does this at once; call it after [`from_connection`](Self::from_connection)).
    /// A server that does not say its version (`INFO` refused to an ACL
    /// user) is taken as supported, with a warning.
    ///
    /// # Errors
    /// [`Error::UnsupportedServer`] for a server older than
    /// [`MIN_REDIS_VERSION`]; backend failures.
    pub async fn check_server(&self) -> Result<()> {
        check_server_on(&mut self.conn.clone(), self.timeout).await
    }

    /// Runs a script call on the shared connection, bounded by the
    /// response timeout: `EVALSHA`, then on `NOSCRIPT` the same call as
    /// `EVAL` with the script's text (see [`LuaScript`](super::script::LuaScript)).
    pub(crate) async fn invoke<T: FromRedisValue>(&self, call: Invocation<'_>) -> Result<T> {
        let mut conn = self.conn.clone();
        let sharded = self.sharded_pubsub;
        self.bounded(async move {
            match call.cmd(sharded, false).query_async(&mut conn).await {
                Err(error) if no_script(&error) => {
                    call.cmd(sharded, true).query_async(&mut conn).await
                }
                answer => answer,
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

    pub(crate) fn subscription(&self, channel: String) -> Option<Subscription> {
        self.subscriber.as_ref().map(|s| s.register(channel))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn servers_before_five_are_refused() {
        let info = |v: &str| format!("# Server\r\nredis_version:{v}\r\nredis_mode:standalone\r\n");
        for old in ["2.8.24", "3.2.12", "4.0.14"] {
            match check_version(&info(old)) {
                Err(Error::UnsupportedServer { version, minimum }) => {
                    assert_eq!((version.as_str(), minimum), (old, MIN_REDIS_VERSION));
                }
                other => panic!("{old}: {other:?}"),
            }
        }
        for new in ["5.0.0", "6.2.14", "7.0.15", "7.2.4", "8.0.2"] {
            assert!(check_version(&info(new)).is_ok(), "{new}");
        }
        // A server that does not say is given the benefit of the doubt.
        assert!(check_version("# Server\r\n").is_ok());
        assert_eq!(server_version(&info("7.0.15")), Some((7, 0, "7.0.15")));
    }
}
