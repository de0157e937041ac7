//! Redis-only lock behaviour: several OS processes, interoperability with the
//! plain SET NX PX convention, key TTLs, watchdog traffic, and faults (paused,
//! unreachable and restarted servers).

use std::process::Stdio;
use std::time::{Duration, Instant};

use lock_core::backend::{RedisBackend, RedisConfig};
use lock_core::lock::{Lock, LockOptions};
use lock_tests::{RedisServer, evalsha_calls, eventually, within};
use redis::Commands;
use tokio::io::{AsyncBufReadExt, BufReader};

const WORKER: &str = env!("CARGO_BIN_EXE_lock-worker");

async fn backend_with(server: &RedisServer, config: RedisConfig) -> RedisBackend {
    RedisBackend::connect_with(server.client(), config)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to {}: {e}", server.url()))
}

async fn backend(server: &RedisServer) -> RedisBackend {
    backend_with(server, RedisConfig::default()).await
}

fn fixed(backend: &RedisBackend, name: &str, lease: Duration) -> Lock<RedisBackend> {
    Lock::with_options(backend.clone(), name, LockOptions::new().lease(lease)).expect("valid lock")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_and_tasks_lose_no_update() {
    const PROCESSES: u64 = 4;
    const PROCESS_ROUNDS: u64 = 400;
    const TASKS: u64 = 8;
    const TASK_ROUNDS: u64 = 100;
    let server = RedisServer::start();
    let mut children = Vec::new();
    for _ in 0..PROCESSES {
        children.push(
            tokio::process::Command::new(WORKER)
                .args(["rmw", &server.url(), "rmw", "rmw:counter"])
                .arg(PROCESS_ROUNDS.to_string())
                .stdout(Stdio::piped())
                .spawn()
                .expect("cannot start lock-worker"),
        );
    }
    let backend = backend(&server).await;
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let lock = fixed(&backend, "rmw", Duration::from_secs(30));
        let mut conn = backend.connection();
        tasks.push(tokio::spawn(async move {
            use redis::AsyncCommands;
            for _ in 0..TASK_ROUNDS {
                let guard = lock
                    .lock(Duration::from_secs(60))
                    .await
                    .expect("backend")
                    .expect("busy for 60 s");
                let seen: u64 = conn
                    .get::<_, Option<u64>>("rmw:counter")
                    .await
                    .expect("GET")
                    .unwrap_or(0);
                tokio::task::yield_now().await;
                let () = conn.set("rmw:counter", seen + 1).await.expect("SET");
                assert!(guard.release().await.expect("release"));
            }
        }));
    }
    for task in tasks {
        task.await.expect("task panicked");
    }
    for child in children {
        let out = child.wait_with_output().await.expect("worker");
        assert!(out.status.success(), "worker failed: {:?}", out);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            format!("done {PROCESS_ROUNDS}")
        );
    }
    let total: u64 = server.connection().get("rmw:counter").expect("GET");
    assert_eq!(total, PROCESSES * PROCESS_ROUNDS + TASKS * TASK_ROUNDS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_holder_process_frees_the_lock_after_its_lease() {
    let server = RedisServer::start();
    let mut child = tokio::process::Command::new(WORKER)
        .args(["hold", &server.url(), "held", "600"])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("cannot start lock-worker");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .expect("worker did not take the lock")
        .expect("read");
    assert_eq!(line.as_deref(), Some("held"));
    let backend = backend(&server).await;
    let lock = fixed(&backend, "held", Duration::from_secs(30));
    // The watchdog (600 ms lease, renewed every 200 ms) keeps it held.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert!(lock.try_lock().await.expect("backend").is_none());
    child.kill().await.expect("kill");
    let wait = lock.lock(Duration::from_secs(10));
    let guard = within(Duration::from_secs(3), "a dead holder's lease ending", wait).await;
    assert!(
        guard.expect("backend").is_some(),
        "lock not freed after the dead holder's lease"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interoperates_with_plain_set_nx_px_clients() {
    let server = RedisServer::start();
    let backend = backend(&server).await;
    let mut plain = server.connection();
    let key = backend
        .keyspace()
        .key(&"shared".try_into().expect("name"), "lock");
    let lock = fixed(&backend, "shared", Duration::from_secs(30));

    let guard = lock.try_lock().await.expect("backend").expect("free");
    let stored: String = plain.get(&key).expect("GET");
    assert_eq!(stored, guard.token(), "the value must be exactly the token");
    let ttl: i64 = plain.pttl(&key).expect("PTTL");
    assert!(ttl > 0 && ttl <= 30_000, "pttl {ttl}");
    let taken: Option<String> = redis::cmd("SET")
        .arg(&key)
        .arg("other")
        .arg("NX")
        .arg("PX")
        .arg(10_000)
        .query(&mut plain)
        .expect("SET");
    assert_eq!(taken, None, "a plain client took our lock");
    assert!(guard.release().await.expect("backend"));

    let taken: Option<String> = redis::cmd("SET")
        .arg(&key)
        .arg("other")
        .arg("NX")
        .arg("PX")
        .arg(10_000)
        .query(&mut plain)
        .expect("SET");
    assert_eq!(taken.as_deref(), Some("OK"));
    assert!(
        lock.try_lock().await.expect("backend").is_none(),
        "we took a plain client's lock"
    );
    let () = plain.del(&key).expect("DEL");
    assert!(lock.try_lock().await.expect("backend").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_key_written_has_a_ttl() {
    let server = RedisServer::start();
    let backend = backend(&server).await;
    let options = LockOptions::new()
        .lease(Duration::from_secs(30))
        .fencing(true);
    let lock = Lock::with_options(backend.clone(), "ttl", options).expect("valid");
    let guard = lock.try_lock().await.expect("backend").expect("free");
    let guard_token = guard.token().to_owned();
    let mut conn = server.connection();
    let keys: Vec<String> = conn.keys("*").expect("KEYS");
    assert_eq!(keys.len(), 2, "expected lock and fence keys, got {keys:?}");
    for key in &keys {
        assert!(
            key.starts_with("lock:{ttl}:"),
            "key {key} lacks the hash tag"
        );
        let ttl: i64 = conn.pttl(key).expect("PTTL");
        assert!(ttl > 0, "{key} has no TTL ({ttl})");
    }
    assert!(guard.release().await.expect("backend"));
    // Left: the fencing counter, and the remembered release of this token
    // (so that a retried release gets the same answer), which expires on
    // its own.
    let mut keys: Vec<String> = conn.keys("*").expect("KEYS");
    keys.sort();
    let remembered_key = format!("lock:{{ttl}}:lock:last:{guard_token}");
    assert_eq!(keys, ["lock:{ttl}:fence", remembered_key.as_str()]);
    let ttl: i64 = conn.pttl(&remembered_key).expect("PTTL");
    let remembered =
        i64::try_from(lock_core::lock::backend::RELEASE_REMEMBERED.as_millis()).expect("ms");
    assert!(ttl > 0 && ttl <= remembered, "the latch's PTTL is {ttl}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_renews_while_held_and_stops_after_drop() {
    let server = RedisServer::start();
    let backend = backend(&server).await;
    let mut conn = server.connection();
    let lock = Lock::with_options(
        backend.clone(),
        "renew",
        LockOptions::new().watchdog(Duration::from_millis(300)),
    )
    .expect("valid");
    let guard = lock.try_lock().await.expect("backend").expect("free");
    let before = evalsha_calls(&mut conn);
    tokio::time::sleep(Duration::from_millis(650)).await;
    let during = evalsha_calls(&mut conn);
    assert!(
        during >= before + 3,
        "only {} renewals in 650 ms at 100 ms",
        during - before
    );
    drop(guard);
    let free = eventually(Duration::from_secs(2), async || {
        let exists: bool = server
            .connection()
            .exists("lock:{renew}:lock")
            .expect("EXISTS");
        !exists
    })
    .await;
    assert!(free, "dropped guard did not release");
    let after_drop = evalsha_calls(&mut conn);
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(
        evalsha_calls(&mut conn),
        after_drop,
        "renewals after the guard was dropped"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_server_loses_the_lease_and_the_service_recovers() {
    let server = RedisServer::start();
    let config = RedisConfig::default().response_timeout(Duration::from_millis(200));
    let backend = backend_with(&server, config).await;
    let lock = Lock::with_options(
        backend.clone(),
        "paused",
        LockOptions::new().watchdog(Duration::from_millis(600)),
    )
    .expect("valid");
    let guard = lock.try_lock().await.expect("backend").expect("free");
    server.pause();
    within(
        Duration::from_secs(2),
        "the lease loss reported while the server was paused",
        guard.lost(),
    )
    .await;
    assert!(guard.is_lost());
    server.resume();
    drop(guard);
    let recovered = eventually(Duration::from_secs(10), async || {
        matches!(lock.try_lock().await, Ok(Some(_)))
    })
    .await;
    assert!(recovered, "lock not usable again after the server resumed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_server_gives_typed_errors_within_the_timeout() {
    let server = RedisServer::start();
    let timeout = Duration::from_millis(300);
    let backend = backend_with(&server, RedisConfig::default().response_timeout(timeout)).await;
    let lock = fixed(&backend, "slow", Duration::from_secs(30));
    assert!(lock.try_lock().await.expect("backend").is_some());
    server.pause();
    for wait in [Duration::ZERO, Duration::from_secs(10)] {
        let what = format!("giving up on a paused server (timeout {timeout:?})");
        match within(timeout * 5, &what, lock.lock(wait)).await {
            Err(e) => assert!(e.is_backend_failure(), "unexpected error {e:?}"),
            Ok(_) => panic!("a paused server answered"),
        }
    }
    server.resume();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_server_gives_a_typed_error_within_the_timeout() {
    let timeout = Duration::from_millis(500);
    let config = || RedisConfig::default().connect_timeout(timeout);
    // Nothing listens on a port that was just free.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).expect("url");
    let connect = RedisBackend::connect_with(client, config());
    let result = within(timeout * 5, "connecting to a closed port", connect).await;
    assert!(
        result.as_ref().is_err_and(|e| e.is_backend_failure()),
        "{result:?}"
    );

    // A paused server accepts the TCP connection but never answers.
    let server = RedisServer::start();
    server.pause();
    let connect = RedisBackend::connect_with(server.client(), config());
    let result = within(timeout * 5, "connecting to a paused server", connect).await;
    assert!(
        result.as_ref().is_err_and(|e| e.is_backend_failure()),
        "{result:?}"
    );
    server.resume();

    assert!(RedisBackend::connect("not a url").await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_server_is_used_again_with_wake_ups() {
    let mut server = RedisServer::start();
    let config = RedisConfig::default().response_timeout(Duration::from_millis(500));
    let backend = backend_with(&server, config).await;
    let lock = fixed(&backend, "restart", Duration::from_secs(30));
    // Warm up the pub/sub subscriber, then restart the server under it.
    let holder = lock.try_lock().await.expect("backend").expect("free");
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.lock(Duration::from_secs(1)).await })
    };
    assert!(matches!(waiter.await.expect("join"), Ok(None)));
    drop(holder);
    server.restart();

    let recovered = eventually(Duration::from_secs(10), async || {
        match lock.try_lock().await {
            Ok(Some(guard)) => guard.release().await.is_ok(),
            _ => false,
        }
    })
    .await;
    assert!(recovered, "backend did not reconnect after the restart");

    let holder = lock.try_lock().await.expect("backend").expect("free");
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let got = lock.lock(Duration::from_secs(20)).await;
            (got.map(|g| g.is_some()), started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(holder.release().await.expect("release"));
    let (got, waited) = waiter.await.expect("join");
    assert!(got.expect("backend"), "waiter did not get the lock");
    assert!(
        waited < Duration::from_secs(5),
        "waiter woke after {waited:?} (lease 30 s)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_share_one_subscription_that_ends_with_them() {
    let server = RedisServer::start();
    let backend = backend(&server).await;
    let lock = fixed(&backend, "shared-sub", Duration::from_secs(30));
    let holder = lock.try_lock().await.expect("backend").expect("free");
    let mut waiters = Vec::new();
    for _ in 0..5 {
        let lock = lock.clone();
        waiters.push(tokio::spawn(async move {
            let guard = lock.lock(Duration::from_secs(20)).await.expect("backend");
            assert!(
                guard
                    .expect("busy for 20 s")
                    .release()
                    .await
                    .expect("release")
            );
        }));
    }
    let channel = "lock:{shared-sub}:released";
    let numsub = || -> i64 {
        let reply: (String, i64) = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(channel)
            .query(&mut server.connection())
            .expect("PUBSUB");
        reply.1
    };
    let subscribed = eventually(Duration::from_secs(5), async || numsub() == 1).await;
    assert!(subscribed, "waiters did not subscribe");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        numsub(),
        1,
        "waiters should share one subscriber connection"
    );
    holder.release().await.expect("release");
    for waiter in waiters {
        waiter.await.expect("waiter panicked");
    }
    let unsubscribed = eventually(Duration::from_secs(5), async || numsub() == 0).await;
    assert!(
        unsubscribed,
        "channel still subscribed after the last waiter left"
    );
}
