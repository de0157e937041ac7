//! A synced write may wait the whole sync timeout for its replica, through
//! Sentinel as on one server: its connection has no response timeout of
//! its own (the write is bounded as a whole).

use std::time::{Duration, Instant};

use lock_core::backend::RedisBackend;
use lock_core::counter::Stock;
use lock_tests::sentinel::{MASTER_NAME, SentinelSet};

/// Stops the replica, resumes it after `after`, and times a synced write.
async fn synced_set_with_late_replica<C>(
    backend: RedisBackend<C>,
    replica: &lock_tests::RedisServer,
    after: Duration,
) -> (lock_core::Result<()>, Duration)
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    let stock = Stock::new(backend.sync_replicas(1, Duration::from_secs(6)));
    stock
        .set("warm", 1)
        .await
        .expect("confirmed with the replica up");
    replica.pause();
    let pid = replica.pid().expect("running");
    let resumer = std::thread::spawn(move || {
        std::thread::sleep(after);
        let _ = std::process::Command::new("kill")
            .arg("-CONT")
            .arg(pid.to_string())
            .status();
    });
    let started = Instant::now();
    let outcome = stock.set("sku", 10).await;
    let took = started.elapsed();
    resumer.join().expect("join");
    replica.resume();
    (outcome, took)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_synced_write_through_sentinel_may_wait_the_whole_sync_timeout() {
    let set = SentinelSet::start();
    let urls = set.sentinel_urls();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let master = set.master();
    // The replica: the data server the Sentinel lists as one.
    let replicas: Vec<Vec<String>> = redis::cmd("SENTINEL")
        .arg("SLAVES")
        .arg(MASTER_NAME)
        .query(
            &mut redis::Client::open(urls[0])
                .expect("url")
                .get_connection()
                .expect("connect"),
        )
        .expect("SENTINEL SLAVES");
    let replica_port = replicas[0]
        .chunks(2)
        .find(|pair| pair[0] == "port")
        .and_then(|pair| pair[1].parse::<u16>().ok())
        .expect("the replica's port");
    let replica = set.server(replica_port);

    // One server: the WAIT gets the whole sync timeout.
    let plain = RedisBackend::connect(&master.url()).await.expect("connect");
    let (plain_outcome, plain_took) =
        synced_set_with_late_replica(plain, replica, Duration::from_secs(3)).await;
    eprintln!("standalone: {plain_outcome:?} after {plain_took:?}");
    tokio::time::sleep(Duration::from_secs(2)).await;

    // Through Sentinel: the same write.
    let sentinel = RedisBackend::connect_sentinel(&urls, MASTER_NAME)
        .await
        .expect("connect");
    assert_eq!(
        sentinel.master_address(),
        format!("127.0.0.1:{}", master.port())
    );
    let (sentinel_outcome, sentinel_took) =
        synced_set_with_late_replica(sentinel, replica, Duration::from_secs(3)).await;
    eprintln!("sentinel: {sentinel_outcome:?} after {sentinel_took:?}");

    assert!(plain_outcome.is_ok(), "standalone: {plain_outcome:?}");
    assert!(
        sentinel_outcome.is_ok(),
        "through Sentinel a synced write with sync_replicas(1, 6 s) whose replica confirmed \
         after 3 s failed with {sentinel_outcome:?} after {sentinel_took:?} (standalone: \
         {plain_outcome:?} after {plain_took:?})"
    );
}
