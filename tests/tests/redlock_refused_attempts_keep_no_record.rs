//! Redlock keeps no record of an attempt every server refused: busy
//! `try_lock`s with a day-long lease grow the client no more than with a
//! 1 s lease (each once kept a per-token record for its whole lease).

use std::time::Duration;

use lock_core::lock::{Lock, LockOptions, Redlock};
use lock_tests::RedisServer;

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

async fn busy_attempts(server: &RedisServer, lease: Duration, name: &str, n: usize) -> u64 {
    let connect = || async {
        Redlock::connect(&[server.url().as_str()])
            .await
            .expect("connect")
    };
    let holding = LockOptions::new().lease(Duration::from_secs(24 * 3600));
    let holder = Lock::with_options(connect().await, name, holding).expect("valid");
    let options = LockOptions::new().lease(lease);
    let contender = Lock::with_options(connect().await, name, options).expect("valid");
    let _held = holder.try_lock().await.expect("backend").expect("free");
    assert!(contender.try_lock().await.expect("backend").is_none());
    let before = rss_kib();
    for _ in 0..n {
        assert!(contender.try_lock().await.expect("backend").is_none());
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    // One more after the short leases ran out: it prunes what it can.
    assert!(contender.try_lock().await.expect("backend").is_none());
    rss_kib().saturating_sub(before)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_attempts_are_not_remembered_for_their_whole_lease() {
    let server = RedisServer::start();
    let n = 30_000;
    let short = busy_attempts(&server, Duration::from_secs(1), "short", n).await;
    let long = busy_attempts(&server, Duration::from_secs(24 * 3600), "long", n).await;
    eprintln!(
        "RSS growth over {n} refused try_locks: lease 1 s: {short} KiB, lease 1 day: {long} KiB"
    );
    assert!(
        long < short + 2048,
        "{n} refused try_locks with a 1-day lease grew the client by {long} KiB (with a 1 s \
         lease: {short} KiB): each refused attempt is kept in the `tokens` map for its lease"
    );
}
