//! Settings of a Redis backend.

use std::time::Duration;

use redis::aio::ConnectionManagerConfig;

use super::replicas::SyncReplicas;
use crate::error::Result;
use crate::name::KeySpace;

/// Settings of a [`RedisBackend`](super::RedisBackend).
///
/// With [`sync_replicas`](Self::sync_replicas), every lock, semaphore and
/// stock write of the backend waits for replicas to confirm it (see
/// [`RedisBackend::sync_replicas`](super::RedisBackend::sync_replicas)).
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
    pub(super) keyspace: KeySpace,
    pub(super) response_timeout: Duration,
    pub(super) connect_timeout: Duration,
    pub(super) sync: Option<SyncReplicas>,
}

impl Default for RedisConfig {
    fn default() -> Self {
        RedisConfig {
            keyspace: KeySpace::default(),
            response_timeout: Duration::from_secs(2),
            connect_timeout: Duration::from_secs(2),
            sync: None,
        }
    }
}

impl RedisConfig {
    /// Prefix of every key written (default [`DEFAULT_PREFIX`](crate::name::DEFAULT_PREFIX)).
    ///
    /// # Errors
    /// [`Error::InvalidName`](crate::Error::InvalidName) for a prefix with braces, control characters or
    /// more than [`MAX_PREFIX_LEN`](crate::name::MAX_PREFIX_LEN) bytes.
    pub fn prefix(mut self, prefix: impl AsRef<str>) -> Result<Self> {
        self.keyspace = KeySpace::new(prefix)?;
        Ok(self)
    }

    /// Longest wait for any one reply (default 2 s). A call that takes longer
    /// fails with [`Error::Timeout`](crate::Error::Timeout), and its outcome is unknown: a command
    /// already sent may still be carried out, and one still queued on the
    /// connection when the wait ends is not sent at all. Retry stock
    /// operations with the same operation or order id, which replays the
    /// first outcome. Locks give back what a timed-out acquire may have
    /// taken, in the background, within this same bound. Zero is taken as 1 ms.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout.clamp(Duration::from_millis(1), crate::time::FOREVER);
        self
    }

    /// Longest wait for a connection to be made (default 2 s). Zero is taken as 1 ms.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout.clamp(Duration::from_millis(1), crate::time::FOREVER);
        self
    }

    /// Makes every lock, semaphore and stock write wait until `replicas`
    /// replicas confirmed it, for at most `timeout` (see
    /// [`RedisBackend::sync_replicas`](super::RedisBackend::sync_replicas)). 0 replicas turns it off.
    pub fn sync_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.sync = (replicas > 0).then_some(SyncReplicas { replicas, timeout });
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

    /// The connect timeout.
    pub fn get_connect_timeout(&self) -> Duration {
        self.connect_timeout
    }
}

/// How the shared connection to one server is kept: timeouts as `config`
/// says, two retries.
pub(super) fn manager_config(config: &RedisConfig) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_response_timeout(Some(config.response_timeout))
        .set_connection_timeout(Some(config.connect_timeout))
        .set_number_of_retries(2)
        .set_max_delay(config.connect_timeout)
}
