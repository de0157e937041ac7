//! A real Sentinel set for tests: a master, its replica, and a Sentinel
//! that watches them, and the failover a deployment meets.
//!
//! ```no_run
//! use lock_tests::sentinel::SentinelSet;
//!
//! let set = SentinelSet::start();
//! let sentinels = set.sentinel_urls();
//! let old = set.master_port();
//! set.failover(); // SENTINEL FAILOVER, then waits for the switch
//! assert_ne!(set.master_port(), old);
//! ```

use std::time::{Duration, Instant};

use crate::cluster::info;
use crate::{RedisServer, ServerOptions};

/// The name the Sentinel knows the master by.
pub const MASTER_NAME: &str = "locks";

/// The Sentinel's `failover-timeout`: the least time between two
/// failovers a nemesis should ask for.
pub const FAILOVER_TIMEOUT: Duration = Duration::from_millis(5000);

/// A master, its replica and one Sentinel on loopback. Killed when dropped.
#[derive(Debug)]
pub struct SentinelSet {
    servers: [RedisServer; 2],
    sentinel: RedisServer,
}

fn wait_until(within: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !check() {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl SentinelSet {
    /// Starts the master, its replica and the Sentinel, and waits until the
    /// replica is in sync and the Sentinel knows it.
    ///
    /// # Panics
    /// When a process cannot be started or the set does not come up.
    pub fn start() -> Self {
        let master = RedisServer::start();
        let replica = RedisServer::start_with(
            ServerOptions::new()
                .arg("--replicaof")
                .arg("127.0.0.1")
                .arg(master.port().to_string()),
        );
        let config = format!(
            "sentinel monitor {MASTER_NAME} 127.0.0.1 {} 1\n\
             sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
             sentinel failover-timeout {MASTER_NAME} {}\n\
             sentinel parallel-syncs {MASTER_NAME} 1\n",
            master.port(),
            FAILOVER_TIMEOUT.as_millis()
        );
        let sentinel = RedisServer::start_with(ServerOptions::new().config(config).sentinel());
        let set = SentinelSet {
            servers: [master, replica],
            sentinel,
        };
        wait_until(Duration::from_secs(30), "the replica in sync", || {
            info(&set.servers[1], "replication", "master_link_status").as_deref() == Some("up")
        });
        // Known, and looked at: a Sentinel that merely lists the replica
        // may still refuse a failover (NOGOODSLAVE on Sentinel 5.0) until
        // it has connected to it and seen its link to the master up.
        // (`SLAVES`: the name every Sentinel version answers to.)
        wait_until(
            Duration::from_secs(30),
            "the Sentinel knows the replica and its link",
            || set.sentinel_sees_a_ready_replica(),
        );
        set
    }

    /// Whether the Sentinel lists a replica it would promote.
    fn sentinel_sees_a_ready_replica(&self) -> bool {
        redis::cmd("SENTINEL")
            .arg("SLAVES")
            .arg(MASTER_NAME)
            .query::<Vec<Vec<String>>>(&mut self.sentinel.connection())
            .is_ok_and(|replicas| replicas.iter().any(|fields| replica_ready(fields)))
    }

    /// Whether a failover would be taken now: the replica (the data server
    /// that is not the master) is linked to the master, and the Sentinel
    /// would promote it. After a failover, the old master turns replica
    /// only when the Sentinel reconfigures it, seconds later.
    pub fn can_fail_over(&self) -> bool {
        info(self.replica(), "replication", "master_link_status").as_deref() == Some("up")
            && self.sentinel_sees_a_ready_replica()
    }

    /// The Sentinel's URL (clients resolve the master through it).
    pub fn sentinel_urls(&self) -> Vec<String> {
        vec![self.sentinel.url()]
    }

    /// The port of the master, as the Sentinel says now.
    pub fn master_port(&self) -> u16 {
        let (_, port): (String, u16) = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(MASTER_NAME)
            .query(&mut self.sentinel.connection())
            .unwrap_or_else(|e| panic!("SENTINEL GET-MASTER-ADDR-BY-NAME: {e}"));
        port
    }

    /// The data server on `port` (the master or the replica).
    pub fn server(&self, port: u16) -> &RedisServer {
        self.servers
            .iter()
            .find(|s| s.port() == port)
            .unwrap_or_else(|| panic!("no server on port {port}"))
    }

    /// The master, as the Sentinel says now.
    pub fn master(&self) -> &RedisServer {
        self.server(self.master_port())
    }

    /// The data server that is not the master (the replica, or the old
    /// master until the Sentinel makes it one).
    pub fn replica(&self) -> &RedisServer {
        let master = self.master_port();
        self.servers
            .iter()
            .find(|s| s.port() != master)
            .expect("two data servers")
    }

    /// `SENTINEL FAILOVER`: the replica becomes the master; waits until the
    /// Sentinel says so and the new master takes writes.
    ///
    /// # Panics
    /// When the switch does not come within 30 s.
    pub fn failover(&self) {
        let old = self.master_port();
        let () = redis::cmd("SENTINEL")
            .arg("FAILOVER")
            .arg(MASTER_NAME)
            .query(&mut self.sentinel.connection())
            .unwrap_or_else(|e| panic!("SENTINEL FAILOVER: {e}"));
        wait_until(
            Duration::from_secs(30),
            "the Sentinel switched masters",
            || {
                self.master_port() != old
                    && info(self.master(), "replication", "role").as_deref() == Some("master")
            },
        );
    }

    /// Makes the data server that is not the master a replica of it now,
    /// as the Sentinel does by itself seconds after a failover, and waits
    /// until it is in sync (the master's synced writes then go through).
    ///
    /// # Panics
    /// When it is not in sync within 30 s.
    pub fn rejoin(&self) {
        let master = self.master_port();
        let replica = self.replica();
        let follows = info(replica, "replication", "role").as_deref() == Some("slave")
            && info(replica, "replication", "master_port") == Some(master.to_string());
        if !follows {
            let () = redis::cmd("REPLICAOF")
                .arg("127.0.0.1")
                .arg(master)
                .query(&mut replica.connection())
                .unwrap_or_else(|e| panic!("REPLICAOF: {e}"));
        }
        wait_until(Duration::from_secs(30), "the old master in sync", || {
            info(replica, "replication", "master_link_status").as_deref() == Some("up")
        });
    }
}

/// Whether a replica, as `SENTINEL SLAVES` describes it (field, value,
/// ...), is one the Sentinel would promote: flagged a plain replica and
/// linked to its master.
fn replica_ready(fields: &[String]) -> bool {
    let field = |name: &str| {
        fields
            .chunks(2)
            .find(|pair| pair[0] == name)
            .and_then(|pair| pair.get(1))
            .map(String::as_str)
    };
    field("flags") == Some("slave") && field("master-link-status") == Some("ok")
}
