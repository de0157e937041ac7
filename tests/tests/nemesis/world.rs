//! Where a scenario's clients meet Redis: one server behind a proxy per
//! client; a master with a replica; Redlock's five servers, each behind a
//! proxy; a cluster whose every node announces a proxy in front of it
//! (redis-rs follows the addresses nodes announce, so every connection a
//! cluster client makes goes through a proxy; the nodes still talk to each
//! other directly on the cluster bus); or a Sentinel set whose servers
//! and Sentinel are each behind a proxy.
//!
//! Servers a nemesis kills (one server, Redlock's) keep their data on disk
//! (`appendonly yes`, `appendfsync always`): a restart brings back every
//! write that was answered, so a double grant after one is a real bug.

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use lock_core::backend::{AnyBackend, RedisBackend, RedisConfig};
use lock_core::lock::Redlock;
use lock_tests::cluster::{Failover, RedisCluster, info};
use lock_tests::fault_proxy::FaultProxy;
use lock_tests::sentinel::{MASTER_NAME, SentinelSet};
use lock_tests::{RedisServer, ServerOptions};
use rand::Rng;
use rand::rngs::StdRng;
use redis::cluster::ClusterClientBuilder;

use crate::env::CLIENTS;

/// Redlock's servers.
pub(crate) const REDLOCK_SERVERS: usize = 5;

/// What a scenario runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Topology {
    /// One persistent server (killed and restarted by the nemesis).
    One,
    /// A master and its replica; writes wait for the replica
    /// (`sync_replicas(1, 300 ms)`); the nemesis pauses the replica.
    Replicated,
    /// Five persistent servers for Redlock (a minority killed at a time).
    Redlock,
    /// A Redis Cluster. `synced`: writes wait for one replica; `force`:
    /// the nemesis also makes `FORCE` failovers (which lose writes). When
    /// either, it also makes `TAKEOVER`s on a lagging replica: only writes
    /// that waited for a replica survive them.
    Cluster {
        /// Whether writes wait for a replica (`sync_replicas(1, 500 ms)`).
        synced: bool,
        /// Whether failovers may be forced (not only graceful).
        force: bool,
    },
    /// A master, its replica and a Sentinel, each behind a proxy the
    /// others reach it by (the servers announce theirs); clients follow
    /// the master the Sentinel names; writes wait for the replica
    /// (`sync_replicas(1, 500 ms)`). Besides the proxies' faults (a
    /// partition of the master past the Sentinel's down-after fails it
    /// over by itself), the nemesis pauses the replica and fails over
    /// (`SENTINEL FAILOVER`).
    Sentinel,
}

impl Topology {
    /// How writes wait for replicas, if they do.
    pub(crate) fn sync(self) -> Option<(u32, Duration)> {
        match self {
            Topology::Replicated => Some((1, Duration::from_millis(300))),
            Topology::Cluster { synced: true, .. } | Topology::Sentinel => {
                Some((1, Duration::from_millis(500)))
            }
            _ => None,
        }
    }
}

/// The servers of a scenario (one of each per scenario: their sizes do
/// not matter).
#[allow(clippy::large_enum_variant)]
pub(crate) enum World {
    /// One server; each client has a proxy of its own.
    One(Mutex<RedisServer>),
    /// A master (each client with a proxy of its own) and its replica.
    Replicated {
        /// The master, which clients reach.
        master: RedisServer,
        /// Its replica, which only confirms writes.
        replica: RedisServer,
    },
    /// Independent servers, each behind one proxy that every client uses.
    Redlock(Vec<Mutex<RedisServer>>),
    /// Three masters and three replicas, each node behind a proxy.
    Cluster(RedisCluster),
    /// A master, its replica and a Sentinel, each behind a proxy.
    Sentinel(SentinelSet),
}

/// A server to pause and resume, held as long as it is paused (a server
/// that may be killed and restarted is behind a mutex).
pub(crate) enum Paused<'a> {
    /// One the nemesis also kills.
    Locked(MutexGuard<'a, RedisServer>),
    /// One it does not.
    Server(&'a RedisServer),
}

impl std::ops::Deref for Paused<'_> {
    type Target = RedisServer;

    fn deref(&self) -> &RedisServer {
        match self {
            Paused::Locked(server) => server,
            Paused::Server(server) => server,
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Timeouts short enough for faults to show within a scenario.
fn config() -> RedisConfig {
    RedisConfig::default()
        .response_timeout(Duration::from_secs(1))
        .connect_timeout(Duration::from_secs(1))
}

impl World {
    /// Starts the servers of `topology`.
    pub(crate) fn start(topology: Topology) -> World {
        match topology {
            Topology::One => World::One(Mutex::new(RedisServer::start_with(
                ServerOptions::new().persistent(),
            ))),
            Topology::Replicated => {
                let (master, replica) = lock_tests::master_and_replica();
                World::Replicated { master, replica }
            }
            Topology::Redlock => World::Redlock(
                (0..REDLOCK_SERVERS)
                    .map(|_| Mutex::new(RedisServer::start_with(ServerOptions::new().persistent())))
                    .collect(),
            ),
            Topology::Cluster { .. } => World::Cluster(RedisCluster::start()),
            Topology::Sentinel => World::Sentinel(SentinelSet::start()),
        }
    }

    /// How many servers the nemesis may pause (the replica only, for
    /// [`World::Replicated`], the current replica for [`World::Sentinel`]).
    pub(crate) fn pausable(&self) -> usize {
        match self {
            World::One(_) | World::Replicated { .. } | World::Sentinel(_) => 1,
            World::Redlock(servers) => servers.len(),
            World::Cluster(cluster) => cluster.nodes().len(),
        }
    }

    /// Pausable server `i` (the replica, for [`World::Replicated`]; the
    /// data server that is not the master now, for [`World::Sentinel`]).
    pub(crate) fn pausable_server(&self, i: usize) -> Paused<'_> {
        match self {
            World::One(server) => Paused::Locked(lock(server)),
            World::Replicated { replica, .. } => Paused::Server(replica),
            World::Redlock(servers) => Paused::Locked(lock(&servers[i])),
            World::Cluster(cluster) => Paused::Server(&cluster.nodes()[i]),
            World::Sentinel(set) => Paused::Server(set.replica()),
        }
    }

    /// The longest pause of a server: a cluster node paused past its node
    /// timeout (set to 5 s here) would be replaced, a failover, which loses
    /// writes by design.
    pub(crate) fn longest_pause(&self) -> Duration {
        match self {
            World::One(_) | World::Redlock(_) => Duration::from_millis(1500),
            World::Replicated { .. } => Duration::from_millis(2000),
            World::Cluster(_) => Duration::from_millis(500),
            // Past the Sentinel's down-after (1 s) the replica is down to it:
            // no failover until it is seen again.
            World::Sentinel(_) => Duration::from_millis(1500),
        }
    }

    /// Kills (SIGKILL) the servers `which`, waits `down`, and starts them
    /// again with their data (blocking).
    pub(crate) fn kill_restart(&self, which: &[usize], down: Duration) {
        let servers: Vec<&Mutex<RedisServer>> = match self {
            World::One(server) => vec![server],
            World::Redlock(servers) => which.iter().map(|&i| &servers[i]).collect(),
            _ => panic!("only one server or Redlock's are killed"),
        };
        for server in &servers {
            lock(server).kill();
        }
        std::thread::sleep(down);
        for server in &servers {
            lock(server).restart();
        }
    }

    /// Makes the replica of a random master take over (blocking until the
    /// cluster agrees): gracefully; by `FORCE` when `force` (without the
    /// old master's agreement: writes it had not passed on are lost); or by
    /// `TAKEOVER` of a lagging replica, only when `force` or `synced`: the
    /// replica is stopped and its master drops their link, the master
    /// takes writes for a while, then the replica runs again and takes
    /// over at once, before its link is back (without any vote: what it had
    /// not received is lost, so only writes that waited for it survive).
    /// `takeover` asks for a takeover where one is allowed. A master in
    /// `avoid` is not chosen: the other masters vote for no second
    /// replacement of a master within twice the node timeout. The master
    /// replaced and how (the fault's name), or `None` when every master was
    /// to be avoided.
    pub(crate) fn failover(
        &self,
        rng: &mut StdRng,
        (force, synced): (bool, bool),
        takeover: bool,
        avoid: &[usize],
    ) -> Option<(usize, &'static str)> {
        let World::Cluster(cluster) = self else {
            panic!("only a cluster fails over");
        };
        let masters: Vec<usize> = cluster
            .masters()
            .into_iter()
            .filter(|m| !avoid.contains(m))
            .collect();
        if masters.is_empty() {
            return None;
        }
        let master = masters[rng.random_range(0..masters.len())];
        let replica = cluster.replica_of(master);
        let asked = match rng.random_range(0..3) {
            _ if takeover && (force || synced) => Failover::Takeover,
            0 if force || synced => Failover::Takeover,
            1 if force => Failover::Force,
            _ => Failover::Graceful,
        };
        let mut lagging = false;
        if asked == Failover::Takeover {
            let offset = || {
                info(
                    &cluster.nodes()[master],
                    "replication",
                    "master_repl_offset",
                )
            };
            cluster.cut_replica(replica);
            let before = offset();
            // Well inside the node timeout: a lag, not a failure.
            std::thread::sleep(Duration::from_millis(rng.random_range(200..700)));
            lagging = offset() != before;
            cluster.reconnect_replica(replica);
        }
        // A graceful handover that cannot complete (the replica's link
        // was just disturbed) is forced: reported as such.
        let name = match cluster.failover_eventually(replica, asked) {
            Failover::Graceful => "failover",
            Failover::Force => "failover-force",
            Failover::Takeover if lagging => "takeover-lagging",
            Failover::Takeover => "failover-takeover",
        };
        Some((master, name))
    }

    /// The proxies: one per client (to the server, or the master), or one
    /// per server (Redlock) or cluster node, which then announces it (and
    /// this waits until every node agrees).
    pub(crate) fn proxies(&self, seed: u64) -> Vec<FaultProxy> {
        match self {
            World::One(server) => {
                let server = lock(server);
                (0..CLIENTS)
                    .map(|i| FaultProxy::to_server(&server, seed + i as u64))
                    .collect()
            }
            World::Replicated { master, .. } => (0..CLIENTS)
                .map(|i| FaultProxy::to_server(master, seed + i as u64))
                .collect(),
            World::Redlock(servers) => servers
                .iter()
                .enumerate()
                .map(|(i, server)| FaultProxy::to_server(&lock(server), seed + i as u64))
                .collect(),
            World::Cluster(cluster) => cluster_proxies(cluster, seed),
            // Each data server announces its proxy: clients, the Sentinel
            // and the replica's link all go through them.
            World::Sentinel(set) => set.behind_proxies(seed),
        }
    }

    /// Client `i`, connected through the proxies; writes wait for `sync`'s
    /// replicas, if given.
    pub(crate) async fn client(
        &self,
        proxies: &[FaultProxy],
        i: usize,
        sync: Option<(u32, Duration)>,
    ) -> AnyBackend {
        let (n, timeout) = sync.unwrap_or((0, Duration::ZERO));
        match self {
            World::One(_) | World::Replicated { .. } => {
                let backend = connect(&proxies[i % proxies.len()].url()).await;
                backend.sync_replicas(n, timeout).into()
            }
            World::Redlock(_) => panic!("Redlock's clients are made by `redlock`"),
            World::Cluster(_) => {
                let urls: Vec<String> = proxies.iter().map(FaultProxy::url).collect();
                let builder = ClusterClientBuilder::new(urls);
                let backend = RedisBackend::connect_cluster_with(builder, config()).await;
                backend
                    .unwrap_or_else(|e| panic!("cannot connect to the cluster: {e}"))
                    .sync_replicas(n, timeout)
                    .into()
            }
            World::Sentinel(set) => {
                let urls = set.sentinel_urls();
                let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
                let backend =
                    RedisBackend::connect_sentinel_with(&urls, MASTER_NAME, None, config()).await;
                backend
                    .unwrap_or_else(|e| panic!("cannot connect through the Sentinel: {e}"))
                    .sync_replicas(n, timeout)
                    .into()
            }
        }
    }

    /// A Redlock client over every server, each through its proxy.
    pub(crate) async fn redlock(&self, proxies: &[FaultProxy]) -> Redlock {
        let mut servers = Vec::new();
        for proxy in proxies {
            servers.push(connect(&proxy.url()).await);
        }
        Redlock::new(servers)
            .expect("servers")
            .per_server_timeout(Duration::from_millis(150))
    }

    /// The URL of the one server, the master, or Redlock's first server.
    pub(crate) fn url(&self) -> String {
        match self {
            World::One(server) => lock(server).url(),
            World::Replicated { master, .. } => master.url(),
            World::Redlock(servers) => lock(&servers[0]).url(),
            World::Cluster(cluster) => cluster.nodes()[0].url(),
            World::Sentinel(set) => set.master().url(),
        }
    }

    /// A client for setting up and reading back: straight to the server
    /// (the master), or to a cluster through its (healed) proxies.
    pub(crate) async fn direct(&self, proxies: &[FaultProxy]) -> AnyBackend {
        match self {
            World::Cluster(_) => return self.client(proxies, 0, None).await,
            // Through the Sentinel, the master of the moment; what it sets
            // up waits for the replica, so a failover cannot lose it.
            World::Sentinel(_) => {
                let sync = Some((1, Duration::from_secs(2)));
                return self.client(proxies, 0, sync).await;
            }
            _ => {}
        }
        RedisBackend::connect(&self.url())
            .await
            .expect("connect")
            .into()
    }
}

async fn connect(url: &str) -> RedisBackend {
    let client = redis::Client::open(url).expect("proxy url");
    RedisBackend::connect_with(client, config())
        .await
        .unwrap_or_else(|e| panic!("cannot connect through {url}: {e}"))
}

/// A proxy per node, which the node then announces.
fn cluster_proxies(cluster: &RedisCluster, seed: u64) -> Vec<FaultProxy> {
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
