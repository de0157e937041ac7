//! A Sentinel set (master, replica, Sentinel) and a failover: the backend
//! follows the new master by itself, a lock held across the failover stays
//! held, and no grant comes from the old master once it switched.

use std::time::{Duration, Instant};

use lock_core::backend::{RedisBackend, SentinelBackend};
use lock_core::lock::{Lock, LockOptions};
use lock_tests::RedisServer;
use lock_tests::sentinel::{MASTER_NAME, SentinelSet};

/// Scripts the server ran for clients (`EVALSHA` and `EVAL` calls).
fn scripts_run(server: &RedisServer) -> u64 {
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut server.connection())
        .expect("INFO commandstats");
    stats
        .lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

async fn connect(set: &SentinelSet) -> SentinelBackend {
    let urls = set.sentinel_urls();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    RedisBackend::connect_sentinel(&urls, MASTER_NAME)
        .await
        .unwrap_or_else(|e| panic!("connect through the Sentinel: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_backend_follows_a_sentinel_failover() {
    let set = SentinelSet::start();
    let backend = connect(&set).await;
    let old = set.master_port();
    assert!(backend.master_address().ends_with(&format!(":{old}")));

    // A lock with a watchdog lease, held across the failover.
    let options = LockOptions::new().watchdog(Duration::from_secs(3));
    let held = Lock::with_options(backend.clone(), "across", options).expect("valid");
    let guard = held.try_lock().await.expect("backend").expect("free");
    // Replicated before the switch.
    tokio::time::sleep(Duration::from_millis(200)).await;
    set.failover();
    let new = set.master_port();
    assert_ne!(new, old);

    let switched = Instant::now();
    let followed = lock_tests::eventually(Duration::from_secs(5), async || {
        backend.master_address().ends_with(&format!(":{new}"))
    })
    .await;
    assert!(followed, "still on {} after 5 s", backend.master_address());
    eprintln!("followed the switch in {:?}", switched.elapsed());

    // From now on, no grant from the old master: every script goes to the
    // new one, and every acquire succeeds, without help.
    let before = scripts_run(set.server(old));
    let mut errors = 0;
    for i in 0..100 {
        let lock = Lock::new(backend.clone(), format!("after-{i}")).expect("valid");
        match lock.try_lock().await {
            Ok(Some(guard)) => assert!(guard.release().await.expect("backend")),
            Ok(None) => panic!("after-{i} busy"),
            Err(_) => errors += 1,
        }
    }
    assert_eq!(errors, 0, "errors after the switch");
    assert_eq!(
        scripts_run(set.server(old)),
        before,
        "a script ran on the old master"
    );

    // The lock held across the failover is still held, and still excludes.
    assert!(
        Lock::new(backend.clone(), "across")
            .expect("valid")
            .try_lock()
            .await
            .expect("backend")
            .is_none()
    );
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        !guard.is_lost(),
        "the watchdog lost the lease across the failover"
    );
    assert!(guard.release().await.expect("backend"));
}
