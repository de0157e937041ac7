//! Conformance suite of the reentrant lock, the fair lock, the semaphore and
//! fencing: every [`LockBackend`] that offers them must pass it.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::Error;
use lock_core::lock::{
    Fence, Lock, LockBackend, LockOptions, MAX_PERMITS, Owner, ReentrantLock, Semaphore,
};
use rand::Rng;

use crate::{eventually, within};

const LONG: Duration = Duration::from_secs(30);

fn fair<B: LockBackend>(backend: &B, name: &str) -> Lock<B> {
    Lock::with_options(
        backend.clone(),
        name,
        LockOptions::new().lease(LONG).fair(true),
    )
    .unwrap_or_else(|e| panic!("fair lock {name}: {e}"))
}

fn permits(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN)
}

/// The same owner re-enters N times and needs N releases; another owner is
/// excluded until then.
pub async fn reentrant_reenters<B: LockBackend>(backend: B) {
    let lock = ReentrantLock::new(backend, "re").expect("valid");
    let (me, other) = (Owner::new(), Owner::new());
    let mut guards = Vec::new();
    for _ in 0..5 {
        guards.push(
            lock.try_lock(&me)
                .await
                .expect("backend")
                .expect("re-entry"),
        );
    }
    assert!(lock.try_lock(&other).await.expect("backend").is_none());
    let last = guards.pop().expect("guard");
    for guard in guards {
        assert!(guard.release().await.expect("backend"));
        assert!(
            lock.try_lock(&other).await.expect("backend").is_none(),
            "freed early"
        );
    }
    assert!(last.release().await.expect("backend"));
    assert!(lock.try_lock(&other).await.expect("backend").is_some());
}

/// Owners doing nested read-modify-writes exclude each other.
pub async fn reentrant_mutual_exclusion<B: LockBackend>(backend: B) {
    let lock = ReentrantLock::new(backend, "re-rmw").expect("valid");
    let counter = Arc::new(AtomicU64::new(0));
    let inside = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let (lock, counter, inside) = (lock.clone(), counter.clone(), inside.clone());
        tasks.push(tokio::spawn(async move {
            let owner = Owner::new();
            for _ in 0..50 {
                let outer = lock
                    .lock(&owner, LONG)
                    .await
                    .expect("backend")
                    .expect("busy");
                let inner = lock
                    .try_lock(&owner)
                    .await
                    .expect("backend")
                    .expect("re-entry");
                assert_eq!(
                    inside.fetch_add(1, Ordering::SeqCst),
                    0,
                    "two owners inside"
                );
                let seen = counter.load(Ordering::SeqCst);
                tokio::task::yield_now().await;
                counter.store(seen + 1, Ordering::SeqCst);
                inside.fetch_sub(1, Ordering::SeqCst);
                assert!(inner.release().await.expect("backend"));
                assert!(outer.release().await.expect("backend"));
            }
        }));
    }
    for task in tasks {
        task.await.expect("task panicked");
    }
    assert_eq!(counter.load(Ordering::SeqCst), 300);
}

/// Cancelled re-entries never release someone else's hold.
pub async fn reentrant_cancellation_keeps_the_count<B: LockBackend>(backend: B) {
    let lock = ReentrantLock::new(backend, "re-cancel").expect("valid");
    let me = Owner::new();
    let held = lock.try_lock(&me).await.expect("backend").expect("free");
    let mut tasks = Vec::new();
    for _ in 0..200 {
        let (lock, me) = (lock.clone(), me.clone());
        let cut = Duration::from_micros(rand::rng().random_range(0..2000));
        tasks.push(tokio::spawn(async move {
            let _ = tokio::time::timeout(cut, lock.lock(&me, LONG)).await;
        }));
    }
    for task in tasks {
        task.await.expect("task panicked");
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        lock.try_lock(&Owner::new())
            .await
            .expect("backend")
            .is_none(),
        "cancelled re-entries released the first hold"
    );
    assert!(held.release().await.expect("backend"));
    let free = eventually(Duration::from_secs(2), async || {
        lock.try_lock(&Owner::new())
            .await
            .expect("backend")
            .is_some()
    })
    .await;
    assert!(free, "lock still held after every acquisition ended");
}

/// Waiters that arrive one after another get a fair lock in arrival order.
pub async fn fair_lock_is_fifo<B: LockBackend>(backend: B) {
    let lock = fair(&backend, "fifo");
    let holder = lock.try_lock().await.expect("backend").expect("free");
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..5 {
        let (lock, order) = (lock.clone(), order.clone());
        waiters.push(tokio::spawn(async move {
            let guard = lock
                .lock(LONG)
                .await
                .expect("backend")
                .expect("busy for 30 s");
            order.lock().unwrap_or_else(|e| e.into_inner()).push(i);
            tokio::time::sleep(Duration::from_millis(20)).await;
            assert!(guard.release().await.expect("backend"));
        }));
        // Let each waiter join the line before the next arrives.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(holder.release().await.expect("backend"));
    for waiter in waiters {
        waiter.await.expect("waiter panicked");
    }
    assert_eq!(
        *order.lock().unwrap_or_else(|e| e.into_inner()),
        vec![0, 1, 2, 3, 4]
    );
}

/// A fair waiter that times out, or is cancelled, leaves the line at once:
/// the next waiter is not delayed past its own timeout.
pub async fn fair_lock_skips_waiters_that_left<B: LockBackend>(backend: B) {
    let lock = fair(&backend, "leave");
    let holder = lock.try_lock().await.expect("backend").expect("free");
    let impatient = {
        let lock = lock.clone();
        tokio::spawn(async move {
            let wait = lock.lock(Duration::from_millis(300));
            let got = within(Duration::from_secs(2), "giving up a wait of 300 ms", wait).await;
            got.expect("backend").is_none()
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let cancelled = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.lock(LONG).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let patient = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.lock(LONG).await.expect("backend").is_some() })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    cancelled.abort();
    let gave_up = impatient.await.expect("join");
    assert!(gave_up, "the impatient waiter should have given up");
    let got = within(
        Duration::from_secs(2),
        "the next waiter, past waiters that left, after the release",
        async {
            assert!(holder.release().await.expect("backend"));
            patient.await.expect("join")
        },
    )
    .await;
    assert!(got);
}

/// Tasks doing read-modify-writes under a fair lock lose no update.
pub async fn fair_mutual_exclusion<B: LockBackend>(backend: B) {
    let lock = fair(&backend, "fair-rmw");
    let counter = Arc::new(AtomicU64::new(0));
    let inside = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let (lock, counter, inside) = (lock.clone(), counter.clone(), inside.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..40 {
                let guard = lock.lock(LONG).await.expect("backend").expect("busy");
                assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                let seen = counter.load(Ordering::SeqCst);
                tokio::task::yield_now().await;
                counter.store(seen + 1, Ordering::SeqCst);
                inside.fetch_sub(1, Ordering::SeqCst);
                assert!(guard.release().await.expect("backend"));
            }
        }));
    }
    for task in tasks {
        task.await.expect("task panicked");
    }
    assert_eq!(counter.load(Ordering::SeqCst), 240);
}

/// Never more than N permit holders, and N are reached.
pub async fn semaphore_bounds_holders<B: LockBackend>(backend: B) {
    let sem = Semaphore::new(backend, "sem", permits(3)).expect("valid");
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..10 {
        let (sem, inside, most) = (sem.clone(), inside.clone(), most.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..15 {
                let permit = sem.acquire(LONG).await.expect("backend").expect("busy");
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                assert!(now <= 3, "{now} holders of 3 permits");
                tokio::time::sleep(Duration::from_millis(3)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                assert!(permit.release().await.expect("backend"));
            }
        }));
    }
    for task in tasks {
        task.await.expect("task panicked");
    }
    assert_eq!(
        most.load(Ordering::SeqCst),
        3,
        "the limit was never reached"
    );
    assert_eq!(sem.permits(), 3);
}

/// A semaphore has at most `MAX_PERMITS` permits, and a holder of all of
/// them takes and gives them back in one call each.
pub async fn semaphore_permits_are_bounded<B: LockBackend>(backend: B) {
    assert!(matches!(
        Semaphore::new(backend.clone(), "sem-big", permits(MAX_PERMITS + 1)),
        Err(Error::InvalidArgument { .. })
    ));
    let sem = Semaphore::new(backend, "sem-big", permits(MAX_PERMITS)).expect("valid");
    let all = sem
        .try_acquire_many(permits(MAX_PERMITS))
        .await
        .expect("backend")
        .expect("a free semaphore grants");
    assert!(sem.try_acquire().await.expect("backend").is_none());
    assert!(all.release().await.expect("backend"));
    assert!(sem.try_acquire().await.expect("backend").is_some());
}

/// A reentrant fair lock entered without fencing and re-entered by a lock
/// that asks for it hands the re-entry a fencing token, and a re-entry
/// that does not ask none.
pub async fn fair_reentry_with_fencing_gets_a_token<B: LockBackend>(backend: B) {
    let options = LockOptions::new().lease(LONG).fair(true);
    let plain =
        ReentrantLock::with_options(backend.clone(), "fair-fenced-re", options).expect("valid");
    let fenced = ReentrantLock::with_options(backend, "fair-fenced-re", options.fencing(true))
        .expect("valid");
    let me = Owner::new();
    let outer = plain.try_lock(&me).await.expect("backend").expect("free");
    let inner = fenced
        .try_lock(&me)
        .await
        .expect("backend")
        .expect("re-enters");
    assert!(
        inner.fencing_token().is_some(),
        "a fenced re-entry without a token"
    );
    let unasked = plain
        .try_lock(&me)
        .await
        .expect("backend")
        .expect("re-enters");
    assert_eq!(unasked.fencing_token(), None, "a token nobody asked for");
    assert!(unasked.release().await.expect("backend"));
    assert!(inner.release().await.expect("backend"));
    assert!(outer.release().await.expect("backend"));
}

/// A crashed holder's permit comes back when its lease ends; a watched one
/// stays taken.
pub async fn semaphore_permits_expire<B: LockBackend>(backend: B) {
    let options = LockOptions::new().lease(Duration::from_millis(300));
    let sem =
        Semaphore::with_options(backend.clone(), "sem-exp", permits(1), options).expect("valid");
    std::mem::forget(sem.try_acquire().await.expect("backend").expect("free"));
    assert!(sem.try_acquire().await.expect("backend").is_none());
    let acquired = within(
        Duration::from_secs(3),
        "a crashed holder's permit coming back",
        sem.acquire(Duration::from_secs(10)),
    )
    .await;
    assert!(acquired.expect("backend").is_some());

    let watched = LockOptions::new().watchdog(Duration::from_millis(300));
    let sem = Semaphore::with_options(backend, "sem-watch", permits(1), watched).expect("valid");
    let permit = sem.try_acquire().await.expect("backend").expect("free");
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert!(!permit.is_lost());
    assert!(
        sem.try_acquire().await.expect("backend").is_none(),
        "renewed permit was lost"
    );
    assert!(permit.release().await.expect("backend"));
}

/// A holder paused past its lease writes with a stale fencing token and is
/// refused; the new holder's write is accepted. Tokens grow for every kind
/// that has them.
pub async fn fencing_refuses_stale_holders<B: LockBackend>(backend: B) {
    let fence = Fence::new();
    let options = LockOptions::new()
        .lease(Duration::from_millis(200))
        .fencing(true);
    let lock = Lock::with_options(backend.clone(), "fenced-resource", options).expect("valid");
    let old = lock.try_lock().await.expect("backend").expect("free");
    let old_token = old.fencing_token().expect("token");
    // The old holder is paused past its lease...
    tokio::time::sleep(Duration::from_millis(300)).await;
    let new = lock.try_lock().await.expect("backend").expect("lease over");
    let new_token = new.fencing_token().expect("token");
    assert!(new_token > old_token);
    assert!(
        fence.admit(new_token).is_ok(),
        "the new holder's write was refused"
    );
    // ...and its late write is refused.
    let stale = fence.admit(old_token).expect_err("stale write accepted");
    assert_eq!((stale.token, stale.highest), (old_token, new_token));

    let fair_options = LockOptions::new().lease(LONG).fencing(true).fair(true);
    let fair = Lock::with_options(backend.clone(), "fenced-fair", fair_options).expect("valid");
    let a = fair.try_lock().await.expect("backend").expect("free");
    let ta = a.fencing_token().expect("token");
    drop(a.release().await);
    let b = fair.try_lock().await.expect("backend").expect("free");
    assert!(b.fencing_token().expect("token") > ta);

    reentry_keeps_the_fencing_token(backend).await;
}

/// A re-entry of a reentrant lock gets the token its owner already holds,
/// so the resource keeps admitting the owner's writes through every nested
/// acquisition; the next owner gets a larger one.
async fn reentry_keeps_the_fencing_token<B: LockBackend>(backend: B) {
    let fence = Fence::new();
    let re = ReentrantLock::with_options(backend, "fenced-re", LockOptions::new().fencing(true))
        .expect("valid");
    let me = Owner::new();
    let first = re.try_lock(&me).await.expect("backend").expect("free");
    let outer = first.fencing_token().expect("token");
    fence.admit(outer).expect("the owner's first write");
    let again = re.try_lock(&me).await.expect("backend").expect("re-entry");
    assert_eq!(
        again.fencing_token(),
        Some(outer),
        "re-entry took a new token"
    );
    fence
        .admit(outer)
        .expect("the owner's write after re-entry was refused");
    assert!(again.release().await.expect("backend"));
    assert_eq!(
        re.try_lock(&Owner::new())
            .await
            .expect("backend")
            .map(|g| g.token().to_owned()),
        None,
        "the outer acquisition still holds it"
    );
    assert!(first.release().await.expect("backend"));
    let next = re
        .try_lock(&Owner::new())
        .await
        .expect("backend")
        .expect("free");
    let next_token = next.fencing_token().expect("token");
    assert!(next_token > outer);
    fence.admit(next_token).expect("the next owner's write");
    assert!(
        fence.admit(outer).is_err(),
        "the old owner's write was admitted"
    );
}

/// Instantiates this suite as `#[tokio::test]`s.
#[macro_export]
macro_rules! kinds_suite {
    ($setup:expr) => {
        $crate::kinds_suite!(@with @cases $setup);
    };
    (sequentially $backend:expr) => {
        $crate::kinds_suite!(@with @seq $backend);
    };
    (@with @$arm:ident $arg:expr) => {
        $crate::kinds_suite!(@$arm $arg;
            reentrant_reenters, reentrant_mutual_exclusion,
            reentrant_cancellation_keeps_the_count, fair_lock_is_fifo,
            fair_lock_skips_waiters_that_left, fair_mutual_exclusion,
            semaphore_bounds_holders, semaphore_permits_expire,
            semaphore_permits_are_bounded, fair_reentry_with_fencing_gets_a_token,
            fencing_refuses_stale_holders);
    };
    (@seq $backend:expr; $($case:ident),* $(,)?) => {
        $(
            eprintln!("kinds_suite: {}", stringify!($case));
            $crate::kinds_suite::$case(($backend)(stringify!($case)).await).await;
        )*
    };
    (@cases $setup:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let (_keep_alive, backend) = $setup.await;
                $crate::kinds_suite::$case(backend).await;
            }
        )*
    };
}
