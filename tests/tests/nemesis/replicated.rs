//! Workloads whose promise rests on more than one server: Redlock over
//! five (a minority killed and restarted with their data), and a fair lock
//! whose grants wait for a replica the nemesis pauses; plain locks and
//! stock through a Sentinel that fails over, writes waiting for the
//! replica.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_core::lock::{Lock, LockOptions, Redlock};
use lock_tests::history::locks::{self, Exclusion};
use lock_tests::history::{Call, Recorded, Reply, Violation};
use rand::Rng;

use crate::counters::{stock_check, stock_setup, stock_workers};
use crate::env::{CLIENTS, Env, lock};
use crate::locks::{exclusive_with, exclusive_workers};
use crate::processes::{self, Workload};
use crate::worker::{Rec, Worker, clients, spawn};

/// Redlock: plain locks (no fencing: N counters give no one order) with
/// a fixed lease and with a watchdog, over five servers each behind a
/// proxy. Its servers keep their data across a kill, so two holders at
/// once are a violation whatever the nemesis did.
pub(crate) async fn redlock(env: Arc<Env>) -> Vec<Violation> {
    let mut clients: Vec<Rec<Redlock>> = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(Recorded::new(env.redlock().await));
    }
    let mut workers = spawn(&env, &clients, move |mut w: Worker<Redlock>| async move {
        let locks = [
            (
                "redlock-fixed",
                LockOptions::new().lease(Duration::from_millis(1000)),
            ),
            (
                "redlock-watch",
                LockOptions::new().watchdog(Duration::from_millis(1500)),
            ),
        ]
        .map(|(name, options)| Lock::with_options(w.client.clone(), name, options).expect("lock"));
        while !w.env.over() {
            let lock = &locks[w.rng.random_range(0..locks.len())];
            let (id, owner, wait) = (
                format!("redlock:{}", lock.name().as_str()),
                w.fresh(),
                w.wait(),
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
    });
    workers.extend(processes::spawn(&env, Workload::Redlock).await);
    let mut found = env.nemesis(workers).await;
    found.extend(locks::check(&env.history, |_| Exclusion::Exclusive));
    found
}

/// A fair lock (fencing on) on a master whose writes wait for its one
/// replica (`sync_replicas(1, 300 ms)`), while the nemesis pauses the
/// replica: besides exclusion, no guard may come back from an acquire
/// that ran wholly while the replica was paused, since no grant made in
/// it can have been confirmed (every grant path: direct and handed off).
pub(crate) async fn replica_sync(env: Arc<Env>) -> Vec<Violation> {
    let mut found = exclusive_with(env.clone(), true, |w| {
        // Short waits: an acquire that fits inside a pause.
        if w.rng.random_bool(0.5) {
            Duration::ZERO
        } else {
            w.ms(0, 500)
        }
    })
    .await;
    found.extend(unconfirmed(&env));
    found
}

/// Plain locks with fencing and stock (with and without operation ids)
/// at once, through a Sentinel, writes waiting for the replica
/// (`sync_replicas(1, 500 ms)`), while the nemesis pauses the replica and
/// fails over: no double holder, fencing tokens rise, no guard from an
/// acquire wholly inside a pause, and stock conserved (a confirmed write
/// is on the replica, so the promoted one has it).
pub(crate) async fn sentinel_synced(env: Arc<Env>) -> Vec<Violation> {
    stock_setup(&env).await;
    let clients = clients(&env).await;
    let mut workers = exclusive_workers(&env, &clients, 0, false, Worker::wait);
    workers.extend(stock_workers(&env, &clients, crate::env::WORKERS));
    workers.extend(processes::spawn(&env, Workload::Exclusive { fair: false }).await);
    let second = processes::spawn_from(&env, Workload::Stock, 100).await;
    workers.extend(second);
    let mut found = env.nemesis(workers).await;
    found.extend(locks::check(&env.history, |_| Exclusion::Exclusive));
    found.extend(unconfirmed(&env));
    found.extend(stock_check(&env).await);
    found
}

/// Guards returned by an acquire invoked after the replica was surely
/// paused and answered before it was surely resumed.
fn unconfirmed(env: &Env) -> Vec<Violation> {
    let paused: Vec<(Instant, Instant)> = lock(&env.paused)
        .iter()
        .map(|&(_, from, until)| (from, until))
        .collect();
    let history = &env.history;
    let mut found = Vec::new();
    for (id, op) in history.ops().iter().enumerate() {
        let (Call::Acquire { lock, .. }, Some(Reply::Granted(grant)), Some(done)) =
            (&op.call, op.reply(), op.complete)
        else {
            continue;
        };
        if let Some((from, until)) = paused
            .iter()
            .find(|&&(from, until)| from <= op.invoke && done <= until)
        {
            found.push(Violation::new(
                "unconfirmed-grant",
                format!(
                    "{lock}: op {id} (worker {}, fence {:?}) asked at {:.0} ms and granted at \
                     {:.0} ms, while the replica was paused ({:.0}..{:.0} ms)",
                    op.worker,
                    grant.fence,
                    history.ms(op.invoke),
                    history.ms(done),
                    history.ms(*from),
                    history.ms(*until),
                ),
            ));
        }
    }
    found
}
