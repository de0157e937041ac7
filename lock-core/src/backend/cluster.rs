//! Redis Cluster: the backend over a cluster connection.
//!
//! Every key a script touches shares its lock's (or limiter's, or item's)
//! hash tag, so every call is one command to the node that owns its slot.
//! Wake-ups travel over a second cluster connection (RESP3 pushes): sharded
//! channels (`SSUBSCRIBE` / `SPUBLISH`) on Redis 7 or later, which live on
//! the same node as the lock's keys, classic pub/sub on older servers;
//! redis-rs subscribes again after reconnects and slot moves. RESP3 came
//! with Redis 6.0: an older cluster is refused with
//! [`Error::UnsupportedServer`] (see
//! [`ClusterBackend::MIN_REDIS_VERSION`](RedisBackend::MIN_REDIS_VERSION)).
//!
//! Commands and subscriptions never share a connection. When a sharded
//! channel's slot moves (a failover), its old node tells subscribers with
//! an `sunsubscribe` push, which redis-rs 1.8 takes for the answer to the
//! oldest request waiting on that connection, shifting every answer after
//! it by one: on a connection that carries commands, a lock attempt could
//! be handed another attempt's grant. On the subscription's own connection
//! the shift costs nothing worse than a confirmation out of place.
//!
//! Redlock is for independent masters, never for the nodes of one cluster:
//! a cluster already gives every key one master.

use redis::ProtocolVersion;
use redis::cluster::{ClusterClientBuilder, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};

use std::sync::Arc;

use super::config::RedisConfig;
use super::pubsub::Subscriber;
use super::redis::RedisBackend;
use super::replicas::{Dedicated, Open};
use super::version::{check_server_at_least, older_than};
use crate::error::{Error, Result};

/// A [`RedisBackend`] over a Redis Cluster.
pub type ClusterBackend = RedisBackend<ClusterConnection>;

/// What a cluster backend reports as the version of a server that has no
/// RESP3, when it cannot ask the server itself.
const BEFORE_RESP3: &str = "before 6.0 (no HELLO command)";

impl RedisBackend<ClusterConnection> {
    /// The oldest Redis a cluster backend supports: 6.0, the first with
    /// RESP3 (`HELLO 3`), over which lock wake-ups arrive as pushes on a
    /// cluster connection. A one-server backend, Sentinel and Redlock
    /// need only [`MIN_REDIS_VERSION`](super::MIN_REDIS_VERSION) (5.0).
    pub const MIN_REDIS_VERSION: &'static str = "6.0";

    /// Connects to the cluster that `urls` (any of its nodes; several in
    /// case some are down) belong to, with the default [`RedisConfig`].
    ///
    /// ```no_run
    /// # async fn run() -> lock_core::Result<()> {
    /// use lock_core::backend::RedisBackend;
    /// use lock_core::lock::Lock;
    ///
    /// let backend = RedisBackend::connect_cluster(&[
    ///     "redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379",
    /// ]).await?;
    /// let lock = Lock::new(backend, "order:42")?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Backend`] for a bad URL or no reachable node,
    /// [`Error::Timeout`] when the cluster does not answer within the
    /// connect timeout, [`Error::UnsupportedServer`] for Redis before 6.0
    /// ([`MIN_REDIS_VERSION`](Self::MIN_REDIS_VERSION), with the version
    /// a node reports).
    pub async fn connect_cluster(urls: &[&str]) -> Result<Self> {
        let config = RedisConfig::default();
        let connect_timeout = config.get_connect_timeout();
        let builder = ClusterClientBuilder::new(urls.to_vec());
        match Self::connect_cluster_with(builder, config).await {
            Err(Error::UnsupportedServer { version, minimum }) if version == BEFORE_RESP3 => {
                // Ask a node over RESP2 which version it is, for the error.
                let older = ask_older(urls, connect_timeout, minimum).await;
                let version = older.unwrap_or(version);
                Err(Error::UnsupportedServer { version, minimum })
            }
            connected => connected,
        }
    }

    /// Connects with redis-rs's `builder` (TLS certificates, credentials,
    /// read-from-replicas are left as set there; set no push sender on it)
    /// and `config`: the same response and connect timeouts as a standalone
    /// backend, no re-send of a command that may have run (redis-rs's
    /// `retries` is set to 0; see [the crate docs](crate#one-rule-for-retries)), and RESP3, with a connection of its own for
    /// the shared subscriber.
    ///
    /// # Errors
    /// As [`connect_cluster`](Self::connect_cluster); a server before 6.0
    /// is reported as `UnsupportedServer { version: "before 6.0 (no HELLO
    /// command)", .. }` (the builder does not tell which node to ask).
    pub async fn connect_cluster_with(
        builder: ClusterClientBuilder,
        config: RedisConfig,
    ) -> Result<Self> {
        let (connect_timeout, timeout) =
            (config.get_connect_timeout(), config.get_response_timeout());
        let client = builder
            .connection_timeout(connect_timeout)
            .response_timeout(timeout)
            // A command whose connection failed may have run: redis-rs
            // would send it again, and a script would run twice (a grant
            // answered "busy" against its own token, stock added twice).
            // Redirects and the other answers that say a command did not
            // run are retried by the backend itself.
            .retries(0)
            .use_protocol(ProtocolVersion::RESP3)
            .build()?;
        let conn = within(connect_timeout, client.get_async_connection()).await;
        let mut conn = conn.map_err(without_resp3)?;
        let mut one = OneNode(&mut conn);
        let major = check_server_at_least(&mut one, connect_timeout, Self::MIN_REDIS_VERSION);
        let major = major.await?;
        // Sharded pub/sub (and SPUBLISH in scripts) came with Redis 7.
        let sharded = major.is_some_and(|major| major >= 7);
        let (pushes, received) = tokio::sync::mpsc::unbounded_channel();
        let subscriptions = ClusterConfig::new()
            .set_connection_timeout(connect_timeout)
            .set_response_timeout(timeout)
            .set_push_sender(pushes);
        let subscriptions = client.get_async_connection_with_config(subscriptions);
        let subscriptions = within(connect_timeout, subscriptions).await?;
        let subscriber = Subscriber::cluster(subscriptions, received, sharded, timeout);
        let open: Open<ClusterConnection> = Arc::new(move || {
            let client = client.clone();
            // `WAIT` may rightly take the whole sync timeout: a synced
            // write is bounded as a whole instead (see `invoke_write`).
            let config = ClusterConfig::new()
                .set_connection_timeout(connect_timeout)
                .set_response_timeout(crate::time::FOREVER);
            Box::pin(async move { Ok(client.get_async_connection_with_config(config).await?) })
        });
        let mut backend = Self::from_connection(conn, config);
        backend.subscriber = Some(subscriber);
        backend.sharded_pubsub = sharded;
        backend.dedicated = Some(Arc::new(Dedicated::new(open)));
        Ok(backend)
    }
}

/// [`Error::UnsupportedServer`] for a cluster connection refused because a
/// node has no `HELLO` (Redis before 6.0, which has no RESP3); any other
/// error as it is. redis-rs keeps only the text of the node's error in the
/// one it returns.
fn without_resp3(error: Error) -> Error {
    match &error {
        Error::Backend(backend) => {
            let text = backend.to_string();
            if text.contains("RESP3NotSupported") || text.contains("support HELLO") {
                return Error::UnsupportedServer {
                    version: BEFORE_RESP3.to_owned(),
                    minimum: RedisBackend::<ClusterConnection>::MIN_REDIS_VERSION,
                };
            }
            error
        }
        _ => error,
    }
}

/// The version the first of `urls` that answers reports (`INFO server`
/// over RESP2, each asked within `timeout`), if it is older than `minimum`.
async fn ask_older(urls: &[&str], timeout: std::time::Duration, minimum: &str) -> Option<String> {
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout));
    for url in urls {
        let Ok(client) = redis::Client::open(*url) else {
            continue;
        };
        let ask = async {
            let mut conn = client
                .get_multiplexed_async_connection_with_config(&config)
                .await?;
            redis::cmd("INFO")
                .arg("server")
                .query_async::<String>(&mut conn)
                .await
        };
        if let Ok(Ok(info)) = tokio::time::timeout(timeout, ask).await
            && let Some(version) = older_than(&info, minimum)
        {
            return Some(version);
        }
    }
    None
}

/// A connection made within `timeout`.
async fn within(
    timeout: std::time::Duration,
    connect: impl Future<Output = redis::RedisResult<ClusterConnection>>,
) -> Result<ClusterConnection> {
    match tokio::time::timeout(timeout, connect).await {
        Ok(connected) => Ok(connected?),
        Err(_) => Err(Error::Timeout(timeout)),
    }
}

/// A cluster connection that sends each command to one node, picked at
/// random (`INFO`, which a cluster connection would send to every node).
struct OneNode<'a>(&'a mut ClusterConnection);

impl redis::aio::ConnectionLike for OneNode<'_> {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random);
        Box::pin(self.0.route_command(cmd.clone(), route))
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        self.0.req_packed_commands(cmd, offset, count)
    }

    fn get_db(&self) -> i64 {
        0
    }
}
