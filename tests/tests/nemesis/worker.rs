//! A workload's task: its client, its random choices, and the recording of
//! lock operations (acquire, hold, release) into the history.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_core::backend::AnyBackend;
use lock_core::lock::{LockBackend, LockGuard, MultiGuard};
use lock_tests::history::{Call, Grant, History, OpId, Recorded, Reply};
use rand::Rng;
use rand::rngs::StdRng;

use crate::env::{CLIENTS, Env, WORKERS};

/// A client whose lock calls are timed for the checker.
pub(crate) type Rec<B = AnyBackend> = Recorded<B>;
/// A guard taken through a [`Rec`].
pub(crate) type Guard<B = AnyBackend> = LockGuard<Rec<B>>;

/// One task of a workload, on a client of backend `B`.
pub(crate) struct Worker<B = AnyBackend> {
    /// Its number.
    pub(crate) id: usize,
    /// The scenario.
    pub(crate) env: Arc<Env>,
    /// Its random choices, from the scenario's seed.
    pub(crate) rng: StdRng,
    /// Its client (shared with the other workers of the same client).
    pub(crate) client: Rec<B>,
    calls: u64,
}

/// Connects the clients, each through its proxy.
pub(crate) async fn clients(env: &Env) -> Vec<Rec> {
    let mut clients = Vec::new();
    for i in 0..CLIENTS {
        clients.push(Recorded::new(env.client(i).await));
    }
    clients
}

/// Spawns [`WORKERS`] tasks running `body`, spread over `clients`.
pub(crate) fn spawn<B: Clone, F, Fut>(
    env: &Arc<Env>,
    clients: &[Rec<B>],
    body: F,
) -> Vec<tokio::task::JoinHandle<()>>
where
    F: Fn(Worker<B>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    spawn_from(env, clients, 0, body)
}

/// As [`spawn`], numbering the workers from `first` (for a second
/// workload in the same scenario).
pub(crate) fn spawn_from<B: Clone, F, Fut>(
    env: &Arc<Env>,
    clients: &[Rec<B>],
    first: usize,
    body: F,
) -> Vec<tokio::task::JoinHandle<()>>
where
    F: Fn(Worker<B>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    (first..first + WORKERS)
        .map(|id| {
            let worker = Worker {
                id,
                env: env.clone(),
                rng: env.rng(id),
                client: clients[id % clients.len()].clone(),
                calls: 0,
            };
            tokio::spawn(body(worker))
        })
        .collect()
}

impl<B: LockBackend> Worker<B> {
    fn history(&self) -> &History {
        &self.env.history
    }

    /// A name no other call uses (owners, operation ids, orders).
    pub(crate) fn fresh(&mut self) -> String {
        self.calls += 1;
        format!("w{}-{}-{}", self.id, self.calls, self.env.seed % 10_000)
    }

    /// A random duration in `lo..hi` milliseconds.
    pub(crate) fn ms(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(self.rng.random_range(lo..hi))
    }

    /// How long to wait for a lock: often not at all, else up to a second.
    pub(crate) fn wait(&mut self) -> Duration {
        if self.rng.random_bool(0.4) {
            Duration::ZERO
        } else {
            self.ms(0, 1000)
        }
    }

    /// How long to hold a lock: mostly briefly, sometimes past a fixed lease.
    pub(crate) fn hold_time(&mut self) -> Duration {
        if self.rng.random_bool(0.15) {
            self.ms(500, 1300)
        } else {
            self.ms(0, 300)
        }
    }

    /// A short pause between operations.
    pub(crate) async fn pause(&mut self) {
        let d = self.ms(0, 30);
        tokio::time::sleep(d).await;
    }

    /// The grant of `guard` as it stands now.
    fn grant(guard: &Guard<B>, returned_lost: Option<String>) -> Grant {
        let at = Instant::now();
        Grant {
            fence: guard.fencing_token(),
            valid_until: at + guard.valid_for(),
            returned_lost,
        }
    }

    /// Records an acquisition of `lock` for `owner` made by `call`: a
    /// guard (returned with its op), busy, or an error.
    pub(crate) async fn acquire(
        &mut self,
        lock: &str,
        owner: &str,
        shared: bool,
        permits: u32,
        lease: Duration,
        call: impl Future<Output = lock_core::Result<Option<Guard<B>>>>,
    ) -> Option<(OpId, Guard<B>)> {
        let call_of = Call::Acquire {
            lock: lock.to_owned(),
            owner: owner.to_owned(),
            shared,
            permits,
        };
        let op = self.history().invoke(self.id, call_of);
        match call.await {
            Ok(Some(guard)) => {
                let lost = self.client.lost_before_return(&[(guard.token(), lease)]);
                let grant = Self::grant(&guard, lost.map(|(_, why)| why));
                self.history().ok(op, Reply::Granted(grant));
                Some((op, guard))
            }
            Ok(None) => {
                self.history().ok(op, Reply::Busy);
                None
            }
            Err(e) => {
                self.history().error(op, &e);
                None
            }
        }
    }

    /// Records an acquisition of several locks at once (one op per lock,
    /// `locks` in the order the guards come back), each for a fresh owner.
    pub(crate) async fn acquire_multi(
        &mut self,
        locks: &[String],
        lease: Duration,
        call: impl Future<Output = lock_core::Result<Option<MultiGuard<Rec<B>>>>>,
    ) -> Option<(Vec<OpId>, MultiGuard<Rec<B>>)> {
        let ops: Vec<OpId> = locks
            .iter()
            .map(|lock| {
                let owner = self.fresh();
                let call = Call::Acquire {
                    lock: lock.clone(),
                    owner,
                    shared: false,
                    permits: 1,
                };
                self.history().invoke(self.id, call)
            })
            .collect();
        match call.await {
            Ok(Some(multi)) => {
                let tokens: Vec<(&str, Duration)> =
                    multi.guards().iter().map(|g| (g.token(), lease)).collect();
                let mut lost = self.client.lost_before_return(&tokens);
                for (i, (op, guard)) in ops.iter().zip(multi.guards()).enumerate() {
                    let why = lost.take_if(|(at, _)| *at == i).map(|(_, why)| why);
                    self.history()
                        .ok(*op, Reply::Granted(Self::grant(guard, why)));
                }
                Some((ops, multi))
            }
            outcome => {
                for op in &ops {
                    match &outcome {
                        Ok(_) => self.history().ok(*op, Reply::Busy),
                        Err(e) => self.history().error(*op, e),
                    }
                }
                None
            }
        }
    }

    /// Records how long `guard` (granted by `op`) says its lease still runs.
    pub(crate) fn observe(&self, op: OpId, guard: &Guard<B>) {
        let at = Instant::now();
        let left = guard.valid_for();
        if !left.is_zero() {
            self.history().valid_until(op, at + left);
        }
    }

    /// Holds the guards for `d`, noting their leases as the watchdogs renew them.
    pub(crate) async fn hold(&mut self, held: &[(OpId, &Guard<B>)], d: Duration) {
        let end = Instant::now() + d;
        loop {
            for (op, guard) in held {
                self.observe(*op, guard);
            }
            let now = Instant::now();
            if now >= end {
                return;
            }
            tokio::time::sleep((end - now).min(Duration::from_millis(50))).await;
        }
    }

    /// Releases `guard` (granted by `op`), or sometimes drops it (a release
    /// in the background, whose answer nobody hears).
    pub(crate) async fn release(&mut self, op: OpId, guard: Guard<B>) {
        self.observe(op, &guard);
        let release = self.history().invoke(self.id, Call::Release(vec![op]));
        if self.rng.random_bool(0.15) {
            drop(guard);
            return;
        }
        let answer = guard.release().await;
        self.history()
            .record(release, &answer, |held| Reply::Released(*held));
    }

    /// Releases every lock of `multi` (granted by `ops`).
    pub(crate) async fn release_multi(&mut self, ops: &[OpId], multi: MultiGuard<Rec<B>>) {
        for (op, guard) in ops.iter().zip(multi.guards()) {
            self.observe(*op, guard);
        }
        let release = self.history().invoke(self.id, Call::Release(ops.to_vec()));
        let answer = multi.release().await;
        self.history()
            .record(release, &answer, |held| Reply::Released(*held));
    }
}
