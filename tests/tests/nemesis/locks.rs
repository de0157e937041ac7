//! Lock workloads: plain and fair locks with fencing, reentrant and fair
//! reentrant locks, read-write locks, semaphores and multi-locks, each
//! with a fixed lease and with a watchdog.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use lock_core::lock::{
    Lock, LockOptions, MultiLock, Owner, ReadWriteLock, ReentrantLock, Semaphore,
};
use lock_tests::history::Violation;
use lock_tests::history::locks::{self, Exclusion};
use rand::Rng;
use rand::rngs::StdRng;

use crate::env::Env;
use crate::processes::{self, Workload};
use crate::worker::{Rec, Worker, clients, spawn, spawn_from};

const FIXED: Duration = Duration::from_millis(700);
const WATCHDOG: Duration = Duration::from_millis(1500);

/// The two leases every kind is tried with, and the names used for them.
fn leases(name: &str, fair: bool) -> [(String, LockOptions); 2] {
    let base = LockOptions::new().fencing(true).fair(fair);
    [
        (format!("{name}-fixed"), base.lease(FIXED)),
        (format!("{name}-watch"), base.watchdog(WATCHDOG)),
    ]
}

/// Plain (or fair) locks with fencing tokens: take, hold, release.
pub(crate) async fn exclusive(env: Arc<Env>, fair: bool) -> Vec<Violation> {
    exclusive_with(env, fair, Worker::wait).await
}

/// As [`exclusive`], waiting for the lock as long as `wait` says.
pub(crate) async fn exclusive_with(
    env: Arc<Env>,
    fair: bool,
    wait: fn(&mut Worker) -> Duration,
) -> Vec<Violation> {
    let clients = clients(&env).await;
    let mut workers = exclusive_workers(&env, &clients, 0, fair, wait);
    workers.extend(processes::spawn(&env, Workload::Exclusive { fair }).await);
    let mut found = env.nemesis(workers).await;
    found.extend(locks::check(&env.history, |_| Exclusion::Exclusive));
    found
}

/// The workers of [`exclusive_with`], numbered from `first`.
pub(crate) fn exclusive_workers(
    env: &Arc<Env>,
    clients: &[Rec],
    first: usize,
    fair: bool,
    wait: fn(&mut Worker) -> Duration,
) -> Vec<tokio::task::JoinHandle<()>> {
    let kind = if fair { "fair" } else { "plain" };
    spawn_from(env, clients, first, move |mut w: Worker| async move {
        let locks = leases(kind, fair).map(|(name, options)| {
            Lock::with_options(w.client.clone(), name, options).expect("lock")
        });
        while !w.env.over() {
            let lock = &locks[w.rng.random_range(0..locks.len())];
            let (id, owner, wait) = (
                format!("{kind}:{}", lock.name().as_str()),
                w.fresh(),
                wait(&mut w),
            );
            let lease = lock.options().get_lease().duration();
            if let Some((op, guard)) = w
                .acquire(&id, &owner, false, 1, lease, lock.lock(wait))
                .await
            {
                let d = w.hold_time();
                w.hold(&[(op, &guard)], d).await;
                w.release(op, guard).await;
            }
            w.pause().await;
        }
    })
}

/// Reentrant (or fair reentrant) locks: an owner takes the lock, often
/// re-enters it, and releases in either order. With `fair`, a plain lock
/// of the same name is taken too: it shares the fencing counter, so a
/// re-entry that reads the counter instead of its holding's token shows.
pub(crate) async fn reentrant(env: Arc<Env>, fair: bool) -> Vec<Violation> {
    let clients = clients(&env).await;
    let kind = if fair { "fair-reentrant" } else { "reentrant" };
    let mut workers = spawn(&env, &clients, move |mut w: Worker| async move {
        let locks = leases(kind, fair).map(|(name, options)| {
            ReentrantLock::with_options(w.client.clone(), name, options).expect("lock")
        });
        let plain = leases(kind, false).map(|(name, options)| {
            Lock::with_options(w.client.clone(), name, options).expect("lock")
        });
        while !w.env.over() {
            let i = w.rng.random_range(0..locks.len());
            let (lock, wait) = (&locks[i], w.wait());
            let lease = leases(kind, fair)[i].1.get_lease().duration();
            if fair && w.rng.random_bool(0.3) {
                let (id, owner) = (format!("plain:{}", plain[i].name().as_str()), w.fresh());
                if let Some((op, guard)) = w
                    .acquire(&id, &owner, false, 1, lease, plain[i].lock(wait))
                    .await
                {
                    let d = w.ms(0, 100);
                    w.hold(&[(op, &guard)], d).await;
                    w.release(op, guard).await;
                }
                continue;
            }
            let owner = Owner::from_id(w.fresh()).expect("owner");
            let id = format!("{kind}:{}", lock.name().as_str());
            let Some((outer_op, outer)) = w
                .acquire(&id, owner.id(), false, 1, lease, lock.lock(&owner, wait))
                .await
            else {
                w.pause().await;
                continue;
            };
            let d = w.ms(0, 150);
            w.hold(&[(outer_op, &outer)], d).await;
            if w.rng.random_bool(0.6) {
                let inner = w
                    .acquire(&id, owner.id(), false, 1, lease, lock.try_lock(&owner))
                    .await;
                if let Some((inner_op, inner)) = inner {
                    let d = w.hold_time();
                    w.hold(&[(outer_op, &outer), (inner_op, &inner)], d).await;
                    if w.rng.random_bool(0.5) {
                        w.release(inner_op, inner).await;
                    } else {
                        w.release(outer_op, outer).await;
                        w.release(inner_op, inner).await;
                        w.pause().await;
                        continue;
                    }
                }
            }
            w.release(outer_op, outer).await;
            w.pause().await;
        }
    });
    workers.extend(processes::spawn(&env, Workload::Reentrant { fair }).await);
    let mut found = env.nemesis(workers).await;
    found.extend(locks::check(&env.history, |_| Exclusion::Exclusive));
    found
}

/// Read-write locks: mostly readers; writers sometimes take the read side
/// too (the same owner).
pub(crate) async fn read_write(env: Arc<Env>) -> Vec<Violation> {
    let clients = clients(&env).await;
    let mut workers = spawn(&env, &clients, move |mut w: Worker| async move {
        let locks = leases("rw", false).map(|(name, options)| {
            ReadWriteLock::with_options(w.client.clone(), name, options).expect("lock")
        });
        while !w.env.over() {
            let i = w.rng.random_range(0..locks.len());
            let (lock, wait) = (&locks[i], w.wait());
            let lease = leases("rw", false)[i].1.get_lease().duration();
            let id = format!("rw:{}", lock.name().as_str());
            let owner = Owner::from_id(w.fresh()).expect("owner");
            if w.rng.random_bool(0.65) {
                if let Some((op, guard)) = w
                    .acquire(&id, owner.id(), true, 1, lease, lock.read(&owner, wait))
                    .await
                {
                    let d = w.hold_time();
                    w.hold(&[(op, &guard)], d).await;
                    w.release(op, guard).await;
                }
            } else if let Some((op, guard)) = w
                .acquire(&id, owner.id(), false, 1, lease, lock.write(&owner, wait))
                .await
            {
                let d = w.hold_time();
                w.hold(&[(op, &guard)], d).await;
                if w.rng.random_bool(0.4)
                    && let Some((read_op, read)) = w
                        .acquire(&id, owner.id(), true, 1, lease, lock.try_read(&owner))
                        .await
                {
                    let d = w.ms(0, 100);
                    w.hold(&[(op, &guard), (read_op, &read)], d).await;
                    w.release(read_op, read).await;
                }
                w.release(op, guard).await;
            }
            w.pause().await;
        }
    });
    workers.extend(processes::spawn(&env, Workload::ReadWrite).await);
    let mut found = env.nemesis(workers).await;
    found.extend(locks::check(&env.history, |_| Exclusion::ReadWrite));
    found
}

/// Semaphores of three permits: one permit at a time, or several at once.
pub(crate) async fn semaphore(env: Arc<Env>) -> Vec<Violation> {
    const PERMITS: u32 = 3;
    let clients = clients(&env).await;
    let mut workers = spawn(&env, &clients, move |mut w: Worker| async move {
        let permits = NonZeroU32::new(PERMITS).expect("nonzero");
        let sems = leases("sem", false).map(|(name, options)| {
            Semaphore::with_options(w.client.clone(), name, permits, options.fencing(false))
                .expect("semaphore")
        });
        while !w.env.over() {
            let i = w.rng.random_range(0..sems.len());
            let (sem, wait) = (&sems[i], w.wait());
            let lease = leases("sem", false)[i].1.get_lease().duration();
            let (id, owner) = (format!("sem:{}", sem.name().as_str()), w.fresh());
            let n = if w.rng.random_bool(0.6) {
                1
            } else {
                w.rng.random_range(2..=PERMITS)
            };
            let many = NonZeroU32::new(n).expect("nonzero");
            let held = if n == 1 && w.rng.random_bool(0.5) {
                w.acquire(&id, &owner, false, 1, lease, sem.acquire(wait))
                    .await
            } else {
                w.acquire(&id, &owner, false, n, lease, sem.acquire_many(many, wait))
                    .await
            };
            if let Some((op, guard)) = held {
                let d = w.hold_time();
                w.hold(&[(op, &guard)], d).await;
                w.release(op, guard).await;
            }
            w.pause().await;
        }
    });
    workers.extend(processes::spawn(&env, Workload::Semaphore).await);
    let mut found = env.nemesis(workers).await;
    found.extend(locks::check(&env.history, |_| Exclusion::Permits(PERMITS)));
    found
}

/// The multi-locks' short fixed lease.
pub(crate) const MULTI_LEASE: Duration = Duration::from_millis(400);
/// The names multi-locks take sets of.
pub(crate) const MULTI_NAMES: [&str; 3] = ["m-a", "m-b", "m-c"];

/// Two or three of [`MULTI_NAMES`], at random.
pub(crate) fn multi_names(rng: &mut StdRng) -> Vec<&'static str> {
    let names: Vec<&str> = MULTI_NAMES
        .into_iter()
        .filter(|_| rng.random_bool(0.7))
        .collect();
    if names.len() < 2 {
        return MULTI_NAMES.to_vec();
    }
    names
}

/// Multi-locks with a short fixed lease over overlapping sets of names,
/// against single holders of those names that keep them a while.
pub(crate) async fn multi(env: Arc<Env>) -> Vec<Violation> {
    const LEASE: Duration = MULTI_LEASE;
    const NAMES: [&str; 3] = MULTI_NAMES;
    let clients = clients(&env).await;
    let mut workers = spawn(&env, &clients, move |mut w: Worker| async move {
        let options = LockOptions::new().lease(LEASE).fencing(true);
        let single = LockOptions::new()
            .watchdog(Duration::from_millis(1000))
            .fencing(true);
        while !w.env.over() {
            if w.id.is_multiple_of(2) {
                let names = multi_names(&mut w.rng);
                let multi =
                    MultiLock::with_options(w.client.clone(), &names, options).expect("multi");
                let ids: Vec<String> = multi
                    .locks()
                    .iter()
                    .map(|l| format!("plain:{}", l.name().as_str()))
                    .collect();
                let wait = w.ms(0, 2000);
                if let Some((ops, held)) = w.acquire_multi(&ids, LEASE, multi.lock(wait)).await {
                    let d = w.ms(0, 200);
                    let guards: Vec<_> = ops.iter().copied().zip(held.guards()).collect();
                    w.hold(&guards, d).await;
                    w.release_multi(&ops, held).await;
                }
            } else {
                let name = NAMES[w.rng.random_range(0..NAMES.len())];
                let lock = Lock::with_options(w.client.clone(), name, single).expect("lock");
                let (owner, wait) = (w.fresh(), w.wait());
                let id = format!("plain:{name}");
                if let Some((op, guard)) = w
                    .acquire(
                        &id,
                        &owner,
                        false,
                        1,
                        Duration::from_millis(1000),
                        lock.lock(wait),
                    )
                    .await
                {
                    let d = w.ms(200, 900);
                    w.hold(&[(op, &guard)], d).await;
                    w.release(op, guard).await;
                }
            }
            w.pause().await;
        }
    });
    workers.extend(processes::spawn(&env, Workload::Multi).await);
    let mut found = env.nemesis(workers).await;
    found.extend(locks::check(&env.history, |_| Exclusion::Exclusive));
    found
}
