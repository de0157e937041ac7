//! One scenario's run: its world (servers and fault proxies), the
//! history, the nemesis that injects faults, and the report.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex, Once, PoisonError};
use std::time::{Duration, Instant};

use lock_core::backend::AnyBackend;
use lock_tests::RedisServer;
use lock_tests::cluster::RedisCluster;
use lock_tests::fault_proxy::{Fault, FaultProxy};
use lock_tests::history::{History, Outcome, Reply, Violation, by_kind};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::world::World;

/// Clients (on one server, each behind a proxy of its own).
pub(crate) const CLIENTS: usize = 3;
/// Workers (tasks), spread over the clients.
pub(crate) const WORKERS: usize = 6;

/// Locks `mutex`, poisoned or not.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Only one scenario runs at a time, whatever the test threads.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
static HEADER: Once = Once::new();

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
fn duration() -> Duration {
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
    world: World,
    proxies: Vec<FaultProxy>,
    faults: Mutex<BTreeMap<&'static str, u32>>,
    /// When each fault was over (healed, resumed, or the cut made).
    healed: Mutex<Vec<Instant>>,
}

impl Env {
    /// The client `i` (of [`CLIENTS`]), connected through the proxies.
    pub(crate) async fn client(&self, i: usize) -> AnyBackend {
        self.world.client(&self.proxies, i).await
    }

    /// A client for setting up and reading back, which no fault touches
    /// (once the nemesis has healed them all).
    pub(crate) async fn direct(&self) -> AnyBackend {
        self.world.direct(&self.proxies).await
    }

    /// A generator for worker `w`, from the scenario's seed.
    pub(crate) fn rng(&self, w: usize) -> StdRng {
        StdRng::seed_from_u64(self.seed.wrapping_mul(31).wrapping_add(w as u64 + 1))
    }

    /// Whether workers should stop.
    pub(crate) fn over(&self) -> bool {
        Instant::now() >= self.deadline
    }

    fn count(&self, fault: &'static str) {
        *lock(&self.faults).entry(fault).or_insert(0) += 1;
    }

    /// How many faults were injected so far.
    fn injected(&self) -> u32 {
        lock(&self.faults).values().sum()
    }

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

    /// Injects faults chosen from the seed until the deadline, heals them
    /// all, then waits for `workers`; a worker that does not finish within
    /// a minute, or panics, is a violation.
    pub(crate) async fn nemesis(
        &self,
        workers: Vec<tokio::task::JoinHandle<()>>,
    ) -> Vec<Violation> {
        let mut rng = StdRng::seed_from_u64(self.seed ^ 0x6e656d65);
        let ms =
            |rng: &mut StdRng, lo: u64, hi: u64| Duration::from_millis(rng.random_range(lo..hi));
        while !self.over() {
            tokio::time::sleep(ms(&mut rng, 100, 500)).await;
            let injected = self.injected();
            let proxy = &self.proxies[rng.random_range(0..self.proxies.len())];
            // Cuts after a forwarded command come most often: they make
            // outcomes unknown, which is where retries go wrong.
            match rng.random_range(0..20) {
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
                    let servers = self.world.servers();
                    let server = &servers[rng.random_range(0..servers.len())];
                    let longest = self.world.longest_pause().as_millis() as u64;
                    server.pause();
                    self.count("pause");
                    tokio::time::sleep(ms(&mut rng, 200, longest)).await;
                    server.resume();
                }
                _ => {
                    proxy.cut_all();
                    self.count("reset");
                }
            }
            if self.injected() > injected {
                lock(&self.healed).push(Instant::now());
            }
        }
        for proxy in &self.proxies {
            proxy.heal();
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

/// Runs scenario `name`: starts its world, runs `body` (which spawns the
/// workers, calls [`Env::nemesis`], then checks the history), prints its
/// row of the table, and fails on any violation, with the seed.
pub(crate) fn scenario<F, Fut>(name: &'static str, body: F)
where
    F: FnOnce(Arc<Env>) -> Fut,
    Fut: Future<Output = Vec<Violation>>,
{
    run(name, || World::One(RedisServer::start()), body);
}

/// As [`scenario`], on a Redis Cluster whose nodes are each behind a proxy.
pub(crate) fn cluster_scenario<F, Fut>(name: &'static str, body: F)
where
    F: FnOnce(Arc<Env>) -> Fut,
    Fut: Future<Output = Vec<Violation>>,
{
    run(name, || World::Cluster(RedisCluster::start()), body);
}

fn run<F, Fut>(name: &'static str, world: impl FnOnce() -> World, body: F)
where
    F: FnOnce(Arc<Env>) -> Fut,
    Fut: Future<Output = Vec<Violation>>,
{
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
    let base = base_seed();
    let seed = name.bytes().fold(base ^ 0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    let world = world();
    let proxies = world.proxies(seed);
    let env = Arc::new(Env {
        seed,
        history: Arc::new(History::new()),
        deadline: Instant::now() + duration(),
        world,
        proxies,
        faults: Mutex::new(BTreeMap::new()),
        healed: Mutex::new(Vec::new()),
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
    report(name, base, &env, elapsed, &violations);
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

/// Unavailability after each fault: from its end to the first answer
/// (of any operation invoked after it), in ms; the median and the worst.
fn recovery(ops: &[lock_tests::history::Op], healed: &[Instant]) -> (u128, u128) {
    let mut answered: Vec<(Instant, Instant)> = ops
        .iter()
        .filter(|op| matches!(op.outcome, Outcome::Ok(_)))
        .filter_map(|op| Some((op.invoke, op.complete?)))
        .collect();
    answered.sort_by_key(|&(_, done)| done);
    let mut waits: Vec<u128> = healed
        .iter()
        .filter_map(|&end| {
            let (_, done) = answered.iter().find(|&&(invoke, _)| invoke >= end)?;
            Some(done.duration_since(end).as_millis())
        })
        .collect();
    waits.sort_unstable();
    let p50 = waits.get(waits.len() / 2).copied().unwrap_or(0);
    (p50, waits.last().copied().unwrap_or(0))
}

fn report(name: &str, base: u64, env: &Env, elapsed: Duration, violations: &[Violation]) {
    let ops = env.history.ops();
    let (mut ok, mut busy, mut unknown) = (0, 0, 0);
    for op in &ops {
        match &op.outcome {
            Outcome::Ok(Reply::Busy | Reply::Decision(false, _)) => busy += 1,
            Outcome::Ok(_) => ok += 1,
            Outcome::Unknown(_) | Outcome::Fail(_) => unknown += 1,
            Outcome::Pending => {}
        }
    }
    let faults: Vec<String> = lock(&env.faults)
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    let kinds: Vec<String> = by_kind(violations)
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    let (p50, max) = recovery(&ops, &lock(&env.healed));
    HEADER.call_once(|| {
        println!(
            "nemesis | {:<15} | {:>10} | {:>5} | {:>6} {:>5} {:>5} {:>5} | {:<52} | {:>13} | violations",
            "scenario", "seed", "secs", "ops", "ok", "busy", "unkn", "faults", "recovery ms"
        );
    });
    println!(
        "nemesis | {name:<15} | {base:>10} | {:>5.1} | {:>6} {ok:>5} {busy:>5} {unknown:>5} | {:<52} | {:>13} | {}",
        elapsed.as_secs_f64(),
        ops.len(),
        faults.join(", "),
        format!("{p50} / {max}"),
        if kinds.is_empty() {
            "none".to_owned()
        } else {
            kinds.join(", ")
        }
    );
    if std::env::var_os("NEMESIS_DEBUG").is_some() {
        for op in &ops {
            if let Outcome::Unknown(e) | Outcome::Fail(e) = &op.outcome {
                println!(
                    "  unknown {:?} after {:?}: {}",
                    op.call,
                    op.complete.map(|c| c - op.invoke),
                    e.text
                );
            }
        }
    }
    // The first few of each kind, then how many more.
    let mut shown: BTreeMap<&str, usize> = BTreeMap::new();
    for v in violations {
        let n = shown.entry(v.kind).or_insert(0);
        *n += 1;
        if *n <= 5 {
            println!("  {v}");
        }
    }
    for (kind, n) in shown.into_iter().filter(|&(_, n)| n > 5) {
        println!("  [{kind}] ... and {} more", n - 5);
    }
}
