//! The lock conformance suite: every [`LockBackend`] must pass it.
//!
//! Each function is one test case; [`lock_suite!`](crate::lock_suite!) turns
//! them into `#[tokio::test]`s for a backend.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lock_core::Error;
use lock_core::lock::backend::Kind;
use lock_core::lock::{Lock, LockBackend, LockOptions};
use rand::Rng;

pub use crate::guarantees_suite::*;
use crate::{eventually, within};

const LONG: Duration = Duration::from_secs(30);

fn fixed<B: LockBackend>(backend: &B, name: &str, lease: Duration) -> Lock<B> {
    Lock::with_options(backend.clone(), name, LockOptions::new().lease(lease))
        .unwrap_or_else(|e| panic!("lock {name}: {e}"))
}

fn watched<B: LockBackend>(backend: &B, name: &str, lease: Duration) -> Lock<B> {
    Lock::with_options(backend.clone(), name, LockOptions::new().watchdog(lease))
        .unwrap_or_else(|e| panic!("lock {name}: {e}"))
}

/// Tasks doing a non-atomic read-modify-write under the lock lose no update
/// and never overlap.
pub async fn mutual_exclusion<B: LockBackend>(backend: B) {
    const TASKS: u64 = 8;
    const ROUNDS: u64 = 100;
    let counter = Arc::new(AtomicU64::new(0));
    let inside = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        // Half the tasks use a watchdog lease, half a fixed one.
        let lock = if t % 2 == 0 {
            fixed(&backend, "exclusion", LONG)
        } else {
            watched(&backend, "exclusion", LONG)
        };
        let (counter, inside) = (counter.clone(), inside.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let guard = lock
                    .lock(LONG)
                    .await
                    .expect("backend failed")
                    .expect("lock not acquired within 30 s");
                assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                let seen = counter.load(Ordering::SeqCst);
                tokio::task::yield_now().await;
                counter.store(seen + 1, Ordering::SeqCst);
                inside.fetch_sub(1, Ordering::SeqCst);
                assert!(guard.release().await.expect("release failed"));
            }
        }));
    }
    for task in tasks {
        task.await.expect("task panicked");
    }
    assert_eq!(counter.load(Ordering::SeqCst), TASKS * ROUNDS);
}

/// A held lock is busy (`None`, not an error) for others; a bounded wait gives
/// up after its bound; release frees it.
pub async fn busy_is_a_value<B: LockBackend>(backend: B) {
    let lock = fixed(&backend, "busy", LONG);
    let guard = lock.try_lock().await.expect("backend").expect("free lock");
    assert!(lock.try_lock().await.expect("backend").is_none());
    let started = Instant::now();
    assert!(
        lock.lock(Duration::from_millis(200))
            .await
            .expect("backend")
            .is_none()
    );
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(200),
        "gave up after {waited:?}"
    );
    assert!(
        waited < Duration::from_secs(2),
        "gave up only after {waited:?}"
    );
    assert!(guard.release().await.expect("backend"));
    assert!(lock.try_lock().await.expect("backend").is_some());
}

/// Locks with different names do not exclude each other.
pub async fn names_are_independent<B: LockBackend>(backend: B) {
    let a = fixed(&backend, "indep:a", LONG)
        .try_lock()
        .await
        .expect("backend");
    let b = fixed(&backend, "indep:b", LONG)
        .try_lock()
        .await
        .expect("backend");
    assert!(a.is_some() && b.is_some());
}

/// A waiter is woken by the release, long before the holder's lease ends.
pub async fn release_wakes_waiter<B: LockBackend>(backend: B) {
    let lock = fixed(&backend, "wake", LONG);
    let guard = lock.try_lock().await.expect("backend").expect("free lock");
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move {
            let wait = lock.lock(LONG);
            let guard = within(
                Duration::from_secs(5),
                "a wait ended by a release (lease 30 s)",
                wait,
            )
            .await;
            guard.expect("backend").is_some()
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(guard.release().await.expect("backend"));
    let got = waiter.await.expect("waiter panicked");
    assert!(got, "waiter did not get the lock");
}

/// A holder that never releases (crashed) blocks waiters only until its lease ends.
pub async fn expiry_frees_waiters<B: LockBackend>(backend: B) {
    let lock = fixed(&backend, "crashed", Duration::from_millis(300));
    let guard = lock.try_lock().await.expect("backend").expect("free lock");
    // Simulate a crashed holder: the guard never runs its drop.
    std::mem::forget(guard);
    let got = within(
        Duration::from_secs(3),
        "a wait for a 300 ms lease",
        lock.lock(Duration::from_secs(10)),
    )
    .await;
    assert!(
        got.expect("backend").is_some(),
        "lock not free after the lease"
    );
}

/// An expired holder's release and extend report that it no longer owned the
/// lock, and leave the new holder alone.
pub async fn expired_holder_is_told<B: LockBackend>(backend: B) {
    let lock = fixed(&backend, "expired", Duration::from_millis(100));
    let old = lock.try_lock().await.expect("backend").expect("free lock");
    tokio::time::sleep(Duration::from_millis(250)).await;
    let new = fixed(&backend, "expired", LONG)
        .try_lock()
        .await
        .expect("backend")
        .expect("lease should have expired");
    assert!(
        !old.extend(LONG).await.expect("backend"),
        "stale extend succeeded"
    );
    assert!(old.is_lost());
    assert!(
        !old.release().await.expect("backend"),
        "stale release succeeded"
    );
    assert!(
        lock.try_lock().await.expect("backend").is_none(),
        "new holder lost it"
    );
    assert!(new.release().await.expect("backend"));
}

/// Release and extend with a token that does not hold the lock do nothing.
pub async fn non_owner_cannot_release<B: LockBackend>(backend: B) {
    let lock = fixed(&backend, "owned", LONG);
    let guard = lock.try_lock().await.expect("backend").expect("free lock");
    let name = lock.name();
    assert!(
        !backend
            .release(Kind::Plain, name, "not-the-token")
            .await
            .expect("backend")
    );
    assert!(
        !backend
            .extend(Kind::Plain, name, "not-the-token", LONG)
            .await
            .expect("backend")
    );
    assert!(lock.try_lock().await.expect("backend").is_none());
    assert!(guard.release().await.expect("backend"));
}

/// A fixed lease is reported lost when it runs out.
pub async fn fixed_lease_runs_out<B: LockBackend>(backend: B) {
    let lock = fixed(&backend, "fixed", Duration::from_millis(150));
    let guard = lock.try_lock().await.expect("backend").expect("free lock");
    assert!(!guard.is_lost());
    assert!(guard.valid_for() > Duration::ZERO);
    tokio::time::timeout(Duration::from_secs(3), guard.lost())
        .await
        .expect("lost() did not complete after the lease");
    assert!(guard.is_lost());
    assert_eq!(guard.valid_for(), Duration::ZERO);
    // The holder's view is conservative (measured from before the request),
    // so the store may keep the key a moment longer.
    let free = eventually(Duration::from_secs(1), async || {
        lock.try_lock().await.expect("backend").is_some()
    })
    .await;
    assert!(free, "lock still held 1 s after its lease ran out");
}

/// A manual extend keeps a fixed lease alive.
pub async fn extend_prolongs<B: LockBackend>(backend: B) {
    let lock = fixed(&backend, "extend", Duration::from_millis(200));
    let guard = lock.try_lock().await.expect("backend").expect("free lock");
    assert!(guard.extend(LONG).await.expect("backend"));
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(!guard.is_lost());
    assert!(lock.try_lock().await.expect("backend").is_none());
    assert!(guard.release().await.expect("backend"));
}

/// The watchdog keeps the lock well past its lease while the guard lives.
pub async fn watchdog_renews<B: LockBackend>(backend: B) {
    let lock = watched(&backend, "watchdog", Duration::from_millis(300));
    let guard = lock.try_lock().await.expect("backend").expect("free lock");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(!guard.is_lost(), "watchdog let the lease lapse");
    assert!(lock.try_lock().await.expect("backend").is_none());
    assert!(guard.release().await.expect("backend"));
}

/// A watched lock removed behind the holder's back is reported lost.
pub async fn watchdog_reports_removed_lock<B: LockBackend>(backend: B) {
    let lock = watched(&backend, "removed", Duration::from_millis(300));
    let guard = lock.try_lock().await.expect("backend").expect("free lock");
    assert!(lock.force_unlock().await.expect("backend"));
    tokio::time::timeout(Duration::from_secs(3), guard.lost())
        .await
        .expect("lease loss not reported");
    assert!(guard.is_lost());
    assert!(!guard.release().await.expect("backend"));
}

/// Dropping a guard releases the lock in the background, at once.
pub async fn drop_releases<B: LockBackend>(backend: B) {
    let lock = watched(&backend, "drop", LONG);
    let guard = lock.try_lock().await.expect("backend").expect("free lock");
    drop(guard);
    let free = eventually(Duration::from_secs(2), async || {
        lock.try_lock().await.expect("backend").is_some()
    })
    .await;
    assert!(
        free,
        "lock still held 2 s after its guard was dropped (lease 30 s)"
    );
}

/// Hundreds of `lock()` futures dropped at random points leave the lock free
/// at once, not only after its lease.
pub async fn cancelled_acquires_leave_it_free<B: LockBackend>(backend: B) {
    let lock = watched(&backend, "cancel", LONG);
    let mut tasks = Vec::new();
    for _ in 0..300 {
        let lock = lock.clone();
        let cut = Duration::from_micros(rand::rng().random_range(0..3000));
        tasks.push(tokio::spawn(async move {
            // Dropped guards release too; what matters is what is left behind.
            let _ = tokio::time::timeout(cut, lock.lock(LONG)).await;
        }));
    }
    for task in tasks {
        task.await.expect("task panicked");
    }
    let free = eventually(Duration::from_secs(3), async || {
        match lock.try_lock().await.expect("backend") {
            Some(guard) => guard.release().await.expect("backend"),
            None => false,
        }
    })
    .await;
    assert!(
        free,
        "lock still held after every acquire was cancelled (lease 30 s)"
    );
}

/// Fencing tokens grow with every acquisition; without fencing there are none.
pub async fn fencing_tokens_increase<B: LockBackend>(backend: B) {
    let options = LockOptions::new().lease(LONG).fencing(true);
    let lock = Lock::with_options(backend.clone(), "fenced", options).expect("valid");
    let mut last = 0;
    for _ in 0..5 {
        let guard = lock.try_lock().await.expect("backend").expect("free lock");
        let token = guard.fencing_token().expect("fencing token");
        assert!(token > last, "token {token} after {last}");
        last = token;
        assert!(guard.release().await.expect("backend"));
    }
    let plain = fixed(&backend, "unfenced", LONG);
    let guard = plain.try_lock().await.expect("backend").expect("free lock");
    assert_eq!(guard.fencing_token(), None);
}

/// Bad names and leases are typed errors, not panics.
pub async fn bad_input_is_rejected<B: LockBackend>(backend: B) {
    for name in [String::new(), "a{b}".into(), "}".into(), "x".repeat(513)] {
        assert!(
            matches!(
                Lock::new(backend.clone(), &name),
                Err(Error::InvalidName { .. })
            ),
            "name {name:?} accepted"
        );
    }
    for options in [
        LockOptions::new().lease(Duration::ZERO),
        LockOptions::new().watchdog(Duration::ZERO),
    ] {
        assert!(matches!(
            Lock::with_options(backend.clone(), "ok", options),
            Err(Error::InvalidArgument { .. })
        ));
    }
    let guard = fixed(&backend, "ok", LONG)
        .try_lock()
        .await
        .expect("backend")
        .expect("free lock");
    assert!(matches!(
        guard.extend(Duration::ZERO).await,
        Err(Error::InvalidArgument { .. })
    ));
}

/// Instantiates the lock conformance suite as `#[tokio::test]`s. `$setup` is
/// an expression producing a future of `(keep_alive, backend)`; `keep_alive`
/// (e.g. the redis-server) lives until the test ends.
#[macro_export]
macro_rules! lock_suite {
    ($setup:expr) => {
        $crate::lock_suite!(@with @cases $setup);
    };
    (sequentially $backend:expr) => {
        $crate::lock_suite!(@with @seq $backend);
    };
    (@with @$arm:ident $arg:expr) => {
        $crate::lock_suite!(@$arm $arg;
            mutual_exclusion, busy_is_a_value, names_are_independent,
            release_wakes_waiter, expiry_frees_waiters, expired_holder_is_told,
            non_owner_cannot_release, fixed_lease_runs_out, extend_prolongs,
            watchdog_renews, watchdog_reports_removed_lock, drop_releases,
            cancelled_acquires_leave_it_free, fencing_tokens_increase,
            bad_input_is_rejected, a_retried_release_answers_as_the_first,
            a_multi_lock_never_returns_a_lapsed_lease, any_wait_is_accepted);
    };
    (@seq $backend:expr; $($case:ident),* $(,)?) => {
        $(
            eprintln!("lock_suite: {}", stringify!($case));
            $crate::lock_suite::$case(($backend)(stringify!($case)).await).await;
        )*
    };
    (@cases $setup:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let (_keep_alive, backend) = $setup.await;
                $crate::lock_suite::$case(backend).await;
            }
        )*
    };
}
