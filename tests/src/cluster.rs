//! A real Redis Cluster for tests: three masters with one replica each,
//! made with `redis-cli --cluster create`, and the faults a deployment
//! meets: a node killed, paused or restarted, a replica cut off from its
//! master, and failovers graceful and forced.
//!
//! ```no_run
//! use lock_tests::cluster::RedisCluster;
//!
//! let cluster = RedisCluster::start(); // panics, with a hint, if it cannot
//! let urls = cluster.urls();
//! let master = cluster.master_of("lock:{order:1}:lock");
//! let replica = cluster.replica_of(master);
//! cluster.failover(replica, lock_tests::cluster::Failover::Graceful);
//! ```

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use lock_core::backend::{ClusterBackend, RedisBackend};

use crate::{RedisServer, ServerOptions, server_binary};

/// A three-master, three-replica cluster on loopback. Killed when dropped.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

/// How a replica takes over from its master ([`RedisCluster::failover`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failover {
    /// `CLUSTER FAILOVER`: the master stops taking writes, the replica
    /// catches up, then they swap. Nothing is lost.
    Graceful,
    /// `CLUSTER FAILOVER TAKEOVER`: the replica promotes itself without
    /// its master or the other masters (the master may be dead).
    Takeover,
    /// `CLUSTER FAILOVER FORCE`: the replica takes over at once, without
    /// catching up with its master (writes it had not received are lost),
    /// though still elected by the other masters.
    Force,
}

/// The cluster-making client: the one beside the server binary first (the
/// Redis 5.0.7 wheel ships its `redis-cli` beside its `redis-server`;
/// Debian's `valkey-server` has `valkey-cli`), then one on `PATH`. Any
/// `redis-cli` or `valkey-cli` of 5.0 or later makes a cluster of any of
/// those servers: `--cluster create` speaks only commands Redis 5.0 has.
///
/// # Panics
/// When there is none, with a hint.
pub fn cli_binary() -> PathBuf {
    let server = server_binary();
    let valkey = server
        .file_name()
        .is_some_and(|name| name.to_string_lossy().starts_with("valkey"));
    let names = if valkey {
        ["valkey-cli", "redis-cli"]
    } else {
        ["redis-cli", "valkey-cli"]
    };
    let path: Vec<PathBuf> = std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .collect();
    let dirs = server
        .parent()
        .map(Path::to_path_buf)
        .into_iter()
        .chain(path);
    dirs.flat_map(|dir| names.map(|name| dir.join(name)))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "redis-cli was not found beside {} or on PATH; install it (Debian/Ubuntu: \
                 `apt-get install redis-tools`) or run `scripts/test`, which does",
                server.display()
            )
        })
}

/// Makes `nodes` (started with [`ServerOptions::cluster_node`]) one
/// cluster with `redis-cli --cluster create`, `replicas` to each master,
/// and waits until every node says `cluster_state:ok`. For a cluster that
/// [`RedisCluster`] does not make (other sizes, nodes set up first).
///
/// # Panics
/// When `redis-cli` fails, or the cluster does not form in 30 s.
pub fn create(nodes: &[RedisServer], replicas: usize) {
    let addresses: Vec<String> = nodes
        .iter()
        .map(|n| format!("127.0.0.1:{}", n.port()))
        .collect();
    let out = Command::new(cli_binary())
        .args(["--cluster", "create"])
        .args(&addresses)
        .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
        .output()
        .unwrap_or_else(|e| panic!("cannot run redis-cli: {e}"));
    assert!(
        out.status.success(),
        "redis-cli --cluster create failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    wait_until(Duration::from_secs(30), "the cluster forming", || {
        nodes.iter().all(says_ok)
    });
}

/// Whether `node` says `cluster_state:ok`.
fn says_ok(node: &RedisServer) -> bool {
    redis::cmd("CLUSTER")
        .arg("INFO")
        .query::<String>(&mut node.connection())
        .is_ok_and(|info| info.contains("cluster_state:ok"))
}

/// Polls `check` every 50 ms until it holds or `within` passes.
fn wait_until(within: Duration, what: &str, check: impl FnMut() -> bool) {
    assert!(poll(within, check), "{what}: not within {within:?}");
}

/// Polls `check` every 50 ms: whether it held within `within`.
fn poll(within: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while !check() {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

impl RedisCluster {
    /// Starts six nodes, makes them a cluster, and waits until every node
    /// says `cluster_state:ok` and every master has its replica in sync.
    ///
    /// # Panics
    /// When the nodes cannot be started or the cluster does not form.
    pub fn start() -> Self {
        let nodes: Vec<RedisServer> = (0..6)
            .map(|_| RedisServer::start_with(ServerOptions::new().cluster_node()))
            .collect();
        create(&nodes, 1);
        let cluster = RedisCluster { nodes };
        cluster.wait_ok();
        cluster
    }

    /// Waits until every running node says `cluster_state:ok`, agrees on
    /// three masters, and each master has a replica linked to it.
    ///
    /// # Panics
    /// After 30 s.
    pub fn wait_ok(&self) {
        wait_until(
            Duration::from_secs(30),
            "cluster_state:ok everywhere",
            || {
                self.all_ok()
                    && self.masters().len() == 3
                    && self
                        .masters()
                        .iter()
                        .all(|&m| self.replica_of_opt(m).is_some())
            },
        );
        // Every replica caught up with its master's link.
        wait_until(Duration::from_secs(30), "replicas linked", || {
            self.running()
                .filter(|&i| self.role(i).as_deref() == Some("slave"))
                .all(|i| {
                    info(&self.nodes[i], "replication", "master_link_status").as_deref()
                        == Some("up")
                })
        });
    }

    /// Whether every running node says `cluster_state:ok`.
    fn all_ok(&self) -> bool {
        self.running().all(|i| says_ok(&self.nodes[i]))
    }

    fn running(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.nodes.len()).filter(|&i| self.nodes[i].is_running() && self.answers(i))
    }

    fn answers(&self, i: usize) -> bool {
        self.nodes[i]
            .client()
            .get_connection_with_timeout(Duration::from_millis(300))
            .and_then(|mut c| {
                c.set_read_timeout(Some(Duration::from_millis(300)))?;
                redis::cmd("PING").query::<String>(&mut c)
            })
            .is_ok()
    }

    /// The nodes (three masters and three replicas, in no set order).
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// Node `i`, to kill, pause or restart.
    pub fn node(&mut self, i: usize) -> &mut RedisServer {
        &mut self.nodes[i]
    }

    /// Every node's URL: a client needs any one of them.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// A [`ClusterBackend`] on this cluster, with default settings.
    ///
    /// # Panics
    /// When it cannot connect.
    pub async fn connect(&self) -> ClusterBackend {
        let urls = self.urls();
        let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
        RedisBackend::connect_cluster(&urls)
            .await
            .unwrap_or_else(|e| panic!("connect to the cluster: {e}"))
    }

    /// `master` or `slave`, as node `i` says.
    pub fn role(&self, i: usize) -> Option<String> {
        info(&self.nodes[i], "replication", "role")
    }

    /// The nodes that are masters now.
    pub fn masters(&self) -> Vec<usize> {
        self.running()
            .filter(|&i| self.role(i).as_deref() == Some("master") && self.owns_slots(i))
            .collect()
    }

    /// Node `i`'s own line of `CLUSTER NODES`, split into fields.
    fn own_line(&self, i: usize) -> Vec<String> {
        let nodes: String = redis::cmd("CLUSTER")
            .arg("NODES")
            .query(&mut self.nodes[i].connection())
            .unwrap_or_default();
        nodes
            .lines()
            .find(|line| line.contains("myself"))
            .map(|line| line.split_whitespace().map(str::to_owned).collect())
            .unwrap_or_default()
    }

    /// Whether node `i` masters any slot.
    fn owns_slots(&self, i: usize) -> bool {
        let line = self.own_line(i);
        line.get(2).is_some_and(|flags| flags.contains("master")) && line.len() > 8
    }

    /// Node `i`'s cluster id.
    pub fn node_id(&self, i: usize) -> String {
        redis::cmd("CLUSTER")
            .arg("MYID")
            .query(&mut self.nodes[i].connection())
            .unwrap_or_else(|e| panic!("CLUSTER MYID: {e}"))
    }

    /// The node that masters the slot of `key` now.
    pub fn master_of(&self, key: &str) -> usize {
        let slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut self.nodes[self.running().next().expect("a running node")].connection())
            .expect("CLUSTER KEYSLOT");
        self.masters()
            .into_iter()
            .find(|&m| self.owns_slot(m, slot))
            .unwrap_or_else(|| panic!("no master owns slot {slot}"))
    }

    fn owns_slot(&self, i: usize, slot: u16) -> bool {
        self.own_line(i).iter().skip(8).any(|range| {
            let (lo, hi) = range.split_once('-').unwrap_or((range, range));
            match (lo.parse::<u16>(), hi.parse::<u16>()) {
                (Ok(lo), Ok(hi)) => (lo..=hi).contains(&slot),
                _ => false,
            }
        })
    }

    fn replica_of_opt(&self, master: usize) -> Option<usize> {
        let id = self.node_id(master);
        self.running().find(|&i| {
            let line = self.own_line(i);
            i != master
                && line.get(2).is_some_and(|flags| flags.contains("slave"))
                && line.get(3) == Some(&id)
        })
    }

    /// The replica of `master`.
    ///
    /// # Panics
    /// When it has none running.
    pub fn replica_of(&self, master: usize) -> usize {
        self.replica_of_opt(master)
            .unwrap_or_else(|| panic!("node {master} has no replica"))
    }

    /// Makes `replica` take over from its master, and waits until the
    /// cluster agrees (the old master, if it runs, becomes its replica).
    ///
    /// # Panics
    /// When the failover does not complete within 30 s.
    pub fn failover(&self, replica: usize, how: Failover) {
        self.ask_failover(replica, how)
            .unwrap_or_else(|e| panic!("CLUSTER FAILOVER: {e}"));
        wait_until(
            Duration::from_secs(30),
            "the replica became a master",
            || self.promoted(replica),
        );
        wait_until(
            Duration::from_secs(30),
            "cluster_state:ok after the failover",
            || self.all_ok(),
        );
    }

    /// As [`failover`](Self::failover), but a failover that has not
    /// completed after 15 s is asked for again more forcefully (`FORCE`,
    /// then `TAKEOVER`): for fault injection, where the replica's link to
    /// its master may just have been disturbed, so that a graceful
    /// handover cannot complete. Returns the kind that completed.
    ///
    /// # Panics
    /// When not even a `TAKEOVER` completes within 30 s.
    pub fn failover_eventually(&self, replica: usize, how: Failover) -> Failover {
        let kinds: &[Failover] = match how {
            Failover::Graceful => &[Failover::Graceful, Failover::Force, Failover::Takeover],
            Failover::Force => &[Failover::Force, Failover::Takeover],
            Failover::Takeover => &[Failover::Takeover],
        };
        for &kind in kinds {
            let within = Duration::from_secs(if kind == Failover::Takeover { 30 } else { 15 });
            // Refused ("the master is down, use FORCE"): the next kind.
            if self.ask_failover(replica, kind).is_ok() && poll(within, || self.promoted(replica)) {
                wait_until(
                    Duration::from_secs(30),
                    "cluster_state:ok after the failover",
                    || self.all_ok(),
                );
                return kind;
            }
        }
        panic!("node {replica} did not become a master, not even by TAKEOVER");
    }

    /// Sends `CLUSTER FAILOVER` (of the kind `how`) to `replica`.
    fn ask_failover(&self, replica: usize, how: Failover) -> redis::RedisResult<()> {
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg("FAILOVER");
        match how {
            Failover::Graceful => {}
            Failover::Takeover => {
                cmd.arg("TAKEOVER");
            }
            Failover::Force => {
                cmd.arg("FORCE");
            }
        }
        cmd.query(&mut self.nodes[replica].connection())
    }

    /// Whether `node` is a master that owns slots.
    fn promoted(&self, node: usize) -> bool {
        self.role(node).as_deref() == Some("master") && self.owns_slots(node)
    }

    /// Cuts `replica` off from its master: the replica is stopped
    /// (SIGSTOP), and its master closes their link, so that writes on the
    /// master no longer reach it (not even from a socket buffer) until
    /// [`reconnect_replica`](Self::reconnect_replica).
    pub fn cut_replica(&self, replica: usize) {
        let master_id = self.own_line(replica).get(3).cloned().unwrap_or_default();
        let master = self
            .running()
            .find(|&i| i != replica && self.node_id(i) == master_id)
            .unwrap_or_else(|| panic!("node {replica} has no running master"));
        self.nodes[replica].pause();
        let _killed: i64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("replica")
            .query(&mut self.nodes[master].connection())
            .unwrap_or_else(|e| panic!("CLIENT KILL TYPE replica: {e}"));
    }

    /// Undoes [`cut_replica`](Self::cut_replica).
    pub fn reconnect_replica(&self, replica: usize) {
        self.nodes[replica].resume();
    }
}

/// The value of `field` in `INFO section` of `server`, if it answers.
pub fn info(server: &RedisServer, section: &str, field: &str) -> Option<String> {
    let mut conn = server
        .client()
        .get_connection_with_timeout(Duration::from_millis(500))
        .ok()?;
    conn.set_read_timeout(Some(Duration::from_millis(500)))
        .ok()?;
    let text: String = redis::cmd("INFO").arg(section).query(&mut conn).ok()?;
    text.lines()
        .find_map(|line| line.strip_prefix(&format!("{field}:")))
        .map(|v| v.trim().to_owned())
}
