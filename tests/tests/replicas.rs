//! Replica safety on a master with one replica: with `sync_replicas`, a
//! lock or stock write counts only once the replica confirmed it, a slow
//! `WAIT` holds no one else's commands, and a master short of replicas
//! (`min-replicas-to-write`) refuses writes with a typed error.

use std::time::{Duration, Instant};

use lock_core::Error;
use lock_core::backend::RedisBackend;
use lock_core::counter::{Purchase, Stock};
use lock_core::lock::{Lock, LockOptions};
use lock_tests::cluster::info;
use lock_tests::{RedisServer, ServerOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn synced_writes_wait_for_the_replica() {
    let (master, replica) = lock_tests::master_and_replica();
    let backend = RedisBackend::connect(&master.url()).await.expect("connect");
    let synced = backend.clone().sync_replicas(1, Duration::from_millis(800));
    let options = LockOptions::new().lease(Duration::from_secs(30));
    let lock = Lock::with_options(synced.clone(), "payout", options).expect("valid");
    let stock = Stock::new(synced.clone());

    // With the replica up, synced writes go through.
    let guard = lock
        .try_lock()
        .await
        .expect("confirmed by the replica")
        .expect("free");
    assert!(guard.release().await.expect("backend"));
    stock.set("sku", 10).await.expect("set, confirmed");

    replica.pause();
    // A synced acquire waits for the replica; meanwhile the shared
    // connection answers everyone else at once.
    let waiting = {
        let lock = lock.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            (lock.try_lock().await, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let others = Instant::now();
    for i in 0..20 {
        let other = Lock::new(backend.clone(), format!("other-{i}")).expect("valid");
        let guard = other.try_lock().await.expect("backend").expect("free");
        assert!(guard.release().await.expect("backend"));
    }
    let others = others.elapsed();
    let (refused, took) = waiting.await.expect("join");
    match refused {
        Err(Error::NotReplicated {
            acknowledged: 0,
            needed: 1,
        }) => {}
        other => panic!("expected NotReplicated, got {other:?}"),
    }
    assert!(took >= Duration::from_millis(700), "gave up after {took:?}");
    assert!(
        others < Duration::from_millis(500),
        "other callers waited {others:?} behind a WAIT"
    );
    // The unconfirmed lock was given back.
    let free = Lock::new(backend.clone(), "payout")
        .expect("valid")
        .try_lock()
        .await
        .expect("backend");
    assert!(free.is_some(), "the unconfirmed lock was left held");
    drop(free);

    // A stock write stays made, says so, and its retry replays it.
    match stock.decrement_once("sku", 1, "order-1").await {
        Err(Error::NotReplicated {
            acknowledged: 0,
            needed: 1,
        }) => {}
        other => panic!("expected NotReplicated, got {other:?}"),
    }
    replica.resume();
    let retry = lock_tests::eventually(Duration::from_secs(5), async || {
        matches!(
            stock.decrement_once("sku", 1, "order-1").await,
            Ok(Purchase::Done {
                remaining: 9,
                replayed: true
            })
        )
    })
    .await;
    assert!(retry, "the retry did not replay the first decrement");
    assert_eq!(stock.get("sku").await.expect("get"), Some(9));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_short_of_replicas_refuses_writes() {
    let master =
        RedisServer::start_with(ServerOptions::new().arg("--min-replicas-to-write").arg("1"));
    let backend = RedisBackend::connect(&master.url()).await.expect("connect");
    let lock = Lock::new(backend.clone(), "guarded").expect("valid");
    assert!(
        matches!(lock.try_lock().await, Err(Error::NoReplicas)),
        "a lock without replicas"
    );
    let stock = Stock::new(backend);
    assert!(matches!(stock.set("sku", 1).await, Err(Error::NoReplicas)));
    assert!(Error::NoReplicas.is_backend_failure());
}

/// A fair lock handed over by a release (a grant made inside someone
/// else's script, which no replica was asked to confirm) counts only once
/// the replica has it: with the replica cut off, the waiter gets
/// `NotReplicated`, not a guard a failover could grant again, and the lock
/// is given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_handoff_waits_for_the_replica() {
    let (master, replica) = lock_tests::master_and_replica();
    let backend = RedisBackend::connect(&master.url()).await.expect("connect");
    // Long enough for a healthy replica on a loaded machine (300 ms once
    // failed the first grant): the paused one never answers in time.
    let synced = backend.clone().sync_replicas(1, Duration::from_secs(2));
    let options = LockOptions::new().lease(Duration::from_secs(30)).fair(true);
    let lock = Lock::with_options(synced.clone(), "fair-payout", options).expect("valid");
    let holder = lock.try_lock().await.expect("backend").expect("free");
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.lock(Duration::from_secs(10)).await })
    };
    // The waiter joins the line, then the replica is cut off and the
    // holder's release hands the lock over.
    tokio::time::sleep(Duration::from_millis(500)).await;
    replica.pause();
    assert!(holder.release().await.expect("backend"));
    let outcome = waiter.await.expect("join");
    replica.resume();
    match outcome {
        Err(Error::NotReplicated { needed: 1, .. }) => {}
        Ok(Some(guard)) => panic!(
            "a handoff no replica confirmed was returned as a guard (valid for {:?})",
            guard.valid_for()
        ),
        other => panic!("expected NotReplicated, got {other:?}"),
    }
    // Given back: free for the next caller at once.
    let plain = Lock::with_options(backend, "fair-payout", options).expect("valid");
    let next = plain.try_lock().await.expect("backend");
    assert!(next.is_some(), "the unconfirmed handoff was left held");
}

/// A master demoted while a synced write waits for its replica answers
/// `-UNBLOCKED` to the `WAIT`: the write is not replicated (a typed
/// `NotReplicated`), and the connection Redis closed is not used again.
/// A master that does not answer at all gives `Error::Timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn synced_writes_fail_with_typed_errors() {
    let (master, replica) = lock_tests::master_and_replica();
    let backend = RedisBackend::connect(&master.url()).await.expect("connect");
    let synced = backend.clone().sync_replicas(1, Duration::from_secs(5));
    let stock = Stock::new(synced.clone());
    stock.set("sku", 10).await.expect("confirmed");

    replica.pause();
    let waiting = {
        let stock = stock.clone();
        tokio::spawn(async move { stock.decrement_once("sku", 1, "order-1").await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Demote the master under the waiting write (to a port nobody serves).
    let mut admin = master.connection();
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg("1")
        .query(&mut admin)
        .expect("REPLICAOF");
    match waiting.await.expect("join") {
        Err(Error::NotReplicated { needed: 1, .. }) => {}
        other => panic!("expected NotReplicated after a demotion, got {other:?}"),
    }
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut admin)
        .expect("REPLICAOF NO ONE");
    replica.resume();
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(master.port().to_string())
        .query(&mut replica.connection())
        .expect("REPLICAOF");
    let deadline = Instant::now() + Duration::from_secs(20);
    while info(&replica, "replication", "master_link_status").as_deref() != Some("up") {
        assert!(
            Instant::now() < deadline,
            "the replica never caught up again"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Every connection of the synced-write pool works again.
    for i in 0..10 {
        stock
            .set(&format!("sku-{i}"), 1)
            .await
            .unwrap_or_else(|e| panic!("a synced write after the demotion: {e:?}"));
    }

    // A master that does not answer: the typed timeout.
    master.pause();
    let paused = stock.set("sku", 3).await;
    master.resume();
    match paused {
        Err(Error::Timeout(_)) => {}
        other => panic!("expected Error::Timeout from a paused master, got {other:?}"),
    }
}
