//! Redis Cluster: the backend over a cluster connection.
//!
//! Every key a script touches shares its lock's (or limiter's, or item's)
//! hash tag, so every call is one command to the node that owns its slot.
//! Wake-ups travel over a second cluster connection (RESP3 pushes): sharded
//! channels (`SSUBSCRIBE` / `SPUBLISH`) on Redis 7 or later, which live on
//! the same node as the lock's keys, classic pub/sub on older servers;
//! redis-rs subscribes again after reconnects and slot moves.
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
use super::version::check_server;
use crate::error::{Error, Result};

/// A [`RedisBackend`] over a Redis Cluster.
pub type ClusterBackend = RedisBackend<ClusterConnection>;

impl RedisBackend<ClusterConnection> {
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
    /// connect timeout, [`Error::UnsupportedServer`] for Redis before 5.0.
    pub async fn connect_cluster(urls: &[&str]) -> Result<Self> {
        Self::connect_cluster_with(
            ClusterClientBuilder::new(urls.to_vec()),
            RedisConfig::default(),
        )
        .await
    }

    /// Connects with redis-rs's `builder` (TLS certificates, credentials,
    /// read-from-replicas are left as set there; set no push sender on it)
    /// and `config`: the same response and connect timeouts and retries as
    /// a standalone backend, and RESP3, with a connection of its own for
    /// the shared subscriber.
    ///
    /// # Errors
    /// As [`connect_cluster`](Self::connect_cluster).
    pub async fn connect_cluster_with(
        builder: ClusterClientBuilder,
        config: RedisConfig,
    ) -> Result<Self> {
        let (connect_timeout, timeout) =
            (config.get_connect_timeout(), config.get_response_timeout());
        let client = builder
            .connection_timeout(connect_timeout)
            .response_timeout(timeout)
            .retries(2)
            .use_protocol(ProtocolVersion::RESP3)
            .build()?;
        let mut conn = within(connect_timeout, client.get_async_connection()).await?;
        let major = check_server(&mut OneNode(&mut conn), connect_timeout).await?;
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
            Box::pin(async move { Ok(client.get_async_connection().await?) })
        });
        let mut backend = Self::from_connection(conn, config);
        backend.subscriber = Some(subscriber);
        backend.sharded_pubsub = sharded;
        backend.dedicated = Some(Arc::new(Dedicated::new(open)));
        Ok(backend)
    }
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
