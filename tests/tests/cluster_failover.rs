//! Failovers on a real Redis Cluster (one cluster for the binary, used in
//! order: graceful failovers first, a lossy one last): work goes on through
//! a graceful failover with no error and no double holder, lock waiters
//! keep being woken after their channel's node fails over, a write too few
//! replicas confirmed is refused with `sync_replicas`, and fencing tokens
//! keep growing across a failover that lost the last grant.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lock_core::Error;
use lock_core::backend::ClusterBackend;
use lock_core::lock::{Lock, LockOptions};
use lock_tests::cluster::{Failover, RedisCluster};
use lock_tests::within;

/// Four tasks take one lock, do a read-modify-write under it, and let go,
/// over and over, while the lock's master hands over to its replica:
/// 1,000+ sections, no error, no two holders at once, no lost update.
async fn work_goes_on_through_a_graceful_failover(
    cluster: &RedisCluster,
    backend: &ClusterBackend,
) {
    let backend = backend.with_prefix("graceful:").expect("prefix");
    let master = cluster.master_of("graceful:{busy}:lock");
    let replica = cluster.replica_of(master);
    let (count, inside, errors) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let lock = Lock::with_options(
                backend.clone(),
                "busy",
                LockOptions::new().lease(Duration::from_secs(10)),
            )
            .expect("valid");
            let (count, inside, errors, stop) =
                (count.clone(), inside.clone(), errors.clone(), stop.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::SeqCst) || count.load(Ordering::SeqCst) < 1000 {
                    match lock.lock(Duration::from_secs(30)).await {
                        Ok(Some(guard)) => {
                            assert_eq!(
                                inside.fetch_add(1, Ordering::SeqCst),
                                0,
                                "two holders at once"
                            );
                            let seen = count.load(Ordering::SeqCst);
                            tokio::task::yield_now().await;
                            count.store(seen + 1, Ordering::SeqCst);
                            inside.fetch_sub(1, Ordering::SeqCst);
                            if let Err(error) = guard.release().await {
                                eprintln!("release error during the failover: {error}");
                                errors.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                        Ok(None) => panic!("busy for 30 s"),
                        Err(error) => {
                            eprintln!("error during the failover: {error}");
                            errors.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                }
            })
        })
        .collect();
    while count.load(Ordering::SeqCst) < 300 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let failover = tokio::task::spawn_blocking({
        let urls = cluster.urls();
        move || {
            let _ = urls;
        }
    });
    failover.await.expect("join");
    cluster.failover(replica, Failover::Graceful);
    stop.store(true, Ordering::SeqCst);
    for task in tasks {
        task.await.expect("a task panicked");
    }
    let done = count.load(Ordering::SeqCst);
    eprintln!("{done} sections through the failover");
    assert!(done >= 1000);
    assert_eq!(
        errors.load(Ordering::SeqCst),
        0,
        "errors through a graceful failover"
    );
    assert_eq!(cluster.master_of("graceful:{busy}:lock"), replica);
}

/// A waiter subscribed to a lock's channel goes on being woken by releases
/// after the node that owns the channel failed over (30 s leases: only the
/// release message can wake it in time).
async fn waiters_are_woken_after_their_node_fails_over(
    cluster: &RedisCluster,
    backend: &ClusterBackend,
) {
    let backend = backend.with_prefix("moved:").expect("prefix");
    let options = LockOptions::new().lease(Duration::from_secs(30));
    let lock = Lock::with_options(backend, "followed", options).expect("valid");
    let holder = lock.try_lock().await.expect("backend").expect("free");
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.lock(Duration::from_secs(25)).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let master = cluster.master_of("moved:{followed}:lock");
    cluster.failover(cluster.replica_of(master), Failover::Graceful);
    // The waiter resubscribed on the new owner.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let woken = within(Duration::from_secs(3), "waking after the release", async {
        assert!(holder.release().await.expect("backend"));
        waiter.await.expect("join")
    })
    .await;
    assert!(
        woken.expect("backend").is_some(),
        "the waiter never got the lock"
    );
}

/// With `sync_replicas(1, ...)`, an acquire that no replica confirmed
/// (its replica is cut off) fails with the typed error and leaves the lock
/// free, where without it the lock is granted.
async fn an_unreplicated_lock_is_refused(cluster: &RedisCluster, backend: &ClusterBackend) {
    let plain = backend.with_prefix("synced:").expect("prefix");
    let synced = plain.clone().sync_replicas(1, Duration::from_millis(500));
    let master = cluster.master_of("synced:{payout}:lock");
    let replica = cluster.replica_of(master);
    let confirmed = Lock::new(synced.clone(), "payout").expect("valid");
    let guard = confirmed
        .try_lock()
        .await
        .expect("a replica confirms it")
        .expect("free");
    assert!(guard.release().await.expect("backend"));
    cluster.cut_replica(replica);
    let started = Instant::now();
    let refused = confirmed.try_lock().await;
    let took = started.elapsed();
    let still_free = Lock::new(plain.clone(), "payout")
        .expect("valid")
        .try_lock()
        .await;
    cluster.reconnect_replica(replica);
    match refused {
        Err(Error::NotReplicated {
            acknowledged: 0,
            needed: 1,
        }) => {}
        other => panic!("expected NotReplicated, got {other:?}"),
    }
    assert!(took < Duration::from_secs(2), "the refusal took {took:?}");
    let free = still_free
        .expect("backend")
        .expect("the refused lock was left held");
    assert!(free.release().await.expect("backend"));
}

/// A lock taken while its replica was cut off, then the master killed and
/// the replica promoted: the new master never saw the grant, so another
/// client takes the same lock, but its fencing token is still larger.
async fn tokens_grow_across_a_lossy_failover(cluster: &mut RedisCluster, backend: &ClusterBackend) {
    let backend = backend.with_prefix("lossy:").expect("prefix");
    let options = LockOptions::new()
        .lease(Duration::from_secs(30))
        .fencing(true);
    let lock = Lock::with_options(backend.clone(), "ledger", options).expect("valid");
    let master = cluster.master_of("lossy:{ledger}:lock");
    let replica = cluster.replica_of(master);
    // Earlier grants, which the replica has.
    for _ in 0..3 {
        let guard = lock.try_lock().await.expect("backend").expect("free");
        assert!(guard.release().await.expect("backend"));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    cluster.cut_replica(replica);
    let first = lock.try_lock().await.expect("backend").expect("free");
    let first_token = first.fencing_token().expect("a token");
    cluster.node(master).kill();
    cluster.reconnect_replica(replica);
    cluster.failover(replica, Failover::Takeover);
    let second = lock_tests::eventually(Duration::from_secs(15), async || {
        matches!(lock.try_lock().await, Ok(Some(_)))
    })
    .await;
    assert!(second, "the lock never came back after the failover");
    // It did come back: the grant was lost. The next holder's token must
    // still be larger than the lost holder's.
    let again = lock
        .lock(Duration::from_secs(30))
        .await
        .expect("backend")
        .expect("free again");
    let again_token = again.fencing_token().expect("a token");
    assert!(
        again_token > first_token,
        "token {again_token} after the failover, {first_token} before it"
    );
    drop(first);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failovers_keep_locks_safe() {
    let mut cluster = RedisCluster::start();
    let backend = cluster.connect().await;
    work_goes_on_through_a_graceful_failover(&cluster, &backend).await;
    waiters_are_woken_after_their_node_fails_over(&cluster, &backend).await;
    an_unreplicated_lock_is_refused(&cluster, &backend).await;
    tokens_grow_across_a_lossy_failover(&mut cluster, &backend).await;
}
