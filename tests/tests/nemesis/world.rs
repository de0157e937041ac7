//! Where a scenario's clients meet Redis: one server behind a proxy per
//! client, or a cluster whose every node announces a proxy in front of it
//! (redis-rs follows the addresses nodes announce, so every connection a
//! cluster client makes goes through a proxy; the nodes still talk to each
//! other directly on the cluster bus).

use std::time::{Duration, Instant};

use lock_core::backend::{AnyBackend, RedisBackend, RedisConfig};
use lock_tests::RedisServer;
use lock_tests::cluster::RedisCluster;
use lock_tests::fault_proxy::FaultProxy;
use redis::cluster::ClusterClientBuilder;

use crate::env::CLIENTS;

/// The servers of a scenario.
pub(crate) enum World {
    /// One server; each client has a proxy of its own.
    One(RedisServer),
    /// Three masters and three replicas, each node behind a proxy.
    Cluster(RedisCluster),
}

/// Timeouts short enough for faults to show within a scenario.
fn config() -> RedisConfig {
    RedisConfig::default()
        .response_timeout(Duration::from_secs(1))
        .connect_timeout(Duration::from_secs(1))
}

impl World {
    /// The servers, to pause.
    pub(crate) fn servers(&self) -> &[RedisServer] {
        match self {
            World::One(server) => std::slice::from_ref(server),
            World::Cluster(cluster) => cluster.nodes(),
        }
    }

    /// The longest pause of a server: a cluster node paused past its node
    /// timeout (set to 5 s here) would be replaced, a failover, which loses
    /// writes by design.
    pub(crate) fn longest_pause(&self) -> Duration {
        match self {
            World::One(_) => Duration::from_millis(1500),
            World::Cluster(_) => Duration::from_millis(500),
        }
    }

    /// The proxies: one per client, or one per cluster node, which then
    /// announces it (and this waits until every node agrees).
    pub(crate) fn proxies(&self, seed: u64) -> Vec<FaultProxy> {
        match self {
            World::One(server) => (0..CLIENTS)
                .map(|i| FaultProxy::to_server(server, seed + i as u64))
                .collect(),
            World::Cluster(cluster) => {
                let proxies: Vec<FaultProxy> = cluster
                    .nodes()
                    .iter()
                    .enumerate()
                    .map(|(i, node)| FaultProxy::to_server(node, seed + i as u64))
                    .collect();
                for (node, proxy) in cluster.nodes().iter().zip(&proxies) {
                    let mut conn = node.connection();
                    let bus = u32::from(node.port()) + 10_000;
                    for (setting, value) in [
                        // A pause of a node is a pause, never a failover.
                        ("cluster-node-timeout", "5000".to_owned()),
                        ("cluster-announce-ip", "127.0.0.1".to_owned()),
                        ("cluster-announce-bus-port", bus.to_string()),
                        ("cluster-announce-port", proxy.addr().port().to_string()),
                    ] {
                        redis::cmd("CONFIG")
                            .arg("SET")
                            .arg(setting)
                            .arg(value)
                            .query::<()>(&mut conn)
                            .unwrap_or_else(|e| panic!("CONFIG SET {setting}: {e}"));
                    }
                }
                let ports: Vec<u16> = proxies.iter().map(|p| p.addr().port()).collect();
                let deadline = Instant::now() + Duration::from_secs(20);
                while !cluster.nodes().iter().all(|node| announces(node, &ports)) {
                    assert!(
                        Instant::now() < deadline,
                        "the nodes did not announce their proxies within 20 s"
                    );
                    std::thread::sleep(Duration::from_millis(100));
                }
                proxies
            }
        }
    }

    /// Client `i`, connected through the proxies.
    pub(crate) async fn client(&self, proxies: &[FaultProxy], i: usize) -> AnyBackend {
        match self {
            World::One(_) => {
                let proxy = &proxies[i % proxies.len()];
                let client = redis::Client::open(proxy.url()).expect("proxy url");
                let backend = RedisBackend::connect_with(client, config()).await;
                backend
                    .unwrap_or_else(|e| panic!("cannot connect through {}: {e}", proxy.url()))
                    .into()
            }
            World::Cluster(_) => {
                let urls: Vec<String> = proxies.iter().map(FaultProxy::url).collect();
                let builder = ClusterClientBuilder::new(urls);
                let backend = RedisBackend::connect_cluster_with(builder, config()).await;
                backend
                    .unwrap_or_else(|e| panic!("cannot connect to the cluster: {e}"))
                    .into()
            }
        }
    }

    /// A client for setting up and reading back: straight to the server,
    /// or to a cluster through its (healed) proxies.
    pub(crate) async fn direct(&self, proxies: &[FaultProxy]) -> AnyBackend {
        match self {
            World::One(server) => RedisBackend::connect(&server.url())
                .await
                .expect("connect")
                .into(),
            World::Cluster(_) => self.client(proxies, 0).await,
        }
    }
}

/// Whether every node `node` knows of is at one of `ports`.
fn announces(node: &RedisServer, ports: &[u16]) -> bool {
    let nodes: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query(&mut node.connection())
        .unwrap_or_default();
    let listed: Vec<Option<u16>> = nodes
        .lines()
        .map(|line| {
            let address = line.split(' ').nth(1)?;
            let port = address.split('@').next()?.rsplit(':').next()?;
            port.parse().ok()
        })
        .collect();
    listed.len() == ports.len() && listed.iter().all(|p| p.is_some_and(|p| ports.contains(&p)))
}
