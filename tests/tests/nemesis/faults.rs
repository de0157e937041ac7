//! The nemesis: faults chosen from the scenario's seed, injected until the
//! deadline: cuts after a forwarded command, cuts at random bytes, delays,
//! partitions (black holes) and connection resets on the proxies; server
//! pauses (SIGSTOP); and what the world allows besides: a kill and restart
//! of the one server or of a minority of Redlock's (with their data), a
//! cluster failover (graceful; `FORCE` where the scenario allows it;
//! `TAKEOVER` on a replica left lagging by a pause, where the scenario
//! allows lost writes or its writes wait for replicas), a long pause of a
//! master's replica, a Sentinel failover.

use std::time::{Duration, Instant};

use lock_tests::fault_proxy::{Fault, FaultProxy};
use lock_tests::history::Violation;
use lock_tests::sentinel::FAILOVER_TIMEOUT;
use rand::rngs::StdRng;
use rand::seq::index::sample;
use rand::{Rng, SeedableRng};

use crate::env::{Env, lock};
use crate::world::{Topology, World};

fn ms(rng: &mut StdRng, lo: u64, hi: u64) -> Duration {
    Duration::from_millis(rng.random_range(lo..hi))
}

impl Env {
    /// Arms the one-shot `cut` on a random proxy, turning into `then` once
    /// it fired; a proxy that carries nothing for 700 ms is disarmed and
    /// another tried (a cluster node may hold none of the keys in use).
    /// The proxy it fired on.
    async fn cut(&self, rng: &mut StdRng, cut: Fault, then: Fault) -> Option<&FaultProxy> {
        for _ in 0..3 {
            let proxy = &self.proxies[rng.random_range(0..self.proxies.len())];
            let before = proxy.cuts();
            proxy.set_then(cut, then);
            let fired =
                lock_tests::eventually(Duration::from_millis(700), async || proxy.cuts() > before)
                    .await;
            if fired {
                return Some(proxy);
            }
            proxy.heal();
        }
        None
    }

    /// Pauses pausable server `i` for `d`, noting when it surely was.
    async fn pause_server(&self, i: usize, d: Duration) {
        // Resolved once: the Sentinel may switch masters meanwhile, and
        // the server stopped is the one to resume.
        let server = self.world.pausable_server(i);
        server.pause();
        let from = Instant::now();
        tokio::time::sleep(d).await;
        let until = Instant::now();
        server.resume();
        lock(&self.paused).push((i, from, until));
    }

    /// Notes a failover the Sentinel made by itself (after a partition of
    /// the master past its down-after) since `known`: the master's port
    /// and how many failovers the nemesis had asked for when last looked.
    fn sentinel_failovers(&self, known: &mut Option<(u16, u32)>) {
        let World::Sentinel(set) = &self.world else {
            return;
        };
        let port = set.master_port();
        let asked = lock(&self.faults).get("failover").copied().unwrap_or(0);
        if known.is_some_and(|(was, asked_then)| was != port && asked_then == asked) {
            lock(&self.replaced).push((0, Instant::now()));
            self.count("failover-by-sentinel");
            self.failed_over(false);
        }
        *known = Some((port, asked));
    }

    /// The fault only some worlds have: a kill and restart, a failover, a
    /// long pause of the replica. `first`: the scenario's first, which is
    /// its world's most telling (a `TAKEOVER` where one is allowed, a
    /// Sentinel failover), so that a short run has it too.
    async fn world_fault(&self, rng: &mut StdRng, first: bool) {
        match (&self.world, self.topology) {
            (World::One(_), _) => {
                let down = ms(rng, 100, 1000);
                tokio::task::block_in_place(|| self.world.kill_restart(&[0], down));
                self.count("kill");
            }
            (World::Redlock(servers), _) => {
                // A minority: the other servers still make a majority.
                let n = rng.random_range(1..=(servers.len() - 1) / 2);
                let which = sample(rng, servers.len(), n).into_vec();
                let down = ms(rng, 100, 1500);
                tokio::task::block_in_place(|| self.world.kill_restart(&which, down));
                self.count("kill");
            }
            (World::Cluster(_), Topology::Cluster { force, synced }) => {
                // Masters vote for no second replacement of a master
                // within twice the node timeout (5 s here).
                let mut replaced = lock(&self.replaced);
                replaced.retain(|&(_, at)| at.elapsed() < Duration::from_secs(12));
                let avoid: Vec<usize> = replaced.iter().map(|&(m, _)| m).collect();
                let mut choice = StdRng::seed_from_u64(rng.random());
                let done = tokio::task::block_in_place(|| {
                    self.world
                        .failover(&mut choice, (force, synced), first, &avoid)
                });
                if let Some((master, how)) = done {
                    replaced.push((master, Instant::now()));
                    drop(replaced);
                    self.count(how);
                    self.failed_over(how != "failover");
                }
            }
            (World::Sentinel(set), _) => {
                // One failover per failover-timeout at most, and only once
                // the old master is a replica again and the Sentinel would
                // promote it.
                let due = lock(&self.replaced)
                    .last()
                    .is_none_or(|&(_, at)| at.elapsed() >= FAILOVER_TIMEOUT);
                // A partition of the master may have started one of the
                // Sentinel's own: a refusal is no fault injected.
                if due && (first || rng.random_bool(0.6)) && set.can_fail_over() {
                    // The old master stays one (with no replica: synced
                    // writes fail) until the Sentinel makes it a replica,
                    // seconds later; half the time it is done at once.
                    let rejoin = rng.random_bool(0.5);
                    let taken = tokio::task::block_in_place(|| {
                        let taken = set.try_failover().is_ok();
                        if taken && rejoin {
                            set.rejoin();
                        }
                        taken
                    });
                    if taken {
                        lock(&self.replaced).push((0, Instant::now()));
                        self.count("failover");
                        self.failed_over(false);
                    }
                } else {
                    let d = ms(rng, 200, self.world.longest_pause().as_millis() as u64);
                    self.pause_server(0, d).await;
                    self.count("pause");
                }
            }
            _ => {
                let d = ms(rng, 500, self.world.longest_pause().as_millis() as u64);
                self.pause_server(0, d).await;
                self.count("pause");
            }
        }
    }

    /// Injects faults chosen from the seed until the deadline, heals them
    /// all, then waits for `workers`; a worker that does not finish within
    /// a minute, or panics, is a violation.
    pub(crate) async fn nemesis(
        &self,
        workers: Vec<tokio::task::JoinHandle<()>>,
    ) -> Vec<Violation> {
        let mut rng = StdRng::seed_from_u64(self.seed ^ 0x6e656d65);
        let mut master = None;
        let mut first = true;
        while !self.over() {
            tokio::time::sleep(ms(&mut rng, 100, 500)).await;
            self.sentinel_failovers(&mut master);
            let injected = self.injected();
            if self.proxies.is_empty() || first {
                // The world's own fault first: a short run has it too.
                self.world_fault(&mut rng, first).await;
                first = false;
                if self.injected() > injected {
                    lock(&self.healed).push(Instant::now());
                }
                self.sentinel_failovers(&mut master);
                continue;
            }
            let proxy = &self.proxies[rng.random_range(0..self.proxies.len())];
            // Cuts after a forwarded command come most often: they make
            // outcomes unknown, which is where retries go wrong.
            match rng.random_range(0..24) {
                0..7 => {
                    // Half the time the network stays slow after the cut:
                    // what others do meanwhile comes between the call and
                    // its retry on the new connection.
                    let then = if rng.random_bool(0.5) {
                        Fault::Delay(ms(&mut rng, 10, 60))
                    } else {
                        Fault::Pass
                    };
                    if let Some(proxy) = self.cut(&mut rng, Fault::CutAfterForward, then).await {
                        self.count("cut");
                        if then != Fault::Pass {
                            tokio::time::sleep(ms(&mut rng, 300, 800)).await;
                        }
                        proxy.heal();
                    }
                }
                7..9 => {
                    if self
                        .cut(&mut rng, Fault::CutRandom, Fault::Pass)
                        .await
                        .is_some()
                    {
                        self.count("cut-random");
                    }
                }
                9..12 => {
                    proxy.set(Fault::Delay(ms(&mut rng, 5, 200)));
                    self.count("delay");
                    tokio::time::sleep(ms(&mut rng, 300, 2000)).await;
                    proxy.heal();
                }
                12..15 => {
                    proxy.set(Fault::BlackHole);
                    self.count("partition");
                    tokio::time::sleep(ms(&mut rng, 300, 2500)).await;
                    proxy.heal();
                }
                15..18 => {
                    let i = rng.random_range(0..self.world.pausable());
                    let longest = self.world.longest_pause().as_millis() as u64;
                    let d = ms(&mut rng, 200, longest);
                    self.pause_server(i, d).await;
                    self.count("pause");
                }
                18 => {
                    proxy.cut_all();
                    self.count("reset");
                }
                _ => self.world_fault(&mut rng, false).await,
            }
            if self.injected() > injected {
                lock(&self.healed).push(Instant::now());
            }
        }
        for proxy in &self.proxies {
            proxy.heal();
        }
        if let World::Sentinel(set) = &self.world {
            // Synced writes need a replica: after a failover, the old
            // master becomes one only when the Sentinel reconfigures it.
            // Done here at once, for the checks after the run.
            tokio::task::block_in_place(|| set.rejoin());
        }
        let mut found = Vec::new();
        let joined = tokio::time::timeout(
            Duration::from_secs(60),
            futures_util::future::join_all(workers),
        )
        .await;
        match joined {
            Err(_) => found.push(Violation::new(
                "hang",
                "a worker did not finish within 60 s of the end",
            )),
            Ok(results) => {
                for result in results {
                    if let Err(e) = result {
                        found.push(Violation::new("panic", format!("a worker failed: {e}")));
                    }
                }
            }
        }
        found
    }
}
