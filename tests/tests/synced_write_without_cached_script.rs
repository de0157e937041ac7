//! A synced write to a server whose script cache is empty (a restart, a
//! failover, `SCRIPT FLUSH`) waits for the replica once, not twice: the
//! synced path sends the script's text (`EVAL`), so no `WAIT` follows an
//! `EVALSHA` the server refused with `NOSCRIPT`.

use std::time::{Duration, Instant};

use lock_core::Error;
use lock_core::backend::RedisBackend;
use lock_core::lock::{Lock, LockOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_the_server_lacks_waits_for_the_replica_once() {
    let (master, replica) = lock_tests::master_and_replica();
    let synced = RedisBackend::connect(&master.url())
        .await
        .expect("connect")
        .sync_replicas(1, Duration::from_secs(3));
    let options = LockOptions::new().lease(Duration::from_secs(30));
    let lock = Lock::with_options(synced, "noscript", options).expect("valid");
    // Warm: the script is cached, the pool has a connection.
    let guard = lock.try_lock().await.expect("confirmed").expect("free");
    assert!(guard.release().await.expect("backend"));

    replica.pause();
    let mut admin = master.connection();
    // The replica lags behind writes of other clients.
    let _: () = redis::cmd("SET")
        .arg("other")
        .arg(1)
        .query(&mut admin)
        .expect("SET");

    let started = Instant::now();
    let cached = lock.try_lock().await.map(|g| g.is_some());
    let cached_took = started.elapsed();

    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut admin)
        .expect("FLUSH");
    let started = Instant::now();
    let uncached = lock.try_lock().await.map(|g| g.is_some());
    let uncached_took = started.elapsed();
    replica.resume();
    eprintln!(
        "cached: {cached:?} after {cached_took:?}; uncached: {uncached:?} after {uncached_took:?}"
    );
    assert!(
        matches!(cached, Err(Error::NotReplicated { .. })),
        "{cached:?}"
    );
    assert!(
        matches!(uncached, Err(Error::NotReplicated { .. })),
        "with the script not cached the same synced acquire answered {uncached:?} after \
         {uncached_took:?} (cached: {cached:?} after {cached_took:?})"
    );
}
