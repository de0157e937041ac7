//! Replica safety: a write counts only once enough replicas confirmed it.
//!
//! Redis replicates asynchronously: a master that fails right after a
//! write may hand its place to a replica that never saw it, and a lock
//! granted there is granted again by the new master. With
//! [`RedisBackend::sync_replicas`](super::RedisBackend::sync_replicas), a
//! lock, semaphore or stock write goes out together with `WAIT n timeout`
//! on the key's master (one round trip), as Redisson's synced-replicas
//! check does; a lock that too few replicas confirmed is released again,
//! and the caller gets a typed error.
//!
//! `WAIT` holds its connection until the replicas answer, so it never goes
//! out on the shared connection, where it would hold every other caller's
//! commands: synced writes take a connection of a small pool of their own,
//! one write at a time each.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use parking_lot::Mutex;
use redis::aio::ConnectionLike;
use redis::{FromRedisValue, Value};
use tokio::sync::Semaphore;

use super::script::Invocation;
use crate::error::{Error, Result};

/// How many replicas must confirm a write, and how long to wait for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SyncReplicas {
    pub(crate) replicas: u32,
    pub(crate) timeout: Duration,
}

/// Opens one more connection for synced writes.
pub(crate) type Open<C> = Arc<dyn Fn() -> BoxFuture<'static, Result<C>> + Send + Sync>;

/// The most synced writes under way at once per backend.
const POOL: usize = 8;

/// Connections for synced writes only.
pub(crate) struct Dedicated<C> {
    open: Open<C>,
    idle: Mutex<Vec<C>>,
    permits: Semaphore,
}

impl<C> std::fmt::Debug for Dedicated<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dedicated")
            .field("idle", &self.idle.lock().len())
            .finish_non_exhaustive()
    }
}

impl<C: ConnectionLike + Send + 'static> Dedicated<C> {
    pub(crate) fn new(open: Open<C>) -> Self {
        Dedicated {
            open,
            idle: Mutex::new(Vec::new()),
            permits: Semaphore::new(POOL),
        }
    }

    /// Runs `call` and then `WAIT` on a connection of the pool: the
    /// script's answer and how many replicas confirmed it. The script goes
    /// as `EVAL` with its text, never `EVALSHA`: a `WAIT` pipelined after
    /// an `EVALSHA` the server answers with `NOSCRIPT` would still wait the
    /// whole sync timeout before the `EVAL` could be sent.
    pub(crate) async fn write<T: FromRedisValue>(
        &self,
        call: &Invocation<'_>,
        sharded: bool,
        sync: SyncReplicas,
    ) -> Result<(T, u32)> {
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| Error::UnexpectedReply("the synced-write pool is closed".into()))?;
        let pooled = self.idle.lock().pop();
        let mut conn = match pooled {
            Some(conn) => conn,
            None => (self.open)().await?,
        };
        let timeout_ms = u64::try_from(sync.timeout.min(crate::time::FOREVER).as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let mut pipe = redis::pipe();
        pipe.ignore_errors()
            .add_command(call.cmd(sharded, true))
            .cmd("WAIT")
            .arg(sync.replicas)
            .arg(timeout_ms);
        // A connection that failed or timed out is dropped here, never put
        // back: what it answers next is no one's.
        let values: Vec<Value> = pipe
            .query_async(&mut conn)
            .await
            .map_err(|error| failed(error, sync))?;
        let [script, wait] = <[Value; 2]>::try_from(values)
            .map_err(|v| Error::UnexpectedReply(format!("a synced write answered {v:?}")))?;
        if let Value::ServerError(error) = script {
            self.idle.lock().push(conn);
            return Err(redis::RedisError::from(error).into());
        }
        let acknowledged = match wait {
            // The master was demoted (or its clients paused) while it
            // waited: nothing is confirmed, and Redis closes the
            // connection, so it does not go back into the pool.
            Value::ServerError(error) if error.code() == "UNBLOCKED" => 0,
            Value::ServerError(error) => return Err(redis::RedisError::from(error).into()),
            wait => {
                self.idle.lock().push(conn);
                u32::from_redis_value(wait).map_err(redis::RedisError::from)?
            }
        };
        let value = T::from_redis_value(script).map_err(redis::RedisError::from)?;
        Ok((value, acknowledged))
    }
}

/// The typed error of a synced write whose connection failed. A master
/// demoted while it waits for its replicas answers `-UNBLOCKED` and closes
/// the connection, which redis-rs may report as the connection dropped
/// before it hands over the answers: either way no replica confirmed the
/// write, which may or may not stand on the master (as
/// [`Error::NotReplicated`] says: its outcome is unknown). A connection's
/// own response timeout is the crate's typed timeout.
fn failed(error: redis::RedisError, sync: SyncReplicas) -> Error {
    if error.is_timeout() {
        Error::Timeout(sync.timeout)
    } else if error.is_connection_dropped() {
        Error::NotReplicated {
            acknowledged: 0,
            needed: sync.replicas,
        }
    } else {
        error.into()
    }
}
