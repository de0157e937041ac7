//! Promises every lock backend keeps, whatever the timing (part of
//! [`lock_suite!`](crate::lock_suite!)): a retried release answers as the
//! first one did, a multi-lock never returns a lease that already ran
//! out, and any wait may be as long as `Duration::MAX`.

use std::num::NonZeroU32;
use std::time::Duration;

use lock_core::lock::backend::Kind;
use lock_core::lock::{
    Lock, LockBackend, LockOptions, MultiLock, Owner, ReadWriteLock, ReentrantLock, Semaphore,
};

/// The waits every acquire is tried with: none, a tiny one, and the longest.
const WAITS: [Duration; 3] = [Duration::ZERO, Duration::from_nanos(1), Duration::MAX];

/// A release sent again after its answer was lost answers `true`, even
/// when other releases of the same lock came in between.
pub async fn a_retried_release_answers_as_the_first<B: LockBackend>(backend: B) {
    let lock = Lock::new(backend.clone(), "retried-release").expect("valid");
    let first = lock.try_lock().await.expect("backend").expect("free");
    let first_token = first.token().to_owned();
    assert!(first.release().await.expect("backend"));
    let second = lock.try_lock().await.expect("backend").expect("free");
    assert!(second.release().await.expect("backend"));
    let name = lock.name().clone();
    assert!(
        backend
            .release(Kind::Plain, &name, &first_token)
            .await
            .expect("backend"),
        "a release retried after another one must answer as it did the first time"
    );
    assert!(
        !backend
            .release(Kind::Plain, &name, "never-held-token")
            .await
            .expect("backend")
    );

    let permits = NonZeroU32::new(2).expect("nonzero");
    let semaphore = Semaphore::new(backend.clone(), "retried-release-sem", permits).expect("valid");
    let a = semaphore
        .try_acquire()
        .await
        .expect("backend")
        .expect("free");
    let kind = a.kind();
    let a_token = a.token().to_owned();
    assert!(a.release().await.expect("backend"));
    let b = semaphore
        .try_acquire()
        .await
        .expect("backend")
        .expect("free");
    assert!(b.release().await.expect("backend"));
    let name = semaphore.name().clone();
    assert!(
        backend
            .release(kind, &name, &a_token)
            .await
            .expect("backend"),
        "a semaphore's release retried after another one must answer as the first"
    );
}

/// With a fixed lease shorter than the wait, a multi-lock whose first
/// lease ran out while it waited for the second name (and which another
/// client then took) returns nothing rather than a guard for a lock held
/// by someone else.
pub async fn a_multi_lock_never_returns_a_lapsed_lease<B: LockBackend>(backend: B) {
    let lease = Duration::from_millis(400);
    let other = LockOptions::new().lease(Duration::from_secs(10));
    let b = Lock::with_options(backend.clone(), "multi-lapse-b", other).expect("valid");
    let b_guard = b.try_lock().await.expect("backend").expect("free");
    let both = MultiLock::with_options(
        backend.clone(),
        ["multi-lapse-a", "multi-lapse-b"],
        LockOptions::new().lease(lease),
    )
    .expect("valid");
    let taking = tokio::spawn(async move { both.lock(Duration::from_millis(1500)).await });
    // The multi-lock holds "a" and waits for "b"; its lease on "a" runs
    // out, and another client takes "a".
    tokio::time::sleep(lease + Duration::from_millis(200)).await;
    let a = Lock::with_options(backend.clone(), "multi-lapse-a", other).expect("valid");
    let a_guard = a
        .lock(Duration::from_secs(2))
        .await
        .expect("backend")
        .expect("free once the multi-lock's lease ran out");
    assert!(b_guard.release().await.expect("backend"));
    match taking.await.expect("task").expect("backend") {
        None => {}
        Some(held) => {
            assert!(
                held.guards()
                    .iter()
                    .all(|guard| !guard.is_lost() && !guard.valid_for().is_zero()),
                "a multi-lock returned a lease that had run out: {:?}",
                held.guards()
                    .iter()
                    .map(|g| (g.name().as_str().to_owned(), g.valid_for()))
                    .collect::<Vec<_>>()
            );
            panic!("a multi-lock returned \"multi-lapse-a\" while another client held it");
        }
    }
    assert!(a_guard.release().await.expect("backend"));
}

/// Every acquire that takes a wait accepts none, a tiny one and
/// `Duration::MAX`, and takes a free lock with each.
pub async fn any_wait_is_accepted<B: LockBackend>(backend: B) {
    let owner = Owner::new();
    let permits = NonZeroU32::new(3).expect("nonzero");
    for (i, wait) in WAITS.into_iter().enumerate() {
        let name = format!("waits-{i}");
        let lock = Lock::new(backend.clone(), &name).expect("valid");
        let guard = lock.lock(wait).await.expect("backend");
        assert!(guard.expect("free").release().await.expect("backend"));
        let ran = lock.run(wait, async { 7 }).await.expect("backend");
        assert_eq!(ran, Some(7), "{wait:?}");

        let multi = MultiLock::new(backend.clone(), [format!("{name}-x"), format!("{name}-y")])
            .expect("valid");
        let held = multi.lock(wait).await.expect("backend").expect("free");
        assert!(held.release().await.expect("backend"), "{wait:?}");

        let reentrant = ReentrantLock::new(backend.clone(), format!("{name}-r")).expect("valid");
        let guard = reentrant.lock(&owner, wait).await.expect("backend");
        assert!(guard.expect("free").release().await.expect("backend"));

        let rw = ReadWriteLock::new(backend.clone(), format!("{name}-rw")).expect("valid");
        let read = rw.read(&owner, wait).await.expect("backend").expect("free");
        assert!(read.release().await.expect("backend"));
        let write = rw
            .write(&owner, wait)
            .await
            .expect("backend")
            .expect("free");
        assert!(write.release().await.expect("backend"));

        let semaphore =
            Semaphore::new(backend.clone(), format!("{name}-s"), permits).expect("valid");
        let one = semaphore
            .acquire(wait)
            .await
            .expect("backend")
            .expect("free");
        let two = semaphore
            .acquire_many(NonZeroU32::new(2).expect("nonzero"), wait)
            .await
            .expect("backend")
            .expect("free");
        assert!(one.release().await.expect("backend"));
        assert!(two.release().await.expect("backend"));
    }
}
