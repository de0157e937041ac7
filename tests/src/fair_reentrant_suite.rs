//! A fair lock that its owner re-enters (run as part of
//! [`features_suite!`](crate::features_suite!)): the holder's owner
//! re-enters at once, even with others in line; others keep their order;
//! the lock goes on only when every acquisition of the owner is released.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::lock::{LockBackend, LockOptions, Owner, ReentrantLock};

/// Time for a spawned waiter to join the line (the line is not visible
/// from outside).
async fn settle() {
    tokio::time::sleep(Duration::from_millis(200)).await;
}

/// The owner re-enters past a line of two other owners, with its holding's
/// fencing token; releasing only the outer acquisition keeps the lock; the
/// line is then served in arrival order.
pub async fn a_fair_lock_is_reentrant_for_its_owner<B: LockBackend>(backend: B) {
    let options = LockOptions::new()
        .lease(Duration::from_secs(10))
        .fair(true)
        .fencing(true);
    let lock = ReentrantLock::with_options(backend, "fair-reentrant", options).expect("valid");
    let me = Owner::new();
    let outer = lock.try_lock(&me).await.expect("backend").expect("free");
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for who in ["first", "second"] {
        let (lock, order) = (lock.clone(), order.clone());
        waiters.push(tokio::spawn(async move {
            let guard = lock
                .lock(&Owner::new(), Duration::from_secs(10))
                .await
                .expect("backend")
                .expect("served within 10 s");
            order.lock().expect("order").push(who);
            tokio::time::sleep(Duration::from_millis(20)).await;
            guard.release().await.expect("backend");
        }));
        settle().await;
    }
    let inner = lock
        .try_lock(&me)
        .await
        .expect("backend")
        .expect("the owner re-enters past the line");
    assert_eq!(inner.fencing_token(), outer.fencing_token());
    let state = lock.state().await.expect("backend").expect("held");
    assert!(me.id().starts_with(&state.holder), "{state:?}");
    assert!(outer.release().await.expect("backend"));
    settle().await;
    assert!(
        order.lock().expect("order").is_empty(),
        "the line was served while the owner still held an acquisition"
    );
    assert!(
        lock.try_lock(&Owner::new())
            .await
            .expect("backend")
            .is_none()
    );
    assert!(inner.release().await.expect("backend"));
    for waiter in waiters {
        waiter.await.expect("waiter");
    }
    assert_eq!(*order.lock().expect("order"), ["first", "second"]);
    assert_eq!(lock.state().await.expect("backend"), None);
}

/// A re-entry gets its holding's own fencing token, even after a lock of
/// another kind under the same name took tokens from the shared counter
/// meanwhile.
pub async fn a_fair_reentry_keeps_its_own_fencing_token<B: LockBackend>(backend: B) {
    let options = LockOptions::new()
        .lease(Duration::from_secs(10))
        .fair(true)
        .fencing(true);
    let name = "fair-reentrant-fence";
    let lock = ReentrantLock::with_options(backend.clone(), name, options).expect("valid");
    let me = Owner::new();
    let outer = lock.try_lock(&me).await.expect("backend").expect("free");
    let granted = outer.fencing_token().expect("asked for");
    // Another kind of lock of the same name takes (and returns) tokens.
    let plain = lock_core::lock::Lock::with_options(
        backend,
        name,
        LockOptions::new()
            .fencing(true)
            .lease(Duration::from_secs(10)),
    )
    .expect("valid");
    for _ in 0..2 {
        let other = plain.try_lock().await.expect("backend").expect("free");
        assert!(other.fencing_token().expect("asked for") > granted);
        assert!(other.release().await.expect("backend"));
    }
    let inner = lock
        .try_lock(&me)
        .await
        .expect("backend")
        .expect("the owner re-enters");
    assert_eq!(
        inner.fencing_token(),
        Some(granted),
        "a re-entry must carry its holding's token"
    );
    assert!(inner.release().await.expect("backend"));
    assert!(outer.release().await.expect("backend"));
}
