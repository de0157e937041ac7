//! Redis Sentinel: the backend follows the master the Sentinels name.
//!
//! Commands go to the master through one shared connection. When the
//! Sentinels switch masters (`+switch-master`, which this listens for on a
//! Sentinel), when the master answers `READONLY` (it was demoted), or when
//! its connection fails, the master is asked of the Sentinels again and
//! the connection moves to it; so does the subscription that wakes lock
//! waiters. The Sentinels are also asked every two seconds, in case a
//! switch message was missed. After a failover, grants therefore come only
//! from the new master once the switch message (or the first `READONLY`)
//! reaches this client: a bounded time, not none. A lock granted by the old
//! master in that window, and a write the old master took but never
//! replicated, are what
//! [`sync_replicas`](super::RedisBackend::sync_replicas) and fencing tokens
//! guard against.

use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use parking_lot::RwLock;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::{Cmd, Pipeline, RedisFuture, Value};

use super::config::{RedisConfig, manager_config};
use super::pubsub::Subscriber;
use super::redis::RedisBackend;
use super::replicas::{Dedicated, Open};
use super::version::check_server;
use crate::error::{Error, Result};

/// A [`RedisBackend`] that follows the master the Sentinels name.
pub type SentinelBackend = RedisBackend<SentinelConnection>;

/// How often the Sentinels are asked for the master even with no sign of a
/// switch.
const RECHECK: Duration = Duration::from_secs(2);

/// A connection to whichever server the Sentinels name master: clones share
/// it, and all move together when the master changes. The connection of a
/// [`SentinelBackend`].
#[derive(Clone)]
pub struct SentinelConnection {
    shared: Arc<Shared>,
    /// A connection of its own to the master (for synced writes, whose
    /// `WAIT` must hold no one else's commands), opened again when the
    /// master moves; `None`: the shared one.
    own: Option<OwnConnection>,
}

/// A connection of one's own, and the generation of the master it talks to.
type OwnConnection = Arc<tokio::sync::Mutex<Option<(u64, ConnectionManager)>>>;

impl std::fmt::Debug for SentinelConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentinelConnection")
            .field("master", &self.shared.current.read().address)
            .finish_non_exhaustive()
    }
}

struct Current {
    /// `host:port` of the master this connection talks to.
    address: String,
    client: redis::Client,
    conn: ConnectionManager,
    /// Bumped at every move, so that one failure moves the connection once.
    generation: u64,
}

struct Shared {
    sentinel: tokio::sync::Mutex<SentinelClient>,
    master_name: String,
    manager: ConnectionManagerConfig,
    connect_timeout: Duration,
    current: RwLock<Current>,
    /// One move at a time.
    moving: tokio::sync::Mutex<()>,
    /// The subscriber that wakes lock waiters, which moves along.
    subscriber: RwLock<Option<Subscriber>>,
}

/// Whether `error` may mean the master is no longer this one.
fn master_lost(error: &redis::RedisError) -> bool {
    error.code() == Some("READONLY")
        || error.is_io_error()
        || error.is_connection_refusal()
        || error.is_connection_dropped()
}

impl Shared {
    fn current(&self) -> (u64, ConnectionManager) {
        let current = self.current.read();
        (current.generation, current.conn.clone())
    }

    /// Asks the Sentinels for the master, and moves there if it is not
    /// where the connection of `seen` talks to.
    async fn follow(self: &Arc<Self>, seen: u64) -> Result<()> {
        let _moving = self.moving.lock().await;
        if self.current.read().generation != seen {
            return Ok(());
        }
        let timeout = self.connect_timeout;
        let client = tokio::time::timeout(timeout, async {
            self.sentinel.lock().await.async_get_client().await
        })
        .await
        .map_err(|_| Error::Timeout(timeout))??;
        let address = client.get_connection_info().addr().to_string();
        if address == self.current.read().address {
            return Ok(());
        }
        let conn = tokio::time::timeout(
            timeout,
            ConnectionManager::new_with_config(client.clone(), self.manager.clone()),
        )
        .await
        .map_err(|_| Error::Timeout(timeout))??;
        tracing::warn!(
            master = %self.master_name,
            from = %self.current.read().address,
            to = %address,
            "the Sentinels name a new master; moving to it"
        );
        {
            let mut current = self.current.write();
            current.address = address;
            current.client = client.clone();
            current.conn = conn;
            current.generation += 1;
        }
        if let Some(subscriber) = self.subscriber.read().as_ref() {
            subscriber.move_to(client);
        }
        Ok(())
    }

    /// Moves in the background, after a failure that may mean a new master.
    fn follow_soon(self: &Arc<Self>, seen: u64) {
        let shared = self.clone();
        tokio::spawn(async move {
            if let Err(error) = shared.follow(seen).await {
                tracing::warn!(master = %shared.master_name, %error, "cannot ask the Sentinels for the master");
            }
        });
    }
}

impl SentinelConnection {
    /// The connection to use now, and the generation of the master it
    /// talks to.
    async fn conn(&self) -> redis::RedisResult<(u64, ConnectionManager)> {
        let Some(own) = &self.own else {
            return Ok(self.shared.current());
        };
        let mut own = own.lock().await;
        let (generation, client) = {
            let current = self.shared.current.read();
            (current.generation, current.client.clone())
        };
        if let Some((seen, conn)) = own.as_ref()
            && *seen == generation
        {
            return Ok((generation, conn.clone()));
        }
        // A connection of its own carries synced writes, whose `WAIT` may
        // rightly take the whole sync timeout: they are bounded as a whole
        // (see `RedisBackend::invoke_write`), not by the response timeout.
        let manager = self.shared.manager.clone().set_response_timeout(None);
        let conn = ConnectionManager::new_with_config(client, manager).await?;
        *own = Some((generation, conn.clone()));
        Ok((generation, conn))
    }

    /// A connection of its own to the same master, which follows it too.
    fn own(&self) -> Self {
        SentinelConnection {
            shared: self.shared.clone(),
            own: Some(Arc::default()),
        }
    }
}

impl ConnectionLike for SentinelConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let (generation, mut conn) = self.conn().await?;
            let answer = conn.req_packed_command(cmd).await;
            if let Err(error) = &answer
                && master_lost(error)
            {
                self.shared.follow_soon(generation);
            }
            answer
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let (generation, mut conn) = self.conn().await?;
            let answer = conn.req_packed_commands(cmd, offset, count).await;
            if let Err(error) = &answer
                && master_lost(error)
            {
                self.shared.follow_soon(generation);
            }
            answer
        })
    }

    fn get_db(&self) -> i64 {
        self.shared.current.read().conn.get_db()
    }
}

/// Follows `+switch-master` on a Sentinel, and asks the Sentinels every
/// [`RECHECK`], until the connection is dropped.
async fn watch(shared: Weak<Shared>) {
    loop {
        let Some(strong) = shared.upgrade() else {
            return;
        };
        let sentinel = async {
            strong
                .sentinel
                .lock()
                .await
                .async_get_sentinel_client()
                .await
        };
        let pubsub = match tokio::time::timeout(strong.connect_timeout, sentinel).await {
            Ok(Ok(client)) => client.get_async_pubsub().await.ok(),
            _ => None,
        };
        let mut messages = None;
        if let Some(mut pubsub) = pubsub
            && pubsub.subscribe("+switch-master").await.is_ok()
        {
            messages = Some(pubsub.into_on_message());
        }
        drop(strong);
        loop {
            let message = match messages.as_mut() {
                Some(stream) => tokio::time::timeout(RECHECK, stream.next()).await.ok(),
                None => {
                    tokio::time::sleep(RECHECK).await;
                    None
                }
            };
            let Some(strong) = shared.upgrade() else {
                return;
            };
            let generation = strong.current.read().generation;
            match message {
                // "<master name> <old ip> <old port> <new ip> <new port>"
                Some(Some(message)) => {
                    let payload: String = message.get_payload().unwrap_or_default();
                    if payload.split_whitespace().next() == Some(strong.master_name.as_str()) {
                        let _ = strong.follow(generation).await;
                    }
                }
                // The Sentinel's connection closed: connect to one again.
                Some(None) => break,
                // Nothing for a while: ask anyway (and, without a
                // subscription, try to make one again).
                None => {
                    let _ = strong.follow(generation).await;
                    if messages.is_none() {
                        break;
                    }
                }
            }
        }
    }
}

impl RedisBackend<SentinelConnection> {
    /// Connects to the master that the Sentinels at `sentinel_urls` know as
    /// `master_name`, with the default [`RedisConfig`], and follows it
    /// through failovers.
    ///
    /// ```no_run
    /// # async fn run() -> lock_core::Result<()> {
    /// use lock_core::backend::RedisBackend;
    ///
    /// let backend = RedisBackend::connect_sentinel(
    ///     &["redis://10.0.0.1:26379", "redis://10.0.0.2:26379", "redis://10.0.0.3:26379"],
    ///     "mymaster",
    /// ).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Backend`] for a bad URL, no Sentinel that answers, or an
    /// unknown master; [`Error::Timeout`] past the connect timeout;
    /// [`Error::UnsupportedServer`] for Redis before 5.0.
    pub async fn connect_sentinel(sentinel_urls: &[&str], master_name: &str) -> Result<Self> {
        Self::connect_sentinel_with(sentinel_urls, master_name, None, RedisConfig::default()).await
    }

    /// As [`connect_sentinel`](Self::connect_sentinel), with how to reach
    /// the data servers (`node`: TLS, user and password, database; `None`
    /// for plain connections) and `config`.
    ///
    /// # Errors
    /// As [`connect_sentinel`](Self::connect_sentinel).
    pub async fn connect_sentinel_with(
        sentinel_urls: &[&str],
        master_name: &str,
        node: Option<SentinelNodeConnectionInfo>,
        config: RedisConfig,
    ) -> Result<Self> {
        let name: String = master_name.into();
        let mut sentinel = SentinelClient::build(
            sentinel_urls.to_vec(),
            name,
            node,
            SentinelServerType::Master,
        )?;
        let connect_timeout = config.get_connect_timeout();
        let client = tokio::time::timeout(connect_timeout, sentinel.async_get_client())
            .await
            .map_err(|_| Error::Timeout(connect_timeout))??;
        let manager = manager_config(&config);
        let conn = tokio::time::timeout(
            connect_timeout,
            ConnectionManager::new_with_config(client.clone(), manager.clone()),
        )
        .await
        .map_err(|_| Error::Timeout(connect_timeout))??;
        check_server(&mut conn.clone(), connect_timeout).await?;
        let shared = Arc::new(Shared {
            sentinel: tokio::sync::Mutex::new(sentinel),
            master_name: master_name.to_owned(),
            manager,
            connect_timeout,
            current: RwLock::new(Current {
                address: client.get_connection_info().addr().to_string(),
                client: client.clone(),
                conn,
                generation: 0,
            }),
            moving: tokio::sync::Mutex::default(),
            subscriber: RwLock::default(),
        });
        tokio::spawn(watch(Arc::downgrade(&shared)));
        let connection = SentinelConnection {
            shared: shared.clone(),
            own: None,
        };
        let open: Open<SentinelConnection> = {
            let connection = connection.clone();
            Arc::new(move || {
                let own = connection.own();
                Box::pin(async move { Ok(own) })
            })
        };
        let mut backend = Self::from_connection(connection, config).with_subscriber(client);
        backend.dedicated = Some(Arc::new(Dedicated::new(open)));
        *shared.subscriber.write() = backend.subscriber.clone();
        Ok(backend)
    }

    /// `host:port` of the master this backend talks to now.
    pub fn master_address(&self) -> String {
        self.connection().shared.current.read().address.clone()
    }
}
