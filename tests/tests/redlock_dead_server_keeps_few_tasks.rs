//! Redlock with one server down: busy attempts leave no background task
//! re-sending its undo for the attempt's whole lease (a `SET` the dead
//! server never got has nothing to undo, and a failed undo is re-sent a
//! bounded number of times).

use std::time::Duration;

use lock_core::lock::{Lock, LockOptions, Redlock};
use lock_tests::RedisServer;

async fn redlock(servers: &[RedisServer]) -> Redlock {
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    Redlock::connect(&urls).await.expect("connect")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_attempts_with_a_dead_server_leave_tasks_for_the_whole_lease() {
    let mut servers = RedisServer::start_many(3);
    let options = LockOptions::new().lease(Duration::from_secs(3600));
    let holder = Lock::with_options(redlock(&servers).await, "busy", options).expect("valid");
    let contender = Lock::with_options(redlock(&servers).await, "busy", options).expect("valid");
    let _held = holder.try_lock().await.expect("backend").expect("free");
    // Warm the contender's connections, then one server dies for good.
    assert!(contender.try_lock().await.expect("backend").is_none());
    servers[0].kill();
    tokio::time::sleep(Duration::from_millis(200)).await;

    let metrics = tokio::runtime::Handle::current().metrics();
    let before = metrics.num_alive_tasks();
    let attempts = 300;
    for _ in 0..attempts {
        // Busy on the two live servers: a plain "no".
        assert!(contender.try_lock().await.expect("backend").is_none());
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = metrics.num_alive_tasks();
    eprintln!("alive tasks: {before} before, {after} five seconds after {attempts} busy try_locks");
    assert!(
        after < before + attempts / 10,
        "{attempts} busy try_locks (answered at once) left {} tasks alive 5 s later, each \
         re-sending an undo to the dead server until its 1 h lease would have ended",
        after - before
    );
}
