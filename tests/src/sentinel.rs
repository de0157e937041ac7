//! A real Sentinel set for tests: a master, its replica, and a Sentinel
//! that watches them, and the failover a deployment meets.
//!
//! [`SentinelSet::behind_proxies`] puts a [`FaultProxy`] before each of
//! the three: each data server announces its proxy (`replica-announce-*`)
//! and the Sentinel watches the master through its proxy, so the
//! Sentinel, the replica's link and every client reach a server only
//! through its proxy, and clients ask the Sentinel through its own.
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

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::cluster::info;
use crate::fault_proxy::FaultProxy;
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
    /// Once behind proxies: the ports every other party reaches them by.
    fronts: OnceLock<Fronts>,
}

/// The ports of the proxies before the data servers and the Sentinel.
#[derive(Debug)]
struct Fronts {
    servers: [u16; 2],
    sentinel: u16,
}

/// `CONFIG SET setting value` on `server`.
fn config_set(server: &RedisServer, setting: &str, value: &str) {
    redis::cmd("CONFIG")
        .arg("SET")
        .arg(setting)
        .arg(value)
        .query::<()>(&mut server.connection())
        .unwrap_or_else(|e| panic!("CONFIG SET {setting} {value}: {e}"));
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
            fronts: OnceLock::new(),
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
        match self.fronts.get() {
            Some(fronts) => vec![format!("redis://127.0.0.1:{}/", fronts.sentinel)],
            None => vec![self.sentinel.url()],
        }
    }

    /// The port by which the Sentinel, the replica and clients reach data
    /// server `i`: its proxy's, once [behind proxies](Self::behind_proxies).
    fn front(&self, i: usize) -> u16 {
        self.fronts
            .get()
            .map_or(self.servers[i].port(), |fronts| fronts.servers[i])
    }

    /// Puts the set behind fault proxies (see the [module docs](self)):
    /// returns the proxies before data server 0, data server 1 and the
    /// Sentinel, in that order; `seed` drives their random cuts. From now
    /// on the set answers with the proxies' ports
    /// ([`master_port`](Self::master_port),
    /// [`sentinel_urls`](Self::sentinel_urls)). Call it once, before
    /// clients connect; it waits until the Sentinel watches the master
    /// through its proxy and knows the replica by its own.
    ///
    /// # Panics
    /// When called twice, or when the set does not come up again within
    /// 30 s.
    pub fn behind_proxies(&self, seed: u64) -> Vec<FaultProxy> {
        let master = self.master_port();
        let proxies: Vec<FaultProxy> = [&self.servers[0], &self.servers[1], &self.sentinel]
            .into_iter()
            .enumerate()
            .map(|(i, server)| FaultProxy::to_server(server, seed + i as u64))
            .collect();
        for (server, proxy) in self.servers.iter().zip(&proxies) {
            config_set(server, "replica-announce-ip", "127.0.0.1");
            config_set(
                server,
                "replica-announce-port",
                &proxy.addr().port().to_string(),
            );
        }
        let fronts = Fronts {
            servers: [proxies[0].addr().port(), proxies[1].addr().port()],
            sentinel: proxies[2].addr().port(),
        };
        assert!(self.fronts.set(fronts).is_ok(), "already behind proxies");
        let master = self.index(master);
        let () = redis::cmd("REPLICAOF")
            .arg("127.0.0.1")
            .arg(self.front(master))
            .query(&mut self.servers[1 - master].connection())
            .unwrap_or_else(|e| panic!("REPLICAOF through the proxy: {e}"));
        // Watched anew, at the proxy: the Sentinel then learns the
        // replica from the master's INFO, by the port it announces.
        let sentinel = &mut self.sentinel.connection();
        let mut sentinel_cmd = |args: &[String]| {
            redis::cmd("SENTINEL")
                .arg(args)
                .query::<()>(sentinel)
                .unwrap_or_else(|e| panic!("SENTINEL {args:?}: {e}"));
        };
        let name = MASTER_NAME.to_owned();
        sentinel_cmd(&["REMOVE".into(), name.clone()]);
        sentinel_cmd(&[
            "MONITOR".into(),
            name.clone(),
            "127.0.0.1".into(),
            self.front(master).to_string(),
            "1".into(),
        ]);
        for (option, value) in [
            ("down-after-milliseconds", "1000".to_owned()),
            ("failover-timeout", FAILOVER_TIMEOUT.as_millis().to_string()),
            ("parallel-syncs", "1".to_owned()),
        ] {
            sentinel_cmd(&["SET".into(), name.clone(), option.into(), value]);
        }
        wait_until(
            Duration::from_secs(30),
            "the replica in sync through the proxy",
            || {
                info(
                    &self.servers[1 - master],
                    "replication",
                    "master_link_status",
                )
                .as_deref()
                    == Some("up")
            },
        );
        wait_until(
            Duration::from_secs(30),
            "the Sentinel knows the replica behind its proxy",
            || self.sentinel_sees_a_ready_replica(),
        );
        proxies
    }

    /// The data server reached at `port` (its own, or its proxy's).
    fn index(&self, port: u16) -> usize {
        (0..2)
            .find(|&i| self.front(i) == port || self.servers[i].port() == port)
            .unwrap_or_else(|| panic!("no server on port {port}"))
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

    /// The data server on `port` (the master or the replica), its own or
    /// its proxy's.
    pub fn server(&self, port: u16) -> &RedisServer {
        &self.servers[self.index(port)]
    }

    /// The master, as the Sentinel says now.
    pub fn master(&self) -> &RedisServer {
        self.server(self.master_port())
    }

    /// The data server that is not the master (the replica, or the old
    /// master until the Sentinel makes it one).
    pub fn replica(&self) -> &RedisServer {
        &self.servers[1 - self.index(self.master_port())]
    }

    /// `SENTINEL FAILOVER`: the replica becomes the master; waits until the
    /// Sentinel says so and the new master takes writes.
    ///
    /// # Panics
    /// When the switch does not come within 30 s.
    pub fn failover(&self) {
        self.try_failover()
            .unwrap_or_else(|e| panic!("SENTINEL FAILOVER: {e}"));
    }

    /// As [`failover`](Self::failover), but a refusal (one already in
    /// progress, no replica the Sentinel would promote: faults can start
    /// failovers of their own) is returned.
    ///
    /// # Errors
    /// The Sentinel's refusal.
    ///
    /// # Panics
    /// When the Sentinel took the failover and the switch does not come
    /// within 30 s.
    pub fn try_failover(&self) -> redis::RedisResult<()> {
        let old = self.master_port();
        let () = redis::cmd("SENTINEL")
            .arg("FAILOVER")
            .arg(MASTER_NAME)
            .query(&mut self.sentinel.connection())?;
        wait_until(
            Duration::from_secs(30),
            "the Sentinel switched masters",
            || {
                self.master_port() != old
                    && info(self.master(), "replication", "role").as_deref() == Some("master")
            },
        );
        Ok(())
    }

    /// Makes the data server that is not the master a replica of it now,
    /// as the Sentinel does by itself seconds after a failover, and waits
    /// until it is in sync (the master's synced writes then go through).
    ///
    /// # Panics
    /// When it is not in sync within 30 s.
    pub fn rejoin(&self) {
        // Not in the middle of a failover of the Sentinel's own (a
        // partition of the master can start one), which is about to
        // reconfigure both servers itself.
        wait_until(Duration::from_secs(30), "no failover in progress", || {
            !self.failing_over()
        });
        let master = self.master_port();
        let replica = &self.servers[1 - self.index(master)];
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

impl SentinelSet {
    /// Whether the Sentinel is failing the master over now.
    fn failing_over(&self) -> bool {
        let fields: Vec<String> = redis::cmd("SENTINEL")
            .arg("MASTER")
            .arg(MASTER_NAME)
            .query(&mut self.sentinel.connection())
            .unwrap_or_else(|e| panic!("SENTINEL MASTER: {e}"));
        fields
            .chunks(2)
            .any(|pair| pair[0] == "flags" && pair.get(1).is_some_and(|f| f.contains("failover")))
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
