//! The conformance suite of what the peers' users ask for: releases that
//! can be retried, lock queries, semaphore permits by count, work run
//! under a lock, several locks at once, read-write locks (cases in
//! [`read_write_suite`](crate::read_write_suite)), fair locks an owner
//! re-enters ([`fair_reentrant_suite`](crate::fair_reentrant_suite)),
//! bursts apart from rates, and resets. Every backend must pass it.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use lock_core::Error;
use lock_core::lock::{
    Lock, LockBackend, LockGuard, LockOptions, MultiLock, ReentrantLock, Semaphore,
};
use lock_core::rate::{Algorithm, Policy, Quota, RateBackend, RateLimiter};

use crate::within;

pub use crate::fair_reentrant_suite::*;
pub use crate::read_write_suite::*;

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN)
}

/// A release whose answer was lost and is sent again gets the first
/// answer (held), for every kind of lock; another token still gets "not
/// held".
pub async fn a_retried_release_gets_the_same_answer<B: LockBackend>(backend: B) {
    let lease = LockOptions::new().lease(Duration::from_secs(10));
    let plain = Lock::with_options(backend.clone(), "retried-plain", lease).expect("name");
    let fair = Lock::with_options(backend.clone(), "retried-fair", lease.fair(true)).expect("name");
    let reentrant =
        ReentrantLock::with_options(backend.clone(), "retried-re", lease).expect("name");
    let semaphore =
        Semaphore::with_options(backend.clone(), "retried-sem", nz(2), lease).expect("name");
    let owner = lock_core::lock::Owner::new();
    let guards: Vec<(&str, LockGuard<B>)> = vec![
        (
            "plain",
            plain.try_lock().await.expect("backend").expect("free"),
        ),
        (
            "fair",
            fair.try_lock().await.expect("backend").expect("free"),
        ),
        (
            "reentrant",
            reentrant
                .try_lock(&owner)
                .await
                .expect("backend")
                .expect("free"),
        ),
        (
            "semaphore",
            semaphore
                .try_acquire_many(nz(2))
                .await
                .expect("backend")
                .expect("free"),
        ),
    ];
    for (what, guard) in guards {
        let (kind, name, token) = (guard.kind(), guard.name().clone(), guard.token().to_owned());
        assert!(guard.release().await.expect("backend"), "{what}: held");
        assert!(
            backend.release(kind, &name, &token).await.expect("backend"),
            "{what}: the retried release was told the lock was not held"
        );
        assert!(
            !backend
                .release(kind, &name, "not-the-token")
                .await
                .expect("backend"),
            "{what}: another token's release"
        );
    }
    // Still remembered while someone else holds the lock.
    let first = plain.try_lock().await.expect("backend").expect("free");
    let token = first.token().to_owned();
    first.release().await.expect("backend");
    let second = plain.try_lock().await.expect("backend").expect("free");
    assert!(
        backend
            .release(first_kind(&plain), plain.name(), &token)
            .await
            .expect("backend")
    );
    assert!(
        plain.is_locked().await.expect("backend"),
        "the retry freed the new holder's lock"
    );
    second.release().await.expect("backend");
}

fn first_kind<B: LockBackend>(lock: &Lock<B>) -> lock_core::lock::backend::Kind {
    lock.kind()
}

/// Who holds a lock, and for how long still, for operators.
pub async fn lock_state_shows_the_holder<B: LockBackend>(backend: B) {
    let lease = Duration::from_secs(10);
    let lock = Lock::with_options(backend.clone(), "state", LockOptions::new().lease(lease))
        .expect("name");
    assert_eq!(lock.state().await.expect("backend"), None);
    assert!(!lock.is_locked().await.expect("backend"));
    let guard = lock.try_lock().await.expect("backend").expect("free");
    let state = lock.state().await.expect("backend").expect("held");
    assert_eq!(state.taken, 1);
    assert!(guard.token().starts_with(&state.holder), "{state:?}");
    assert!(state.holder.len() >= 8, "{state:?}");
    let remaining = state.remaining.expect("a lease");
    assert!(remaining <= lease && remaining > lease / 2, "{state:?}");
    guard.release().await.expect("backend");
    assert_eq!(lock.state().await.expect("backend"), None);

    let owner = lock_core::lock::Owner::new();
    let reentrant = ReentrantLock::new(backend.clone(), "state-re").expect("name");
    let a = reentrant
        .try_lock(&owner)
        .await
        .expect("backend")
        .expect("free");
    let b = reentrant
        .try_lock(&owner)
        .await
        .expect("backend")
        .expect("re-enter");
    let state = reentrant.state().await.expect("backend").expect("held");
    assert_eq!(state.taken, 1, "the owner counts once: {state:?}");
    a.release().await.expect("backend");
    b.release().await.expect("backend");
    assert_eq!(reentrant.state().await.expect("backend"), None);
}

/// Permits by count: all or none, the count available now, and a wait
/// for enough of them.
pub async fn semaphore_takes_many_at_once<B: LockBackend>(backend: B) {
    let sem = Semaphore::new(backend, "many", nz(4)).expect("name");
    assert_eq!(sem.available().await.expect("backend"), 4);
    let three = sem
        .try_acquire_many(nz(3))
        .await
        .expect("backend")
        .expect("free");
    assert_eq!(sem.available().await.expect("backend"), 1);
    assert!(
        sem.try_acquire_many(nz(2))
            .await
            .expect("backend")
            .is_none(),
        "two taken where one was free"
    );
    assert_eq!(
        sem.available().await.expect("backend"),
        1,
        "a refusal took some"
    );
    let one = sem
        .try_acquire()
        .await
        .expect("backend")
        .expect("the last one");
    assert_eq!(sem.available().await.expect("backend"), 0);
    assert!(matches!(
        sem.try_acquire_many(nz(5)).await,
        Err(Error::InvalidArgument { .. })
    ));
    // A waiter for two gets them when the three come back.
    let waiter = {
        let sem = sem.clone();
        tokio::spawn(async move { sem.acquire_many(nz(2), Duration::from_secs(5)).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    three.release().await.expect("backend");
    let two = waiter
        .await
        .expect("join")
        .expect("backend")
        .expect("two came back");
    assert_eq!(sem.available().await.expect("backend"), 1);
    two.release().await.expect("backend");
    one.release().await.expect("backend");
    assert_eq!(sem.available().await.expect("backend"), 4);
}

/// Work run under a lock: its output when it ends, nothing when the lock
/// is busy, a lease-lost error (and the work stopped) when the lease runs
/// out first; the lock is free after each.
pub async fn work_runs_under_the_lock<B: LockBackend>(backend: B) {
    let lock = Lock::new(backend.clone(), "scoped").expect("name");
    let out = lock
        .run(Duration::from_secs(1), async {
            assert!(
                lock.is_locked().await.expect("backend"),
                "run without the lock"
            );
            7
        })
        .await
        .expect("backend");
    assert_eq!(out, Some(7));
    assert!(!lock.is_locked().await.expect("backend"));

    let held = lock.try_lock().await.expect("backend").expect("free");
    let ran = AtomicBool::new(false);
    let out = lock
        .run(Duration::ZERO, async { ran.store(true, Ordering::SeqCst) })
        .await
        .expect("backend");
    assert_eq!(out, None);
    assert!(!ran.load(Ordering::SeqCst), "the work ran without the lock");
    held.release().await.expect("backend");

    // A fixed lease of 300 ms and work of 3 s: the work is stopped.
    let short = Lock::with_options(
        backend,
        "scoped-short",
        LockOptions::new().lease(Duration::from_millis(300)),
    )
    .expect("name");
    let finished = Arc::new(AtomicBool::new(false));
    let done = finished.clone();
    let work = short.run(Duration::ZERO, async move {
        tokio::time::sleep(Duration::from_secs(3)).await;
        done.store(true, Ordering::SeqCst);
    });
    let out = within(Duration::from_secs(2), "stopping the work", work).await;
    assert!(matches!(out, Err(Error::LeaseLost)), "{out:?}");
    assert!(!finished.load(Ordering::SeqCst));
}

/// Several locks at once: all or none, given back when one is busy.
pub async fn multi_lock_is_all_or_nothing<B: LockBackend>(backend: B) {
    let both = MultiLock::new(backend.clone(), ["multi-b", "multi-a", "multi-a"]).expect("names");
    let names: Vec<&str> = both.locks().iter().map(|l| l.name().as_str()).collect();
    assert_eq!(names, ["multi-a", "multi-b"], "taken by name, each once");
    let b = Lock::new(backend.clone(), "multi-b").expect("name");
    let a = Lock::new(backend.clone(), "multi-a").expect("name");
    let held_b = b.try_lock().await.expect("backend").expect("free");
    assert!(both.try_lock().await.expect("backend").is_none());
    assert!(
        !a.is_locked().await.expect("backend"),
        "a was kept though b was busy"
    );
    held_b.release().await.expect("backend");
    let guard = both.try_lock().await.expect("backend").expect("both free");
    assert_eq!(guard.guards().len(), 2);
    assert!(a.is_locked().await.expect("backend") && b.is_locked().await.expect("backend"));
    assert!(guard.release().await.expect("backend"));
    assert!(!a.is_locked().await.expect("backend") && !b.is_locked().await.expect("backend"));
    assert!(matches!(
        MultiLock::new(backend, Vec::<&str>::new()),
        Err(Error::InvalidArgument { .. })
    ));
}

/// Two callers locking `{a, b}` and `{b, a}` over and over never wait for
/// each other in a circle: both finish every round.
pub async fn crossed_multi_locks_never_deadlock<B: LockBackend>(backend: B) {
    let rounds = 40;
    let run = |names: [&'static str; 2]| {
        let multi = MultiLock::new(backend.clone(), names).expect("names");
        tokio::spawn(async move {
            for _ in 0..rounds {
                let guard = multi
                    .lock(Duration::from_secs(10))
                    .await
                    .expect("backend")
                    .expect("within 10 s");
                tokio::time::sleep(Duration::from_millis(2)).await;
                guard.release().await.expect("backend");
            }
        })
    };
    let (one, two) = (run(["cross-a", "cross-b"]), run(["cross-b", "cross-a"]));
    within(
        Duration::from_secs(60),
        "crossed multi-locks (deadlocked?)",
        async {
            one.await.expect("first");
            two.await.expect("second");
        },
    )
    .await;
}

/// A GCRA burst apart from its rate: the burst at once, then the rate; a
/// window with a burst is refused.
pub async fn a_burst_apart_from_the_rate<B: RateBackend>(backend: B) {
    let quota = Quota::per_second(nz(4)).burst(nz(6));
    let limiter = RateLimiter::new(
        backend.clone(),
        "burst",
        Policy::new(Algorithm::Gcra).quota(quota.clone()),
    )
    .expect("valid");
    for i in 0..6 {
        let d = limiter.check("k").await.expect("backend");
        assert!(d.allowed, "call {i} of the burst: {d:?}");
        assert_eq!(d.remaining, 5 - i, "{d:?}");
    }
    let refused = limiter.check("k").await.expect("backend");
    assert!(!refused.allowed);
    // One comes back every 250 ms.
    assert!(
        refused.retry_after <= Duration::from_millis(250),
        "{refused:?}"
    );
    tokio::time::sleep(refused.retry_after).await;
    assert!(limiter.check("k").await.expect("backend").allowed);
    assert!(
        !limiter.check("k").await.expect("backend").allowed,
        "more than one came back"
    );
    // A cost up to the burst is allowed; above it, never.
    assert!(matches!(
        limiter.check_cost("other", 7).await,
        Err(Error::InvalidArgument { .. })
    ));
    assert!(
        limiter
            .check_cost("other", 6)
            .await
            .expect("backend")
            .allowed
    );
    for algorithm in [Algorithm::FixedWindow, Algorithm::SlidingWindow] {
        let policy = Policy::new(algorithm).quota(quota.clone());
        assert!(matches!(
            RateLimiter::new(backend.clone(), "burst-window", policy),
            Err(Error::InvalidArgument { .. })
        ));
    }
}

/// A reset forgets a caller under every quota, and no other caller.
pub async fn a_reset_forgets_the_caller<B: RateBackend>(backend: B) {
    for algorithm in [
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::Gcra,
    ] {
        let policy = Policy::new(algorithm)
            .quota(Quota::per_hour(nz(2)))
            .quota(Quota::per_day(nz(3)));
        let scope = format!("reset-{algorithm:?}");
        let limiter = RateLimiter::new(backend.clone(), &scope, policy).expect("valid");
        for who in ["ann", "bob"] {
            for _ in 0..2 {
                assert!(limiter.check(who).await.expect("backend").allowed);
            }
            assert!(!limiter.check(who).await.expect("backend").allowed);
        }
        limiter.reset("ann").await.expect("backend");
        let d = limiter.check("ann").await.expect("backend");
        assert!(d.allowed, "{algorithm:?}: {d:?}");
        assert_eq!(d.remaining, 1, "{algorithm:?}: as a new caller: {d:?}");
        assert!(
            !limiter.check("bob").await.expect("backend").allowed,
            "{algorithm:?}: bob was reset too"
        );
    }
}

/// Allow-at-most grants what is left, up to what was asked, under every
/// algorithm and the tightest of several quotas; never more, and callers
/// racing for the last units share exactly what there was.
pub async fn allow_at_most_grants_what_is_left<B: RateBackend>(backend: B) {
    for algorithm in [
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::Gcra,
    ] {
        let policy = Policy::new(algorithm)
            .quota(Quota::per_hour(nz(10)))
            .quota(Quota::per_day(nz(5)));
        let scope = format!("at-most-{algorithm:?}");
        let limiter = RateLimiter::new(backend.clone(), &scope, policy).expect("valid");
        let mut granted = Vec::new();
        for _ in 0..3 {
            let decision = limiter.allow_at_most("ann", 3).await.expect("backend");
            assert_eq!(
                decision.allowed,
                decision.granted > 0,
                "{algorithm:?}: {decision:?}"
            );
            granted.push(decision.granted);
        }
        assert_eq!(granted, [3, 2, 0], "{algorithm:?}");
        let refused = limiter.allow_at_most("ann", 3).await.expect("backend");
        assert!(
            refused.retry_after > Duration::ZERO,
            "{algorithm:?}: {refused:?}"
        );
        assert!(
            !limiter.check("ann").await.expect("backend").allowed,
            "{algorithm:?}: more than the daily quota went out"
        );
        let plain = limiter.check_cost("bob", 2).await.expect("backend");
        assert_eq!(plain.granted, 2, "a plain check grants its cost");

        // Eight callers race for 50 units, 3 at most each time: together
        // they get exactly 50.
        let one = Policy::new(algorithm).quota(Quota::per_hour(nz(50)));
        let limiter =
            RateLimiter::new(backend.clone(), format!("{scope}-race"), one).expect("valid");
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let limiter = limiter.clone();
                tokio::spawn(async move {
                    let mut total = 0;
                    loop {
                        let d = limiter.allow_at_most("shared", 3).await.expect("backend");
                        if !d.allowed {
                            return total;
                        }
                        total += d.granted;
                    }
                })
            })
            .collect();
        let mut total = 0;
        for task in tasks {
            total += task.await.expect("task");
        }
        assert_eq!(total, 50, "{algorithm:?}: the racing callers got {total}");
    }
}

/// Instantiates the suite as `#[tokio::test]`s, as
/// [`lock_suite!`](crate::lock_suite!) does.
#[macro_export]
macro_rules! features_suite {
    ($setup:expr) => {
        $crate::features_suite!(@with @cases $setup);
    };
    (sequentially $backend:expr) => {
        $crate::features_suite!(@with @seq $backend);
    };
    (@with @$arm:ident $arg:expr) => {
        $crate::features_suite!(@$arm $arg;
            a_retried_release_gets_the_same_answer, lock_state_shows_the_holder,
            semaphore_takes_many_at_once, work_runs_under_the_lock,
            multi_lock_is_all_or_nothing, crossed_multi_locks_never_deadlock,
            a_burst_apart_from_the_rate, a_reset_forgets_the_caller,
            allow_at_most_grants_what_is_left, a_fair_lock_is_reentrant_for_its_owner,
            a_fair_reentry_keeps_its_own_fencing_token,
            readers_share_and_writers_exclude, a_waiting_writer_goes_before_new_readers,
            one_owner_reenters_either_side, readers_overlap_and_writers_are_not_starved,
            a_crashed_waiting_writer_holds_readers_back_only_until_its_place_lapses);
    };
    (@cases $setup:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let (_keep_alive, backend) = $setup.await;
                $crate::features_suite::$case(backend).await;
            }
        )*
    };
    (@seq $backend:expr; $($case:ident),* $(,)?) => {
        $(
            eprintln!("features_suite: {}", stringify!($case));
            $crate::features_suite::$case(($backend)(stringify!($case)).await).await;
        )*
    };
}
