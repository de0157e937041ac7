//! Redis-only checks of the reentrant and fair locks, the semaphore and
//! Redlock: several OS processes, killed holders and waiters, acquires whose
//! answers come too late, and Redlock over five servers with some of them
//! killed, paused or far away.

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lock_core::Error;
use lock_core::backend::{RedisBackend, RedisConfig};
use lock_core::lock::{Lock, LockOptions, Owner, Redlock, ReentrantLock};
use lock_tests::latency::DelayProxy;
use lock_tests::{RedisServer, redis_backend, within};
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
    let acquired = within(
        Duration::from_secs(3),
        "a killed holder's permit coming back",
        sem.acquire(Duration::from_secs(10)),
    )
    .await;
    assert!(acquired.expect("backend").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_fair_waiter_is_pruned() {
    let (server, backend) = redis_backend().await;
    let options = LockOptions::new().lease(Duration::from_secs(30)).fair(true);
    let lock = Lock::with_options(backend, "line", options).expect("valid");
    let holder = lock.try_lock().await.expect("backend").expect("free");
    // A waiter in another process joins the line, then dies in it. It asks
    // for a 30 s lease: the release hands the lock to it (its place in line
    // has not lapsed yet), but only for its 3 s slot until it confirms.
    let mut crashed = tokio::process::Command::new(WORKER)
        .args(["hold", &server.url(), "line", "30000", "fair"])
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
    // The dead waiter holds the line, or the lock handed to it, for at most
    // FAIR_SLOT (3 s).
    let got = within(
        Duration::from_secs(5),
        "the next waiter, past a dead one, after the release",
        async {
            assert!(holder.release().await.expect("backend"));
            next.await.expect("join")
        },
    )
    .await;
    assert!(got.expect("backend").is_some());
}

/// The fair lock's key and its queue's, as the Redis backend names them.
fn fair_keys(name: &str) -> (String, String) {
    (
        format!("lock:{{{name}}}:flock"),
        format!("lock:{{{name}}}:flock:queue"),
    )
}

async fn line_length_reaches(server: &RedisServer, queue: &str, n: usize) -> bool {
    lock_tests::eventually(Duration::from_secs(5), async || {
        let len: usize = server.connection().llen(queue).expect("LLEN");
        len == n
    })
    .await
}

/// A server, a backend connected to it directly, and one connected through
/// a proxy 150 ms away each way (keep the proxy alive while it is used).
async fn near_and_far() -> (RedisServer, DelayProxy, RedisBackend, RedisBackend) {
    let (server, near) = redis_backend().await;
    let proxy = DelayProxy::to_server(&server, Duration::from_millis(150));
    let far = RedisBackend::connect(&proxy.url())
        .await
        .expect("connect through the proxy");
    (server, proxy, near, far)
}

/// Waits until the first fair waiter of `name` listens on its channel, then
/// for the attempt it makes once subscribed (at most 300 ms through a 150 ms
/// proxy) to be answered, so that it is waiting: its next attempt is a second
/// away.
async fn far_waiter_listens(server: &RedisServer, name: &str) {
    let pattern = format!("lock:{{{name}}}:flock:wake:*");
    let listening = lock_tests::eventually(Duration::from_secs(5), async || {
        let channels: Vec<String> = redis::cmd("PUBSUB")
            .arg("CHANNELS")
            .arg(&pattern)
            .query(&mut server.connection())
            .expect("PUBSUB CHANNELS");
        !channels.is_empty()
    })
    .await;
    assert!(listening, "{name}: the waiter never subscribed");
    tokio::time::sleep(Duration::from_millis(450)).await;
}

/// A fair lock's release hands the lock to the first waiter in the same
/// script: the lock is the waiter's before the waiter hears of it. Here the
/// waiter is 150 ms away each way (a delay proxy). The lock key names it as
/// soon as the holder's release returns; the waiter holds it from the
/// handoff message alone (under the 2 s claim, its lease not yet confirmed:
/// a waiter that took it by an attempt of its own would count on its whole
/// lease at once); its fencing token follows the holder's; and its lease is
/// then confirmed, for a fixed lease and for a watchdog's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_release_hands_the_lock_to_the_first_waiter() {
    let (server, _proxy, backend, far) = near_and_far().await;
    let claim = lock_core::lock::backend::HANDOFF_CLAIM;
    let fair = LockOptions::new().fencing(true).fair(true);
    for (name, options) in [
        ("hand-fixed", fair.lease(Duration::from_secs(10))),
        ("hand-watchdog", fair.watchdog(Duration::from_secs(30))),
    ] {
        let (key, queue) = fair_keys(name);
        let near = Lock::with_options(backend.clone(), name, options).expect("valid");
        let far = Lock::with_options(far.clone(), name, options).expect("valid");
        let holder = near.try_lock().await.expect("backend").expect("free");
        let waiter = tokio::spawn(async move { far.lock(Duration::from_secs(10)).await });
        assert!(
            line_length_reaches(&server, &queue, 1).await,
            "{name}: nobody in line"
        );
        far_waiter_listens(&server, name).await;
        let (holder_token, holder_fence) = (holder.token().to_owned(), holder.fencing_token());
        assert!(holder.release().await.expect("backend"));
        let now: Option<String> = server.connection().get(&key).expect("GET");
        let now = now.unwrap_or_else(|| panic!("{name}: the release left the lock free"));
        assert_ne!(now, holder_token);
        let guard = waiter
            .await
            .expect("join")
            .expect("backend")
            .unwrap_or_else(|| panic!("{name}: the waiter never got the lock"));
        assert!(
            guard.valid_for() <= claim,
            "{name}: valid for {:?} before its lease was confirmed",
            guard.valid_for()
        );
        assert_eq!(guard.token(), now);
        assert!(
            guard.fencing_token() > holder_fence,
            "{name}: fencing token did not grow"
        );
        let confirmed = lock_tests::eventually(Duration::from_secs(5), async || {
            let ttl: i64 = server.connection().pttl(&key).expect("PTTL");
            ttl > 5_000 && guard.valid_for() > claim
        })
        .await;
        assert!(confirmed, "{name}: the lease was never confirmed");
        assert!(guard.release().await.expect("backend"));
    }
}

/// A waiter cancelled after the lock was handed to it, but before it heard
/// so, gives the lock on to the next in line at once (its clean-up releases
/// it), not when the 2 s claim runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_lock_handed_to_a_cancelled_waiter_goes_to_the_next() {
    let (server, _proxy, backend, far) = near_and_far().await;
    let name = "hand-cancel";
    let (key, queue) = fair_keys(name);
    let options = LockOptions::new().lease(Duration::from_secs(30)).fair(true);
    let near = Lock::with_options(backend, name, options).expect("valid");
    let far = Lock::with_options(far, name, options).expect("valid");
    let holder = near.try_lock().await.expect("backend").expect("free");
    let cancelled = tokio::spawn(async move { far.lock(Duration::from_secs(10)).await });
    assert!(
        line_length_reaches(&server, &queue, 1).await,
        "the far waiter never joined"
    );
    far_waiter_listens(&server, name).await;
    let next = {
        let near = near.clone();
        tokio::spawn(async move { near.lock(Duration::from_secs(10)).await })
    };
    assert!(
        line_length_reaches(&server, &queue, 2).await,
        "the next waiter never joined"
    );
    let holder_token = holder.token().to_owned();
    assert!(holder.release().await.expect("backend"));
    let handed: Option<String> = server.connection().get(&key).expect("GET");
    assert!(
        handed.is_some_and(|token| token != holder_token),
        "the release did not hand the lock over"
    );
    // The message is still on its way to the far waiter.
    cancelled.abort();
    let got = within(
        Duration::from_millis(1500),
        "the next waiter (did the cancelled waiter keep the lock?)",
        next,
    )
    .await;
    let got = got.expect("join").expect("backend");
    assert!(got.is_some(), "the next waiter never got the lock");
}

/// A forced unlock of a fair lock hands it to the first in line, as a
/// release does; the old holder finds it gone at its next extend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_unlock_hands_a_fair_lock_to_the_first_waiter() {
    let (server, backend) = redis_backend().await;
    let name = "hand-forced";
    let (key, queue) = fair_keys(name);
    let options = LockOptions::new().lease(Duration::from_secs(30)).fair(true);
    let lock = Lock::with_options(backend, name, options).expect("valid");
    let holder = lock.try_lock().await.expect("backend").expect("free");
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.lock(Duration::from_secs(10)).await })
    };
    assert!(
        line_length_reaches(&server, &queue, 1).await,
        "the waiter never joined"
    );
    assert!(lock.force_unlock().await.expect("backend"));
    let now: Option<String> = server.connection().get(&key).expect("GET");
    let now = now.expect("the forced unlock left the lock free");
    assert_ne!(now, holder.token());
    let guard = tokio::time::timeout(Duration::from_secs(2), waiter)
        .await
        .expect("the waiter was not handed the lock")
        .expect("join")
        .expect("backend")
        .expect("the waiter never got the lock");
    assert_eq!(guard.token(), now);
    assert!(
        !holder
            .extend(Duration::from_secs(30))
            .await
            .expect("backend")
    );
    assert!(holder.is_lost());
}

/// A waiter whose handoff message never came (its pub/sub connection was
/// cut just before the release) finds the lock its own at its next attempt,
/// before the 2 s claim runs out: it holds it from then for its whole lease
/// (set again by that attempt), with a fencing token above the holder's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_waiter_that_missed_its_handoff_takes_it_at_its_next_attempt() {
    let (server, _proxy, backend, far) = near_and_far().await;
    let name = "hand-lost";
    let (key, queue) = fair_keys(name);
    let options = LockOptions::new()
        .lease(Duration::from_secs(30))
        .fencing(true)
        .fair(true);
    let near = Lock::with_options(backend, name, options).expect("valid");
    let far = Lock::with_options(far, name, options).expect("valid");
    let holder = near.try_lock().await.expect("backend").expect("free");
    let waiter = tokio::spawn(async move { far.lock(Duration::from_secs(10)).await });
    assert!(
        line_length_reaches(&server, &queue, 1).await,
        "the waiter never joined"
    );
    far_waiter_listens(&server, name).await;
    // Only the far waiter's subscriber is a pub/sub client here.
    let killed: usize = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query(&mut server.connection())
        .expect("CLIENT KILL");
    assert_eq!(killed, 1);
    let holder_fence = holder.fencing_token();
    assert!(holder.release().await.expect("backend"));
    let claim = lock_core::lock::backend::HANDOFF_CLAIM;
    // About 0.9 s here (reconnect, subscribe and attempt, 300 ms each
    // through the proxy), where the claim alone lapses after 2 s.
    let what = "the waiter (did its attempt not see the lock was its own?)";
    let guard = within(claim, what, waiter)
        .await
        .expect("join")
        .expect("backend")
        .expect("the waiter never got the lock");
    assert!(
        guard.valid_for() > claim,
        "valid for {:?}: taken from a message that was never sent to it",
        guard.valid_for()
    );
    let ttl: i64 = server.connection().pttl(&key).expect("PTTL");
    assert!(ttl > 25_000, "the attempt left the lock's TTL at {ttl} ms");
    assert!(
        guard.fencing_token() > holder_fence,
        "fencing token did not grow"
    );
}

async fn redlock(servers: &[RedisServer]) -> Redlock {
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    Redlock::connect(&urls)
        .await
        .expect("connect to every server")
}

/// [`redlock`] with a per-server timeout of 500 ms, not 50: for tests of
/// something else than that timeout, which a busy machine's scheduling
/// delays must not decide (an attempt or release that too few servers
/// answered in time fails with `NoQuorum`).
async fn sturdy_redlock(servers: &[RedisServer]) -> Redlock {
    redlock(servers)
        .await
        .per_server_timeout(Duration::from_millis(500))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_clients_never_both_hold_it() {
    let servers = RedisServer::start_many(5);
    let clients = [
        sturdy_redlock(&servers).await,
        sturdy_redlock(&servers).await,
    ];
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
    let client = sturdy_redlock(&servers).await;
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
        let empty =
            lock_tests::eventually(Duration::from_secs(2), async || keys_on(server).is_empty())
                .await;
        assert!(empty, "server {i} kept {:?}", keys_on(server));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_survives_two_dead_servers_and_fails_with_three() {
    let mut servers = RedisServer::start_many(5);
    let client = sturdy_redlock(&servers).await;
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
    // At once without a wait; after trying for the whole wait with one.
    match lock.try_lock().await {
        Err(Error::NoQuorum { answered, needed }) => assert_eq!((answered, needed), (2, 3)),
        other => panic!("expected NoQuorum, got {other:?}"),
    }
    let wait = Duration::from_secs(1);
    let started = Instant::now();
    let result = lock.lock(wait).await;
    let took = started.elapsed();
    match result {
        Err(Error::NoQuorum { answered, needed }) => assert_eq!((answered, needed), (2, 3)),
        other => panic!("expected NoQuorum, got {other:?}"),
    }
    // The last attempt starts before the wait ends, and it and its undo
    // may each wait one per-server timeout (500 ms) for the dead servers.
    assert!(
        took >= wait && took < wait + Duration::from_secs(2),
        "gave up after {took:?}, with a wait of {wait:?}"
    );
}

/// A majority that does not answer for a while (three of five servers
/// paused for 300 ms) fails an attempt with `NoQuorum`; `lock` tries again
/// while its wait lasts and takes the lock once they answer, and the
/// attempts that failed leave nothing behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_lock_retries_an_attempt_a_majority_did_not_answer() {
    let servers = RedisServer::start_many(5);
    let client = sturdy_redlock(&servers).await;
    let lock = Lock::with_options(
        client,
        "stalled-majority",
        LockOptions::new().lease(Duration::from_secs(60)),
    )
    .expect("valid");
    // Warm every connection and script first.
    let guard = lock.try_lock().await.expect("backend").expect("free");
    assert!(guard.release().await.expect("backend"));

    for server in &servers[..3] {
        server.pause();
    }
    assert!(matches!(
        lock.try_lock().await,
        Err(Error::NoQuorum { answered: 2, .. })
    ));
    let waiting = tokio::spawn({
        let lock = lock.clone();
        async move { lock.lock(Duration::from_secs(10)).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    for server in &servers[..3] {
        server.resume();
    }
    let guard = waiting
        .await
        .expect("task")
        .expect("tried again until the majority answered")
        .expect("free");
    assert!(guard.release().await.expect("backend"));
    assert_no_key_left(&servers);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_does_not_wait_on_a_paused_server() {
    let servers = RedisServer::start_many(5);
    let client = sturdy_redlock(&servers).await;
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
        // Settled by the four that answer, not by the paused server's
        // per-server timeout (500 ms).
        let guard = within(Duration::from_millis(400), "an acquire", lock.try_lock())
            .await
            .expect("4 of 5 answer")
            .expect("free");
        assert!(guard.release().await.expect("backend"));
    }
    servers[3].resume();
}

/// Redlock over five servers each `one_way` away (behind a delay proxy),
/// with a per-server timeout of `timeout`. As with `Redlock::connect`, the
/// connections keep the default response timeout (2 s), which bounds how
/// long a release keeps trying to reach its server.
async fn distant_redlock(
    servers: &[RedisServer],
    one_way: Duration,
    timeout: Duration,
) -> (Vec<DelayProxy>, Redlock) {
    let proxies: Vec<DelayProxy> = servers
        .iter()
        .map(|server| DelayProxy::to_server(server, one_way))
        .collect();
    let config = RedisConfig::default().connect_timeout(Duration::from_secs(5));
    let backends = connect_each(proxies.iter().map(DelayProxy::url), &config).await;
    let redlock = Redlock::new(backends)
        .expect("five servers")
        .per_server_timeout(timeout);
    (proxies, redlock)
}

/// One backend per URL, each connected with `config`.
async fn connect_each(
    urls: impl IntoIterator<Item = String>,
    config: &RedisConfig,
) -> Vec<RedisBackend> {
    let mut backends = Vec::new();
    for url in urls {
        let client = redis::Client::open(url).expect("url");
        backends.push(
            RedisBackend::connect_with(client, config.clone())
                .await
                .expect("connect"),
        );
    }
    backends
}

/// Keys on `server`, read directly (not through a proxy).
/// The keys on `server`, but for the remembered releases (`…:last:<token>`,
/// see `RELEASE_REMEMBERED`): those stay for a while by design, and hold
/// no lock.
fn keys_on(server: &RedisServer) -> Vec<String> {
    let keys: Vec<String> = server.connection().keys("*").expect("KEYS");
    keys.into_iter().filter(|k| !k.contains(":last:")).collect()
}

/// The time an acquire takes counts against its lease: with round trips
/// of 120 ms, a lock on a 10 s lease is valid for less than 10 s minus
/// 120 ms, and one on a 100 ms lease is not granted at all (its majority
/// came after the lease ran out). Its keys expire with that lease before
/// anyone could look, so the undo of a refused attempt is checked by
/// `redlock_gives_up_on_servers_slower_than_its_timeout` instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_counts_the_acquire_time_against_the_lease() {
    let servers = RedisServer::start_many(5);
    let round_trip = Duration::from_millis(120);
    let (_proxies, client) =
        distant_redlock(&servers, round_trip / 2, Duration::from_secs(2)).await;

    let lease = Duration::from_secs(10);
    let lock =
        Lock::with_options(client.clone(), "far", LockOptions::new().lease(lease)).expect("valid");
    let guard = lock.try_lock().await.expect("backend").expect("free");
    assert!(
        guard.valid_for() <= lease - round_trip,
        "valid for {:?} after a {round_trip:?} round trip",
        guard.valid_for()
    );
    assert!(guard.release().await.expect("backend"));

    let short = Lock::with_options(
        client,
        "too-far",
        LockOptions::new().lease(Duration::from_millis(100)),
    )
    .expect("valid");
    for _ in 0..3 {
        assert!(
            short.try_lock().await.expect("backend").is_none(),
            "granted a lock whose majority answered after its lease"
        );
    }
}

/// The per-server timeout bounds the wait on servers that are slow rather
/// than down: with every answer 300 ms away and a 50 ms timeout, an
/// acquire fails with `NoQuorum` well within its budget, and holds nothing.
/// (Far more than the timeout: only a 250 ms stall of the client at the
/// wrong moment could let an answer count.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_gives_up_on_servers_slower_than_its_timeout() {
    let servers = RedisServer::start_many(5);
    let timeout = Duration::from_millis(50);
    let one_way = Duration::from_millis(150);
    let (_proxies, client) = distant_redlock(&servers, one_way, timeout).await;
    let lock = Lock::with_options(
        client,
        "slow",
        LockOptions::new().lease(Duration::from_secs(10)),
    )
    .expect("valid");
    // The acquire and its undo each wait one timeout; allow 5x that.
    match within(5 * 2 * timeout, "giving up", lock.try_lock()).await {
        Err(Error::NoQuorum { answered, needed }) => assert_eq!((answered, needed), (0, 3)),
        other => panic!("expected NoQuorum, got {other:?}"),
    }
    // The SETs that arrived after the timeout were undone by the attempt's
    // undo, which reaches each server after them on the same connection.
    // Looked at once the SETs have landed (else no key would prove nothing).
    tokio::time::sleep(2 * one_way).await;
    assert_no_key_left(&servers);
}

/// Waits up to 2 s for each server to hold no key; fails with what is left.
fn assert_no_key_left(servers: &[RedisServer]) {
    for (i, server) in servers.iter().enumerate() {
        let mut left = keys_on(server);
        for _ in 0..200 {
            if left.is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
            left = keys_on(server);
        }
        assert_eq!(left, Vec::<String>::new(), "left on server {i}");
    }
}

/// One of five servers is far away (answers 500 ms away, the per-server
/// timeout is 200 ms): the lock is taken and released by the other four,
/// and the release still reaches the distant one, which holds the key by
/// then, rather than leaving the key there until the lease runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_release_reaches_a_server_slower_than_its_timeout() {
    let servers = RedisServer::start_many(5);
    let far = DelayProxy::to_server(&servers[4], Duration::from_millis(250));
    let mut urls: Vec<String> = servers[..4].iter().map(RedisServer::url).collect();
    urls.push(far.url());
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    // Far above the near servers' answers even on a busy machine.
    let client = Redlock::connect(&urls)
        .await
        .expect("connect")
        .per_server_timeout(Duration::from_millis(200));
    let lock = Lock::with_options(
        client,
        "far",
        LockOptions::new().lease(Duration::from_secs(60)),
    )
    .expect("valid");
    for _ in 0..3 {
        let guard = lock.try_lock().await.expect("4 of 5 answer").expect("free");
        // Its `SET` reaches the distant server too, after the acquire.
        let landed = lock_tests::eventually(Duration::from_secs(2), async || {
            !keys_on(&servers[4]).is_empty()
        });
        assert!(landed.await, "the SET never reached the distant server");
        assert!(guard.release().await.expect("4 of 5 answer"));
        assert_no_key_left(&servers);
    }
}

/// A release that could not even be written before its per-server wait ran
/// out is still sent when the connection moves again. redis-rs skips a
/// queued command whose caller stopped waiting, so a release that a
/// stalled connection held back would be lost, and the key left for its
/// whole lease. Here server 4 stops reading (paused, its connection full
/// with a 64 MiB command) while the other four release the lock, and
/// comes back after the release's 200 ms wait has run out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_release_is_sent_after_its_wait_gave_up() {
    let servers = RedisServer::start_many(5);
    let config = RedisConfig::default().response_timeout(Duration::from_secs(10));
    let backends = connect_each(servers.iter().map(RedisServer::url), &config).await;
    let mut stalled = backends[4].connection();
    // Far above the other servers' answers even on a busy machine.
    let per_server = Duration::from_millis(200);
    let client = Redlock::new(backends)
        .expect("five servers")
        .per_server_timeout(per_server);
    let lock = Lock::with_options(
        client,
        "stalled",
        LockOptions::new().lease(Duration::from_secs(60)),
    )
    .expect("valid");
    let guard = lock.try_lock().await.expect("backend").expect("free");
    let landed = lock_tests::eventually(Duration::from_secs(2), async || {
        keys_on(&servers[4]).len() == 1
    });
    assert!(landed.await, "the SET never reached server 4");

    servers[4].pause();
    let filler = tokio::spawn(async move {
        redis::cmd("SET")
            .arg("filler")
            .arg(vec![b'x'; 64 << 20])
            .query_async::<()>(&mut stalled)
            .await
    });
    // Long enough for the filler to fill the socket and hold the rest back.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(guard.release().await.expect("4 of 5 answer"));
    tokio::time::sleep(4 * per_server).await;
    servers[4].resume();
    filler.await.expect("filler task").expect("filler SET");
    let released = lock_tests::eventually(Duration::from_secs(5), async || {
        keys_on(&servers[4]) == ["filler"]
    });
    assert!(
        released.await,
        "server 4 kept {:?} after the release",
        keys_on(&servers[4])
    );
    for server in &servers[..4] {
        assert_eq!(keys_on(server), Vec::<String>::new());
    }
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

/// A Redlock holder that never releases (a crashed process): its waiter
/// takes the lock once the holder's lease runs out, not a retry delay
/// later. The attempts it makes while waiting learn the holder's lease
/// (`PTTL`); a first attempt, and `try_lock`, send the `SET` alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_waiter_takes_the_lock_when_the_holders_lease_runs_out() {
    let servers = RedisServer::start_many(5);
    let holder = Lock::with_options(
        sturdy_redlock(&servers).await,
        "lapsed",
        LockOptions::new().lease(Duration::from_secs(2)),
    )
    .expect("valid");
    // Without the holder's lease, the waiter would retry 10 to 30 s later.
    let waiter = Lock::with_options(
        sturdy_redlock(&servers)
            .await
            .retry_delay(Duration::from_secs(20)),
        "lapsed",
        LockOptions::new().lease(Duration::from_secs(10)),
    )
    .expect("valid");
    // Held, and never released: its lease is not renewed either.
    let held = holder.try_lock().await.expect("backend").expect("free");
    assert!(
        waiter.try_lock().await.expect("backend").is_none(),
        "try_lock got a held lock"
    );
    // At most the 2 s lease, with a wide margin; 10 s without the `PTTL`.
    let guard = within(
        Duration::from_secs(5),
        "getting a lock whose lease ran out",
        waiter.lock(Duration::from_secs(10)),
    )
    .await
    .expect("backend")
    .expect("the holder's lease ran out within the wait");
    // The holder's late release finds the waiter's token, and keeps off it.
    assert!(!held.release().await.expect("backend"));
    assert!(guard.release().await.expect("backend"));
    assert_no_key_left(&servers);
}

/// A Redlock waiter is woken by the release message of the servers, not by
/// its retry delay, even with one server paused (its subscriber cannot be
/// reached, so the others must do). Holder and waiter are separate clients,
/// with connections of their own, as two processes would be.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_waiters_are_woken_by_the_release() {
    let servers = RedisServer::start_many(5);
    let options = LockOptions::new().lease(Duration::from_secs(60));
    let holder =
        Lock::with_options(sturdy_redlock(&servers).await, "woken", options).expect("valid");
    // Without a wake-up, the waiter would retry 10 to 30 s later.
    let waiter = Lock::with_options(
        sturdy_redlock(&servers)
            .await
            .retry_delay(Duration::from_secs(20)),
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
        // Long enough for the waiter to be refused, subscribe (giving up
        // on the paused server after its 500 ms timeout) and wait.
        tokio::time::sleep(Duration::from_secs(1)).await;
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
    let holder = Lock::with_options(sturdy_redlock(&servers[..3]).await, "minority", options)
        .expect("valid");
    let guard = holder.try_lock().await.expect("backend").expect("free");
    let waiter = Lock::with_options(
        sturdy_redlock(&servers)
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

/// An acquire of each kind whose answer comes too late (the server is 500
/// ms away, the client waits 200 ms) fails with `Error::Timeout`, but it is
/// still carried out when it reaches the server; the cleanup sent after it
/// on the same connection then gives it back, so a nearby client gets the
/// lock at once rather than after the 30 s lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_acquire_of_every_kind_is_given_back() {
    let server = RedisServer::start();
    // The cleanup must leave the client within its own timeout (redis-rs
    // drops a queued command whose caller stopped waiting): a wide one
    // keeps a busy machine's scheduling delays from deciding the test.
    let proxy = DelayProxy::to_server(&server, Duration::from_millis(250));
    let timeout = Duration::from_millis(200);
    let config = RedisConfig::default()
        .response_timeout(timeout)
        .connect_timeout(Duration::from_secs(5));
    let far =
        RedisBackend::connect_with(redis::Client::open(proxy.url()).expect("proxy url"), config)
            .await
            .expect("connect through the proxy");
    let near = RedisBackend::connect(&server.url()).await.expect("connect");
    let lease = LockOptions::new().lease(Duration::from_secs(30));
    let one = std::num::NonZeroU32::MIN;
    for kind in ["plain", "fair", "reentrant", "semaphore"] {
        // Every script of the kind is loaded, as on a server in use: the
        // late acquire is carried out, not refused with `NOSCRIPT`.
        let name = format!("warm-{kind}");
        let attempt = async |backend: &RedisBackend, name: &str| -> Result<bool, Error> {
            let taken = match kind {
                "plain" => {
                    Lock::with_options(backend.clone(), name, lease)?
                        .try_lock()
                        .await?
                }
                "fair" => {
                    Lock::with_options(backend.clone(), name, lease.fair(true))?
                        .try_lock()
                        .await?
                }
                "reentrant" => {
                    ReentrantLock::with_options(backend.clone(), name, lease)?
                        .try_lock(&Owner::new())
                        .await?
                }
                _ => {
                    lock_core::lock::Semaphore::with_options(backend.clone(), name, one, lease)?
                        .try_acquire()
                        .await?
                }
            };
            match taken {
                Some(guard) => Ok(guard.release().await?),
                None => Ok(false),
            }
        };
        assert!(
            attempt(&near, &name).await.expect("warm-up"),
            "{kind}: warm-up"
        );

        match attempt(&far, kind).await {
            Err(Error::Timeout(after)) => assert_eq!(after, timeout, "{kind}"),
            other => panic!("{kind}: expected a timeout, got {other:?}"),
        }
        // Let the late acquire and its cleanup reach the server (each 250
        // ms away; a nearby attempt made earlier could take the lock before
        // the late acquire lands, and prove nothing).
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(
            attempt(&near, kind).await.expect("backend"),
            "{kind}: still held after a timed-out acquire"
        );
    }
}
