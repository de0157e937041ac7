//! Grants that arrive late, on real `redis-server` processes: a fair lock
//! handed to a waiter whose messages are slower than its lease, wake-ups
//! that come after someone else took the lock, acquires answered after
//! their lease ran out, and waiters stopped (SIGSTOP) while the lock passes
//! to them. In none of them may a client hold a guard that counts as valid
//! while another client holds the lock, and no acquire returns a guard
//! whose lease has already run out.

use std::num::NonZeroU32;
use std::process::Stdio;
use std::time::Duration;

use lock_core::backend::{RedisBackend, RedisConfig};
use lock_core::lock::backend::FAIR_SLOT;
use lock_core::lock::{Lock, LockGuard, LockOptions, Owner, ReentrantLock, Semaphore};
use lock_tests::latency::DelayProxy;
use lock_tests::{RedisServer, redis_backend};
use rand::Rng;
use redis::AsyncCommands;
use redis::aio::ConnectionManager;
use tokio::io::{AsyncBufReadExt, BufReader};

const WORKER: &str = env!("CARGO_BIN_EXE_lock-worker");

/// A backend whose commands go straight to `server` and whose pub/sub
/// subscriber (wake-ups and handoff messages) goes through `proxy`.
async fn slow_messages(server: &RedisServer, proxy: &DelayProxy) -> RedisBackend {
    let config = RedisConfig::default().response_timeout(Duration::from_secs(5));
    let direct = ConnectionManager::new(server.client())
        .await
        .expect("connect to redis");
    let subscriber = redis::Client::open(proxy.url()).expect("proxy url");
    RedisBackend::from_connection(direct, config).with_subscriber(subscriber)
}

/// Redis's clock, in milliseconds.
async fn redis_now_ms(conn: &mut ConnectionManager) -> i64 {
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query_async(conn).await.expect("TIME");
    secs * 1000 + micros / 1000
}

/// What a client that just got `guard` may count on, checked against Redis:
/// a guard that says it is valid must name the lock's current holder.
async fn check_sole_holder(
    conn: &mut ConnectionManager,
    key: &str,
    guard: &LockGuard<RedisBackend>,
) -> Result<(), String> {
    if guard.is_lost() {
        return Err(format!("{key}: a guard whose lease had already run out"));
    }
    let valid = guard.valid_for();
    let holder: Option<String> = conn.get(key).await.expect("GET");
    // A guard about to run out may see its key go in between.
    if valid > Duration::from_millis(20) && holder.as_deref() != Some(guard.token()) {
        return Err(format!(
            "{key}: a guard valid for {valid:?} while {holder:?} holds the lock"
        ));
    }
    Ok(())
}

/// Holds the lock as soon as it is free, for `hold`, polling every 5 ms
/// for at most 5 s; says whether it got it.
async fn take_when_free(lock: Lock<RedisBackend>, hold: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while tokio::time::Instant::now() < deadline {
        if let Some(guard) = lock.try_lock().await.expect("backend") {
            tokio::time::sleep(hold).await;
            drop(guard.release().await);
            return true;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    false
}

/// One trial of a fair lock handed to a waiter W whose handoff message
/// takes longer than W's 500 ms lease. H holds; W waits in line; H releases
/// `phase` after one of W's attempts, which hands the lock to W; the
/// handoff lapses before its message arrives, X takes the lock, W's next
/// attempt (a second after its last) is answered busy, and only then does
/// the message arrive. W must not take that message for a grant.
async fn late_handoff_trial(
    near: RedisBackend,
    far: RedisBackend,
    name: String,
    phase: Duration,
) -> Result<(), String> {
    let key = format!("lock:{{{name}}}:flock");
    let queue = format!("lock:{{{name}}}:flock:queue");
    let deadlines = format!("lock:{{{name}}}:flock:deadlines");
    let mut conn = near.connection();
    let long = LockOptions::new().lease(Duration::from_secs(30)).fair(true);
    let holder = Lock::with_options(near.clone(), &name, long).expect("valid");
    let holding = holder.try_lock().await.expect("backend").expect("free");
    let short = LockOptions::new()
        .lease(Duration::from_millis(500))
        .fair(true);
    let waiter = Lock::with_options(far, &name, short).expect("valid");
    let waiting = tokio::spawn(async move { waiter.lock(Duration::from_secs(30)).await });
    // W's token heads the line; each of its attempts moves its place's
    // deadline to Redis time + FAIR_SLOT.
    let mut token = None;
    for _ in 0..1000 {
        token = conn.lindex(&queue, 0).await.expect("LINDEX");
        if token.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let token: String = token.ok_or(format!("{name}: W never joined the line"))?;
    let first: Option<i64> = conn.zscore(&deadlines, &token).await.expect("ZSCORE");
    // The first attempts wait for W's subscription (a connection and a
    // SUBSCRIBE, 1.8 s a round trip through the proxy).
    let mut attempt = None;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while tokio::time::Instant::now() < deadline {
        let now: Option<i64> = conn.zscore(&deadlines, &token).await.expect("ZSCORE");
        if now.is_some() && now != first {
            attempt = now;
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let slot = i64::try_from(FAIR_SLOT.as_millis()).expect("small");
    let attempt = attempt.ok_or(format!("{name}: W made no second attempt"))? - slot;
    let release_at = attempt + i64::try_from(phase.as_millis()).expect("small");
    let wait = release_at - redis_now_ms(&mut conn).await;
    if wait > 0 {
        tokio::time::sleep(Duration::from_millis(wait.unsigned_abs())).await;
    }
    assert!(holding.release().await.expect("backend"));
    let taker = Lock::with_options(near, &name, long).expect("valid");
    let taking = tokio::spawn(take_when_free(taker, Duration::from_millis(1200)));
    let result = match waiting.await.expect("join").expect("backend") {
        Some(guard) => {
            let checked = check_sole_holder(&mut conn, &key, &guard).await;
            drop(guard.release().await);
            checked
        }
        None => Err(format!("{name}: W never got the lock")),
    };
    taking.await.expect("join");
    result
}

/// The fair lock's handoff is tied to the attempt it answers: in 50 trials
/// where the handoff message reaches the waiter only after its claim
/// lapsed, another client took the lock, and the waiter's next attempt was
/// answered busy, the waiter never holds a guard that counts as valid while
/// the other client holds the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_fair_handoff_never_makes_a_second_holder() {
    const TRIALS: usize = 50;
    const AT_ONCE: usize = 25;
    let (server, near) = redis_backend().await;
    let proxy = DelayProxy::to_server(&server, Duration::from_millis(900));
    let far = slow_messages(&server, &proxy).await;
    let mut failures = Vec::new();
    for batch in 0..TRIALS / AT_ONCE {
        let trials: Vec<_> = (0..AT_ONCE)
            .map(|i| {
                // W's next attempt comes 550 to 850 ms after the release:
                // after its 500 ms claim lapsed, before the message came.
                let phase = Duration::from_millis(rand::rng().random_range(150..=450));
                let name = format!("late-handoff-{batch}-{i}");
                tokio::spawn(late_handoff_trial(near.clone(), far.clone(), name, phase))
            })
            .collect();
        for trial in trials {
            if let Err(failure) = trial.await.expect("join") {
                failures.push(failure);
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {TRIALS}: {failures:#?}",
        failures.len()
    );
}

/// The same invariant for the plain lock, whose waiters are woken by a
/// release message and then try for themselves: a wake-up that arrives
/// after another client took the lock never makes a second holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_wake_up_never_makes_a_second_holder() {
    const TRIALS: usize = 20;
    let (server, near) = redis_backend().await;
    let proxy = DelayProxy::to_server(&server, Duration::from_millis(900));
    let far = slow_messages(&server, &proxy).await;
    let trials: Vec<_> = (0..TRIALS)
        .map(|i| {
            let (near, far) = (near.clone(), far.clone());
            tokio::spawn(async move {
                let name = format!("late-wake-{i}");
                let key = format!("lock:{{{name}}}:lock");
                let long = LockOptions::new().lease(Duration::from_secs(30));
                let holder = Lock::with_options(near.clone(), &name, long).expect("valid");
                let holding = holder.try_lock().await.expect("backend").expect("free");
                let short = LockOptions::new().lease(Duration::from_millis(500));
                let waiter = Lock::with_options(far, &name, short).expect("valid");
                let waiting =
                    tokio::spawn(async move { waiter.lock(Duration::from_secs(15)).await });
                // Subscribed (1.8 s through the proxy) and waiting.
                let pause = rand::rng().random_range(2000..=2600);
                tokio::time::sleep(Duration::from_millis(pause)).await;
                assert!(holding.release().await.expect("backend"));
                let taking = tokio::spawn(take_when_free(holder, Duration::from_millis(1200)));
                let mut conn = near.connection();
                let result = match waiting.await.expect("join").expect("backend") {
                    Some(guard) => {
                        let checked = check_sole_holder(&mut conn, &key, &guard).await;
                        drop(guard.release().await);
                        checked
                    }
                    None => Err(format!("{name}: the waiter never got the lock")),
                };
                assert!(taking.await.expect("join"), "{name}: X never took the lock");
                result
            })
        })
        .collect();
    let mut failures = Vec::new();
    for trial in trials {
        if let Err(failure) = trial.await.expect("join") {
            failures.push(failure);
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// A client whose every answer comes after its lease ran out (150 ms each
/// way to Redis, a 200 ms lease) is never handed a guard: each grant is
/// given back, and the acquire keeps trying until its wait is over. The
/// lock is left free for others, for every kind of lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_seen_after_their_lease_are_given_back() {
    let (server, near) = redis_backend().await;
    let proxy = DelayProxy::to_server(&server, Duration::from_millis(150));
    let config = RedisConfig::default().response_timeout(Duration::from_secs(5));
    let slow = RedisBackend::connect_with(redis::Client::open(proxy.url()).expect("url"), config)
        .await
        .expect("connect through the proxy");
    let lease = LockOptions::new().lease(Duration::from_millis(200));
    let wait = Duration::from_millis(1500);
    let one = NonZeroU32::MIN;
    for kind in ["plain", "fair", "reentrant", "semaphore"] {
        let name = format!("stale-{kind}");
        let started = tokio::time::Instant::now();
        let (try_now, waited) = match kind {
            "reentrant" => {
                let lock = ReentrantLock::with_options(slow.clone(), &name, lease).expect("valid");
                let owner = Owner::new();
                let now = lock.try_lock(&owner).await.expect("backend");
                (now, lock.lock(&owner, wait).await.expect("backend"))
            }
            "semaphore" => {
                let sem = Semaphore::with_options(slow.clone(), &name, one, lease).expect("valid");
                let now = sem.try_acquire().await.expect("backend");
                (now, sem.acquire(wait).await.expect("backend"))
            }
            _ => {
                let options = lease.fair(kind == "fair");
                let lock = Lock::with_options(slow.clone(), &name, options).expect("valid");
                let now = lock.try_lock().await.expect("backend");
                (now, lock.lock(wait).await.expect("backend"))
            }
        };
        if let Some(guard) = try_now.or(waited) {
            panic!(
                "{kind}: a guard lost={} valid for {:?} after a 300 ms round trip on a 200 ms lease",
                guard.is_lost(),
                guard.valid_for()
            );
        }
        assert!(
            started.elapsed() >= wait,
            "{kind}: gave up after {:?}, before its wait was over",
            started.elapsed()
        );
        // What the last grant took was given back: the lock is free.
        let free = match kind {
            "reentrant" => ReentrantLock::with_options(near.clone(), &name, lease)
                .expect("valid")
                .try_lock(&Owner::new())
                .await
                .expect("backend"),
            "semaphore" => Semaphore::with_options(near.clone(), &name, one, lease)
                .expect("valid")
                .try_acquire()
                .await
                .expect("backend"),
            _ => Lock::with_options(near.clone(), &name, lease.fair(kind == "fair"))
                .expect("valid")
                .try_lock()
                .await
                .expect("backend"),
        };
        assert!(free.is_some(), "{kind}: the lock was left taken");
    }
}

/// Starts `lock-worker wait` on a lock of `kind` with a 300 ms lease, and
/// returns it once it has started waiting.
async fn start_waiter(
    server: &RedisServer,
    name: &str,
    kind: &str,
) -> (
    tokio::process::Child,
    tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
) {
    let mut child = tokio::process::Command::new(WORKER)
        .args(["wait", &server.url(), name, "300", kind, "8000"])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("cannot start lock-worker");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .expect("worker did not start")
        .expect("read");
    assert_eq!(line.as_deref(), Some("waiting"));
    (child, lines)
}

fn signal(child: &tokio::process::Child, signal: &str) {
    let pid = child.id().expect("running").to_string();
    let status = std::process::Command::new("kill")
        .args([&format!("-{signal}"), &pid])
        .status()
        .expect("kill");
    assert!(status.success(), "kill -{signal} {pid}");
}

/// Two processes: A (this one) holds, B waits; B is stopped for a second,
/// A releases, B resumes. B never gets a guard that has already run out,
/// for plain, fair and reentrant locks. For the fair lock a third client C
/// waits behind B: the lock handed to the stopped B comes to C once B's
/// claim (its 300 ms lease) lapses, and B, resumed while C holds it, gets
/// no guard until C lets go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_waiter_never_gets_a_lost_guard() {
    let (server, backend) = redis_backend().await;
    let mut conn = backend.connection();
    for kind in ["plain", "fair", "reentrant"] {
        let name = format!("stopped-{kind}");
        let long = LockOptions::new().lease(Duration::from_secs(30));
        let owner = Owner::new();
        let (holding, channel) = match kind {
            "reentrant" => {
                let lock =
                    ReentrantLock::with_options(backend.clone(), &name, long).expect("valid");
                let guard = lock.try_lock(&owner).await.expect("backend").expect("free");
                (guard, format!("lock:{{{name}}}:rlock:released"))
            }
            _ => {
                let options = long.fair(kind == "fair");
                let lock = Lock::with_options(backend.clone(), &name, options).expect("valid");
                let guard = lock.try_lock().await.expect("backend").expect("free");
                (guard, format!("lock:{{{name}}}:released"))
            }
        };
        let (b, mut lines) = start_waiter(&server, &name, kind).await;
        let waiting = lock_tests::eventually(Duration::from_secs(5), async || {
            if kind == "fair" {
                let len: usize = conn
                    .llen(format!("lock:{{{name}}}:flock:queue"))
                    .await
                    .expect("LLEN");
                len == 1
            } else {
                let (_, subscribers): (String, usize) = redis::cmd("PUBSUB")
                    .arg("NUMSUB")
                    .arg(&channel)
                    .query_async(&mut conn)
                    .await
                    .expect("PUBSUB NUMSUB");
                subscribers == 1
            }
        })
        .await;
        assert!(waiting, "{kind}: B never started waiting");
        // Its attempt once subscribed has been answered.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let c = (kind == "fair").then(|| {
            let options = long.fair(true);
            let lock = Lock::with_options(backend.clone(), &name, options).expect("valid");
            tokio::spawn(async move { lock.lock(Duration::from_secs(5)).await })
        });
        if c.is_some() {
            let queue = format!("lock:{{{name}}}:flock:queue");
            let behind = lock_tests::eventually(Duration::from_secs(5), async || {
                let len: usize = conn.llen(&queue).await.expect("LLEN");
                len == 2
            })
            .await;
            assert!(behind, "C never joined the line");
        }
        signal(&b, "STOP");
        assert!(holding.release().await.expect("backend"));
        let c_guard = match c {
            Some(c) => {
                let guard = tokio::time::timeout(Duration::from_millis(2500), c)
                    .await
                    .expect("the stopped B held the line")
                    .expect("join")
                    .expect("backend")
                    .expect("C never got the lock");
                Some(guard)
            }
            None => None,
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        signal(&b, "CONT");
        if let Some(guard) = c_guard {
            // B is awake while C holds the lock.
            tokio::time::sleep(Duration::from_millis(500)).await;
            assert!(!guard.is_lost(), "C lost the lock while B was stopped");
            assert!(guard.release().await.expect("backend"));
        }
        let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("{kind}: B never answered"))
            .expect("read")
            .unwrap_or_default();
        assert!(
            line.starts_with("got lost=0 holder=1"),
            "{kind}: B's acquire returned {line:?}"
        );
        let out = b.wait_with_output().await.expect("worker");
        assert!(out.status.success(), "{kind}: B failed: {out:?}");
    }
}
