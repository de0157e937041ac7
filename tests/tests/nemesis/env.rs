//! One scenario's run: its world (servers and fault proxies), the
//! history, and the verdict. The nemesis is in `faults.rs`, the table in
//! `report.rs`.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use lock_core::backend::AnyBackend;
use lock_core::lock::Redlock;
use lock_tests::fault_proxy::FaultProxy;
use lock_tests::history::{History, Violation};
use rand::SeedableRng;
use rand::rngs::StdRng;

use crate::report::report;
use crate::world::{Topology, World};

/// Clients (on one server, each behind a proxy of its own).
pub(crate) const CLIENTS: usize = 3;
/// Workers (tasks), spread over the clients.
pub(crate) const WORKERS: usize = 6;

/// The kinds of violation a lossy failover (one without `sync_replicas`)
/// may cause by design: the checker reports them and expects nothing.
const LOSSY: [&str; 3] = ["overlap", "permits", "release-answer"];

/// What a failover that may lose answered writes (forced, or a takeover,
/// without `sync_replicas`) may cause besides: answered decrements,
/// remembered operation ids and counted hits gone.
const LOST_WRITES: [&str; 6] = [
    "stock",
    "op-replayed",
    "op-answer",
    "op-applied-twice",
    "settle-answer",
    "rate",
];

/// Locks `mutex`, poisoned or not.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Only one scenario runs at a time, whatever the test threads.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// The run's seed: `NEMESIS_SEED`, or a random one.
fn base_seed() -> u64 {
    static SEED: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *SEED.get_or_init(|| match std::env::var("NEMESIS_SEED") {
        Ok(s) => s
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("NEMESIS_SEED={s} is not a number")),
        Err(_) => rand::random::<u64>() % 1_000_000_000,
    })
}

/// How long each scenario's workload runs: `NEMESIS_SECONDS`, default 10.
pub(crate) fn duration() -> Duration {
    let secs = std::env::var("NEMESIS_SECONDS")
        .ok()
        .and_then(|s| s.trim().parse::<f64>().ok());
    Duration::from_secs_f64(secs.unwrap_or(10.0).max(1.0))
}

/// What a scenario shares with its workers.
pub(crate) struct Env {
    /// The scenario's seed (from the run's seed and its name).
    pub(crate) seed: u64,
    /// Everything done, by every worker.
    pub(crate) history: Arc<History>,
    /// When workers stop starting operations.
    pub(crate) deadline: Instant,
    pub(crate) topology: Topology,
    pub(crate) world: World,
    pub(crate) proxies: Vec<FaultProxy>,
    pub(crate) faults: Mutex<BTreeMap<&'static str, u32>>,
    /// When each fault was over (healed, resumed, or the cut made).
    pub(crate) healed: Mutex<Vec<Instant>>,
    /// Spans during which a server was surely paused: from after it was
    /// stopped to before it was resumed (which server: `pausable` index).
    pub(crate) paused: Mutex<Vec<(usize, Instant, Instant)>>,
    /// Cluster masters replaced by a failover, and when.
    pub(crate) replaced: Mutex<Vec<(usize, Instant)>>,
    /// Whether a failover without `sync_replicas` happened (locks may
    /// then be granted twice, as documented).
    pub(crate) lossy: AtomicBool,
    /// Whether one of them may have lost answered writes (forced, or a
    /// takeover).
    pub(crate) lost_writes: AtomicBool,
}

impl Env {
    /// The client `i` (of [`CLIENTS`]), connected through the proxies.
    pub(crate) async fn client(&self, i: usize) -> AnyBackend {
        self.world
            .client(&self.proxies, i, self.topology.sync())
            .await
    }

    /// A Redlock client over the five servers, through their proxies.
    pub(crate) async fn redlock(&self) -> Redlock {
        self.world.redlock(&self.proxies).await
    }

    /// A client for setting up and reading back, which no fault touches
    /// (once the nemesis has healed them all).
    pub(crate) async fn direct(&self) -> AnyBackend {
        self.world.direct(&self.proxies).await
    }

    /// The URL of the one server (or the master), straight, for a worker
    /// process.
    pub(crate) fn direct_url(&self) -> String {
        self.world.url()
    }

    /// A generator for worker `w`, from the scenario's seed.
    pub(crate) fn rng(&self, w: usize) -> StdRng {
        StdRng::seed_from_u64(self.seed.wrapping_mul(31).wrapping_add(w as u64 + 1))
    }

    /// Whether workers should stop.
    pub(crate) fn over(&self) -> bool {
        Instant::now() >= self.deadline
    }

    /// Counts one more `fault`.
    pub(crate) fn count(&self, fault: &'static str) {
        *lock(&self.faults).entry(fault).or_insert(0) += 1;
    }

    /// Notes a failover (`forced`: without the old master's agreement):
    /// lossy unless writes wait for replicas.
    pub(crate) fn failed_over(&self, forced: bool) {
        if self.topology.sync().is_none() {
            self.lossy.store(true, Ordering::SeqCst);
            if forced {
                self.lost_writes.store(true, Ordering::SeqCst);
            }
        }
    }

    /// How many faults were injected so far.
    pub(crate) fn injected(&self) -> u32 {
        lock(&self.faults).values().sum()
    }
}

/// Runs scenario `name` on one (persistent) server: starts its world,
/// runs `body` (which spawns the workers, calls [`Env::nemesis`], then
/// checks the history), prints its row of the table, and fails on any
/// violation, with the seed.
pub(crate) fn scenario<F, Fut>(name: &'static str, body: F)
where
    F: FnOnce(Arc<Env>) -> Fut,
    Fut: Future<Output = Vec<Violation>>,
{
    scenario_on(name, Topology::One, body);
}

/// As [`scenario`], on a Redis Cluster whose nodes are each behind a
/// proxy, with graceful failovers (which lose nothing; still, without
/// `sync_replicas`, overlaps after one are only reported).
pub(crate) fn cluster_scenario<F, Fut>(name: &'static str, body: F)
where
    F: FnOnce(Arc<Env>) -> Fut,
    Fut: Future<Output = Vec<Violation>>,
{
    let topology = Topology::Cluster {
        synced: false,
        force: false,
    };
    scenario_on(name, topology, body);
}

/// As [`scenario`], on `topology`.
pub(crate) fn scenario_on<F, Fut>(name: &'static str, topology: Topology, body: F)
where
    F: FnOnce(Arc<Env>) -> Fut,
    Fut: Future<Output = Vec<Violation>>,
{
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
    let base = base_seed();
    let seed = name.bytes().fold(base ^ 0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    let world = World::start(topology);
    let proxies = world.proxies(seed);
    let env = Arc::new(Env {
        seed,
        history: Arc::new(History::new()),
        deadline: Instant::now() + duration(),
        topology,
        world,
        proxies,
        faults: Mutex::new(BTreeMap::new()),
        healed: Mutex::new(Vec::new()),
        paused: Mutex::new(Vec::new()),
        replaced: Mutex::new(Vec::new()),
        lossy: AtomicBool::new(false),
        lost_writes: AtomicBool::new(false),
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let started = Instant::now();
    let mut violations = runtime.block_on(body(env.clone()));
    violations.extend(env.history.check_errors());
    let elapsed = started.elapsed();
    drop(runtime);
    // After a lossy failover, double grants are documented: reported only.
    let reported: Vec<Violation> = if env.lossy.load(Ordering::SeqCst) {
        let lost_writes = env.lost_writes.load(Ordering::SeqCst);
        let (lossy, hard) = violations.into_iter().partition(|v| {
            LOSSY.contains(&v.kind) || (lost_writes && LOST_WRITES.contains(&v.kind))
        });
        violations = hard;
        lossy
    } else {
        Vec::new()
    };
    report(name, base, &env, elapsed, &violations, &reported);
    // libtest names the thread after the test, which is what filters it.
    let test = std::thread::current().name().unwrap_or(name).to_owned();
    let seconds = duration().as_secs_f64();
    assert!(
        violations.is_empty(),
        "scenario {name}: {} violations; reproduce with NEMESIS_SEED={base} NEMESIS_SECONDS={seconds} \
         cargo test -p lock-tests --test nemesis -- --nocapture --exact {test}",
        violations.len()
    );
}
