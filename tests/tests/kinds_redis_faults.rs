//! Redis-only checks of the reentrant and fair locks, the semaphore and
//! Redlock: several OS processes, killed holders and waiters, and Redlock over
//! five servers with some of them killed or paused.

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lock_core::Error;
use lock_core::backend::RedisBackend;
use lock_core::lock::{Lock, LockOptions, Owner, Redlock, ReentrantLock};
use lock_tests::{RedisServer, redis_backend};
use redis::Commands;
use tokio::io::{AsyncBufReadExt, BufReader};

const WORKER: &str = env!("CARGO_BIN_EXE_lock-worker");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_excludes_across_processes() {
    const PROCESSES: u64 = 3;
    const ROUNDS: u64 = 150;
    let (server, _backend) = redis_backend().await;
    for kind in ["reentrant", "fair", "semaphore"] {
        let counter = format!("counter:{kind}");
        let children: Vec<_> = (0..PROCESSES)
            .map(|_| {
                tokio::process::Command::new(WORKER)
                    .args([
                        "rmw",
                        &server.url(),
                        kind,
                        &counter,
                        &ROUNDS.to_string(),
                        kind,
                    ])
                    .stdout(Stdio::piped())
                    .spawn()
                    .expect("cannot start lock-worker")
            })
            .collect();
        for child in children {
            let out = child.wait_with_output().await.expect("worker");
            assert!(out.status.success(), "{kind} worker failed: {out:?}");
        }
        let total: u64 = server.connection().get(&counter).expect("GET");
        assert_eq!(total, PROCESSES * ROUNDS, "{kind}: lost updates");
    }
}

async fn start_holder(server: &RedisServer, name: &str, kind: &str) -> tokio::process::Child {
    let mut child = tokio::process::Command::new(WORKER)
        .args(["hold", &server.url(), name, "600", kind])
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
    child
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holders_permit_comes_back() {
    let (server, backend) = redis_backend().await;
    let mut child = start_holder(&server, "permit", "semaphore").await;
    let sem = lock_core::lock::Semaphore::new(backend, "permit", std::num::NonZeroU32::MIN)
        .expect("valid");
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert!(
        sem.try_acquire().await.expect("backend").is_none(),
        "watchdog did not renew"
    );
    child.kill().await.expect("kill");
    let started = Instant::now();
    assert!(
        sem.acquire(Duration::from_secs(10))
            .await
            .expect("backend")
            .is_some()
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_fair_waiter_is_pruned() {
    let (server, backend) = redis_backend().await;
    let options = LockOptions::new().lease(Duration::from_secs(30)).fair(true);
    let lock = Lock::with_options(backend, "line", options).expect("valid");
    let holder = lock.try_lock().await.expect("backend").expect("free");
    // A waiter in another process joins the line, then dies in it.
    let mut crashed = tokio::process::Command::new(WORKER)
        .args(["hold", &server.url(), "line", "600", "fair"])
        .kill_on_drop(true)
        .spawn()
        .expect("cannot start lock-worker");
    let queued = lock_tests::eventually(Duration::from_secs(5), async || {
        let len: usize = server
            .connection()
            .llen("lock:{line}:flock:queue")
            .expect("LLEN");
        len == 1
    })
    .await;
    assert!(queued, "the other process never joined the line");
    crashed.kill().await.expect("kill");
    let next = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.lock(Duration::from_secs(20)).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let released = Instant::now();
    assert!(holder.release().await.expect("backend"));
    let got = next.await.expect("join").expect("backend");
    assert!(got.is_some());
    // The dead waiter holds its place for at most FAIR_SLOT (3 s).
    assert!(
        released.elapsed() < Duration::from_secs(5),
        "the dead waiter blocked the line for {:?}",
        released.elapsed()
    );
}

async fn redlock(servers: &[RedisServer]) -> Redlock {
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    Redlock::connect(&urls)
        .await
        .expect("connect to every server")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_clients_never_both_hold_it() {
    let servers = RedisServer::start_many(5);
    let clients = [redlock(&servers).await, redlock(&servers).await];
    let counter = Arc::new(AtomicU64::new(0));
    let inside = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for client in &clients {
        for _ in 0..3 {
            let lock = Lock::with_options(
                client.clone(),
                "red",
                LockOptions::new().lease(Duration::from_secs(10)),
            )
            .expect("valid");
            let (counter, inside) = (counter.clone(), inside.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..25 {
                    let guard = lock
                        .lock(Duration::from_secs(30))
                        .await
                        .expect("backend")
                        .expect("busy for 30 s");
                    assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                    let seen = counter.load(Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    counter.store(seen + 1, Ordering::SeqCst);
                    inside.fetch_sub(1, Ordering::SeqCst);
                    assert!(guard.release().await.expect("backend"));
                }
            }));
        }
    }
    for task in tasks {
        task.await.expect("task panicked");
    }
    assert_eq!(counter.load(Ordering::SeqCst), 150);
}

/// Redlock answers once a majority has; the other servers' calls finish in
/// the background. Every server must still end up with the same commands:
/// no key may be left behind on a server whose answer was not awaited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_leaves_no_key_on_servers_it_did_not_wait_for() {
    let servers = RedisServer::start_many(5);
    let client = redlock(&servers).await;
    // A lease far longer than the test: only a release can remove a key.
    let options = LockOptions::new().lease(Duration::from_secs(60));
    for i in 0..50 {
        let lock = Lock::with_options(client.clone(), format!("bg{i}"), options).expect("valid");
        let guard = lock.try_lock().await.expect("backend").expect("free");
        assert!(guard.release().await.expect("backend"));
    }
    // Busy answers settle an acquire early too: a held lock, then contenders.
    let lock = Lock::with_options(client.clone(), "held", options).expect("valid");
    let guard = lock.try_lock().await.expect("backend").expect("free");
    for _ in 0..20 {
        assert!(lock.try_lock().await.expect("backend").is_none());
    }
    assert!(guard.release().await.expect("backend"));
    for (i, server) in servers.iter().enumerate() {
        let mut conn = server.connection();
        let empty = lock_tests::eventually(Duration::from_secs(2), async || {
            redis::cmd("DBSIZE")
                .query::<u64>(&mut conn)
                .expect("DBSIZE")
                == 0
        })
        .await;
        let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut conn).expect("KEYS");
        assert!(empty, "server {i} kept {keys:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_survives_two_dead_servers_and_fails_with_three() {
    let mut servers = RedisServer::start_many(5);
    let client = redlock(&servers).await;
    assert_eq!(client.quorum(), 3);
    let lease = Duration::from_secs(10);
    let lock =
        Lock::with_options(client, "quorum", LockOptions::new().lease(lease)).expect("valid");

    servers[0].kill();
    servers[1].kill();
    let guard = lock.try_lock().await.expect("3 of 5 answer").expect("free");
    // Validity accounts for drift: lease/100 + 2 ms.
    assert!(guard.valid_for() <= lease - Duration::from_millis(102));
    assert!(
        lock.try_lock().await.expect("backend").is_none(),
        "granted twice"
    );
    assert!(guard.release().await.expect("backend"));

    servers[2].kill();
    let wait = Duration::from_secs(3);
    let started = Instant::now();
    let result = lock.lock(wait).await;
    let took = started.elapsed();
    match result {
        Err(Error::NoQuorum { answered, needed }) => assert_eq!((answered, needed), (2, 3)),
        other => panic!("expected NoQuorum, got {other:?}"),
    }
    assert!(
        took <= wait,
        "took {took:?}, beyond the wait budget {wait:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_does_not_wait_on_a_paused_server() {
    let servers = RedisServer::start_many(5);
    let client = redlock(&servers).await;
    let lock = Lock::with_options(
        client,
        "paused",
        LockOptions::new().lease(Duration::from_secs(10)),
    )
    .expect("valid");
    // Warm up every connection and script first.
    drop(
        lock.try_lock()
            .await
            .expect("backend")
            .expect("free")
            .release()
            .await,
    );
    servers[3].pause();
    for _ in 0..5 {
        let started = Instant::now();
        let guard = lock.try_lock().await.expect("4 of 5 answer").expect("free");
        let took = started.elapsed();
        // Per-server timeout is 50 ms; allow a generous margin.
        assert!(took < Duration::from_millis(500), "acquire took {took:?}");
        assert!(guard.release().await.expect("backend"));
    }
    servers[3].resume();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_refuses_what_it_cannot_do() {
    let servers = RedisServer::start_many(3);
    let client = redlock(&servers).await;
    let fenced =
        Lock::with_options(client.clone(), "f", LockOptions::new().fencing(true)).expect("valid");
    assert!(matches!(
        fenced.try_lock().await,
        Err(Error::InvalidArgument { .. })
    ));
    let reentrant = ReentrantLock::new(client, "r").expect("valid");
    assert!(matches!(
        reentrant.try_lock(&Owner::new()).await,
        Err(Error::InvalidArgument { .. })
    ));
    assert!(Redlock::new(Vec::<RedisBackend>::new()).is_err());
}

/// A Redlock waiter is woken by the release message of the servers, not by
/// its retry delay, even with one server paused (its subscriber cannot be
/// reached, so the others must do). Holder and waiter are separate clients,
/// with connections of their own, as two processes would be.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_waiters_are_woken_by_the_release() {
    let servers = RedisServer::start_many(5);
    let options = LockOptions::new().lease(Duration::from_secs(60));
    let holder = Lock::with_options(redlock(&servers).await, "woken", options).expect("valid");
    // Without a wake-up, the waiter would retry 10 to 30 s later.
    let waiter = Lock::with_options(
        redlock(&servers).await.retry_delay(Duration::from_secs(20)),
        "woken",
        options,
    )
    .expect("valid");
    servers[3].pause();
    for round in 0..3 {
        let guard = holder
            .try_lock()
            .await
            .expect("4 of 5 answer")
            .expect("free");
        let waiter = waiter.clone();
        let next = tokio::spawn(async move {
            let guard = waiter
                .lock(Duration::from_secs(60))
                .await
                .expect("backend")
                .expect("waited 60 s");
            let at = Instant::now();
            assert!(guard.release().await.expect("backend"));
            at
        });
        // Long enough for the waiter to be refused, subscribe and wait.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(
            !next.is_finished(),
            "round {round}: the waiter got a held lock"
        );
        let released = Instant::now();
        assert!(guard.release().await.expect("backend"));
        let took = next
            .await
            .expect("waiter panicked")
            .saturating_duration_since(released);
        assert!(
            took < Duration::from_secs(3),
            "round {round}: the waiter took {took:?} to get a released lock"
        );
    }
    servers[3].resume();
}

/// `SET` calls a server has answered so far.
fn set_calls(server: &RedisServer) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut server.connection())
        .expect("INFO");
    info.lines()
        .find_map(|line| line.strip_prefix("cmdstat_set:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |calls| calls.parse().expect("a count"))
}

/// An attempt that gets only a minority takes back what it got without a
/// release message: otherwise the waiter would wake itself (and every other
/// waiter) into attempt after attempt while the holder keeps the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_failed_attempts_wake_no_one() {
    let servers = RedisServer::start_many(5);
    let options = LockOptions::new().lease(Duration::from_secs(60));
    // The holder has the lock on servers 0 to 2, a majority of the five.
    let holder =
        Lock::with_options(redlock(&servers[..3]).await, "minority", options).expect("valid");
    let guard = holder.try_lock().await.expect("backend").expect("free");
    let waiter = Lock::with_options(
        redlock(&servers)
            .await
            .retry_delay(Duration::from_millis(200)),
        "minority",
        options,
    )
    .expect("valid");
    let before = set_calls(&servers[3]);
    let wait = Duration::from_secs(2);
    assert!(waiter.lock(wait).await.expect("backend").is_none());
    // Each attempt gets servers 3 and 4 and gives them back. With one
    // attempt per 100 to 300 ms, 2 s hold about 20 at most.
    let attempts = set_calls(&servers[3]) - before;
    assert!(
        (2..=40).contains(&attempts),
        "{attempts} attempts in {wait:?}"
    );
    assert!(guard.release().await.expect("backend"));
}
