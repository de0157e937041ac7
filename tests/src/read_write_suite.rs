//! The read-write lock's conformance cases (run as part of
//! [`features_suite!`](crate::features_suite!)): readers share, writers
//! exclude, waiting writers go before new readers, one owner re-enters,
//! and under contention no writer waits for more than one batch of
//! readers.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lock_core::lock::backend::FAIR_SLOT;
use lock_core::lock::{LockBackend, LockOptions, Owner, ReadWriteLock};

use crate::within;

fn rw<B: LockBackend>(backend: &B, name: &str, options: LockOptions) -> ReadWriteLock<B> {
    ReadWriteLock::with_options(backend.clone(), name, options).expect("valid")
}

/// Readers share the lock, a writer has it alone, fencing tokens come
/// with the write side only, the state counts holders, and a retried
/// release gets the first answer.
pub async fn readers_share_and_writers_exclude<B: LockBackend>(backend: B) {
    let options = LockOptions::new()
        .lease(Duration::from_secs(10))
        .fencing(true);
    let lock = rw(&backend, "rw-basic", options);
    let (ann, bob, cat) = (Owner::new(), Owner::new(), Owner::new());
    let a = lock.try_read(&ann).await.expect("backend").expect("free");
    let b = lock.try_read(&bob).await.expect("backend").expect("shared");
    assert_eq!(a.fencing_token(), None, "readers carry no fencing token");
    let state = lock.state().await.expect("backend").expect("held");
    assert_eq!(state.taken, 2, "{state:?}");
    assert!(lock.try_write(&cat).await.expect("backend").is_none());
    assert!(a.release().await.expect("backend"));
    assert!(lock.try_write(&cat).await.expect("backend").is_none());
    let (kind, name, token) = (b.kind(), b.name().clone(), b.token().to_owned());
    assert!(b.release().await.expect("backend"));
    assert!(
        backend.release(kind, &name, &token).await.expect("backend"),
        "a retried release was told the lock was not held"
    );
    let w = lock.try_write(&cat).await.expect("backend").expect("free");
    let fence = w.fencing_token().expect("writers carry a fencing token");
    assert!(lock.try_read(&ann).await.expect("backend").is_none());
    assert!(lock.try_write(&bob).await.expect("backend").is_none());
    let state = lock.state().await.expect("backend").expect("held");
    assert_eq!(state.taken, 1, "{state:?}");
    assert!(cat.id().starts_with(&state.holder), "{state:?}");
    assert!(w.release().await.expect("backend"));
    let next = lock.try_write(&bob).await.expect("backend").expect("free");
    assert!(next.fencing_token().expect("fenced") > fence);
    next.release().await.expect("backend");
    assert_eq!(lock.state().await.expect("backend"), None);
}

/// A writer that waits holds back readers that come after it, but not an
/// owner that already reads; it gets the lock as soon as the readers in
/// have left. A writer that gives up lets held-back readers in at once.
pub async fn a_waiting_writer_goes_before_new_readers<B: LockBackend>(backend: B) {
    let lock = rw(
        &backend,
        "rw-preference",
        LockOptions::new().lease(Duration::from_secs(10)),
    );
    let (reader, writer, late) = (Owner::new(), Owner::new(), Owner::new());
    let first = lock
        .try_read(&reader)
        .await
        .expect("backend")
        .expect("free");
    let waiting = {
        let (lock, writer) = (lock.clone(), writer.clone());
        tokio::spawn(async move { lock.write(&writer, Duration::from_secs(10)).await })
    };
    // Until the writer has tried once, new readers still get in.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match lock.try_read(&late).await.expect("backend") {
            Some(guard) => guard.release().await.map(drop).expect("backend"),
            None => break,
        }
        assert!(
            Instant::now() < deadline,
            "the writer never held readers back"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let again = lock
        .try_read(&reader)
        .await
        .expect("backend")
        .expect("an owner that reads re-enters past a waiting writer");
    again.release().await.expect("backend");
    let waited = within(
        Duration::from_secs(2),
        "the writer, after the last reader left",
        async {
            first.release().await.expect("backend");
            waiting.await.expect("task")
        },
    )
    .await;
    let guard = waited.expect("backend").expect("the writer got the lock");
    assert!(lock.try_read(&late).await.expect("backend").is_none());
    guard.release().await.expect("backend");
    assert!(lock.try_read(&late).await.expect("backend").is_some());

    // A writer that gives up does not hold readers back until its place
    // lapses.
    let lock = rw(
        &backend,
        "rw-gives-up",
        LockOptions::new().lease(Duration::from_secs(10)),
    );
    let held = lock
        .try_read(&reader)
        .await
        .expect("backend")
        .expect("free");
    let gave_up = lock
        .write(&writer, Duration::from_millis(100))
        .await
        .expect("backend");
    assert!(gave_up.is_none());
    assert!(
        lock.try_read(&late).await.expect("backend").is_some(),
        "a writer that gave up still held readers back"
    );
    held.release().await.expect("backend");
}

/// One owner re-enters: a writer reads and writes again, a lone reader
/// upgrades, and once its write is released its reads remain and other
/// readers (not writers) come in.
pub async fn one_owner_reenters_either_side<B: LockBackend>(backend: B) {
    let lock = rw(
        &backend,
        "rw-reentrant",
        LockOptions::new().lease(Duration::from_secs(10)),
    );
    let (me, other) = (Owner::new(), Owner::new());
    let w = lock.try_write(&me).await.expect("backend").expect("free");
    let w2 = lock
        .try_write(&me)
        .await
        .expect("backend")
        .expect("re-enters");
    let r = lock
        .try_read(&me)
        .await
        .expect("backend")
        .expect("reads too");
    assert!(lock.try_read(&other).await.expect("backend").is_none());
    w.release().await.expect("backend");
    assert!(lock.try_read(&other).await.expect("backend").is_none());
    w2.release().await.expect("backend");
    // Only `me`'s read is left: the lock is read again.
    let shared = lock
        .try_read(&other)
        .await
        .expect("backend")
        .expect("the lock went back to read");
    assert!(lock.try_write(&other).await.expect("backend").is_none());
    shared.release().await.expect("backend");
    // The lone reader upgrades.
    let up = lock
        .try_write(&me)
        .await
        .expect("backend")
        .expect("upgrade");
    assert!(lock.try_read(&other).await.expect("backend").is_none());
    up.release().await.expect("backend");
    r.release().await.expect("backend");
    assert_eq!(lock.state().await.expect("backend"), None);
}

/// Four readers and two writers in loops: readers overlap, a writer is
/// never in with anyone else, and no writer is starved: while it waits,
/// only readers already on their way get in (one batch, at most one per
/// reader task, counted twice over for the gap between the writer's call
/// and its first attempt reaching the store). Without writer preference,
/// overlapping readers keep a writer out for hundreds of reads.
pub async fn readers_overlap_and_writers_are_not_starved<B: LockBackend>(backend: B) {
    const READERS: u64 = 4;
    let lock = rw(
        &backend,
        "rw-contention",
        LockOptions::new().lease(Duration::from_secs(10)),
    );
    let readers_in = Arc::new(AtomicU32::new(0));
    let most_readers = Arc::new(AtomicU32::new(0));
    let writer_in = Arc::new(AtomicBool::new(false));
    let reader_grants = Arc::new(AtomicU64::new(0));
    let worst_batch = Arc::new(AtomicU64::new(0));
    let writes = Arc::new(AtomicU64::new(0));
    let until = Instant::now() + Duration::from_millis(1500);
    let mut tasks = Vec::new();
    for _ in 0..READERS {
        let (lock, readers_in, most, writer_in, grants) = (
            lock.clone(),
            readers_in.clone(),
            most_readers.clone(),
            writer_in.clone(),
            reader_grants.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let me = Owner::new();
            while Instant::now() < until {
                let guard = lock
                    .read(&me, Duration::from_secs(10))
                    .await
                    .expect("backend")
                    .expect("a reader waited 10 s");
                grants.fetch_add(1, Ordering::SeqCst);
                let now_in = readers_in.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now_in, Ordering::SeqCst);
                assert!(!writer_in.load(Ordering::SeqCst), "a reader with a writer");
                tokio::time::sleep(Duration::from_millis(3)).await;
                readers_in.fetch_sub(1, Ordering::SeqCst);
                guard.release().await.expect("backend");
            }
        }));
    }
    for _ in 0..2 {
        let (lock, readers_in, writer_in, grants, worst, writes) = (
            lock.clone(),
            readers_in.clone(),
            writer_in.clone(),
            reader_grants.clone(),
            worst_batch.clone(),
            writes.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let me = Owner::new();
            while Instant::now() < until {
                let before = grants.load(Ordering::SeqCst);
                let guard = lock
                    .write(&me, Duration::from_secs(10))
                    .await
                    .expect("backend")
                    .expect("a writer was starved for 10 s");
                worst.fetch_max(grants.load(Ordering::SeqCst) - before, Ordering::SeqCst);
                assert!(
                    !writer_in.swap(true, Ordering::SeqCst),
                    "two writers at once"
                );
                assert_eq!(
                    readers_in.load(Ordering::SeqCst),
                    0,
                    "a writer with readers"
                );
                tokio::time::sleep(Duration::from_millis(1)).await;
                writer_in.store(false, Ordering::SeqCst);
                writes.fetch_add(1, Ordering::SeqCst);
                guard.release().await.expect("backend");
                // Room for readers between two writes.
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }));
    }
    for task in tasks {
        task.await.expect("a task failed");
    }
    let most = most_readers.load(Ordering::SeqCst);
    let worst = worst_batch.load(Ordering::SeqCst);
    let writes = writes.load(Ordering::SeqCst);
    eprintln!(
        "rw contention: {writes} writes, {} reads, at most {most} readers at once, \
         at most {worst} readers let in while a writer waited",
        reader_grants.load(Ordering::SeqCst)
    );
    assert!(most > 1, "readers never overlapped");
    assert!(writes >= 10, "only {writes} writes");
    assert!(
        worst <= 2 * READERS,
        "{worst} readers got in while a writer waited (more than one batch of {READERS})"
    );
}

/// A writer that crashed while it waited (its process gone, so it neither
/// retries nor gives its place up) holds new readers back until its place
/// lapses ([`FAIR_SLOT`] after its last attempt), not for the readers'
/// whole lease: a reader it held back is told to try again when that
/// place lapses, since nothing wakes it then. Here a reader holds a 60 s
/// lease throughout; a second reader must get in within three times the
/// writer's slot. (Run on both backends by `tests/read_write_crashed_writer.rs`,
/// apart from [`features_suite!`](crate::features_suite!): it waits a
/// writer's slot.)
pub async fn a_crashed_waiting_writer_holds_readers_back_only_until_its_place_lapses<
    B: LockBackend,
>(
    backend: B,
) {
    let lock = rw(
        &backend,
        "rw-crashed-writer",
        LockOptions::new().lease(Duration::from_secs(60)),
    );
    let (reader, writer, late) = (Owner::new(), Owner::new(), Owner::new());
    let held = lock
        .try_read(&reader)
        .await
        .expect("backend")
        .expect("free");
    let mut waiting = Box::pin(lock.write(&writer, Duration::from_secs(120)));
    // Let the writer try until it holds new readers back.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let polled = tokio::time::timeout(Duration::from_millis(20), &mut waiting).await;
        assert!(polled.is_err(), "the writer got past a reader: {polled:?}");
        match lock.try_read(&late).await.expect("backend") {
            Some(guard) => guard.release().await.map(drop).expect("backend"),
            None => break,
        }
        assert!(
            Instant::now() < deadline,
            "the writer never held readers back"
        );
    }
    // The writer's process dies: no retry, no cleanup, its place is left.
    std::mem::forget(waiting);
    let bound = 3 * FAIR_SLOT;
    let read = within(
        bound,
        "a reader, behind a crashed writer's place (lease 60 s)",
        lock.read(&late, bound),
    )
    .await;
    let guard = read
        .expect("backend")
        .unwrap_or_else(|| panic!("a crashed writer's place held a reader back for {bound:?}"));
    guard.release().await.expect("backend");
    held.release().await.expect("backend");
}
