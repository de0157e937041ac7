//! The memory store decides every lock kind as the Redis scripts do: the
//! same seeded sequence of non-waiting operations runs on a MemoryBackend
//! and on a RedisBackend, and the answers (granted or busy, released or
//! not, taken count, holder present, fence given) must be the same.

use std::num::NonZeroU32;
use std::time::Duration;

use lock_core::backend::{MemoryBackend, RedisBackend};
use lock_core::lock::{
    Lock, LockBackend, LockGuard, LockOptions, Owner, ReadWriteLock, ReentrantLock, Semaphore,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const LEASE: Duration = Duration::from_secs(60);

fn opts(fencing: bool) -> LockOptions {
    LockOptions::new().lease(LEASE).fencing(fencing)
}

/// Records what a guard said on acquisition: whether it came with a fence.
fn took<B: LockBackend>(g: &Option<LockGuard<B>>) -> String {
    match g {
        Some(g) => format!("granted fence={}", g.fencing_token().is_some()),
        None => "busy".into(),
    }
}

async fn run<B: LockBackend>(backend: B, seed: u64) -> Vec<String> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut log = Vec::new();
    let owners: Vec<Owner> = (0..3)
        .map(|i| Owner::from_id(format!("owner{i}")).unwrap())
        .collect();
    let plain = Lock::with_options(backend.clone(), "d-plain", opts(true)).unwrap();
    let fair = Lock::with_options(backend.clone(), "d-fair", opts(true).fair(true)).unwrap();
    let re = ReentrantLock::with_options(backend.clone(), "d-re", opts(true)).unwrap();
    let rw = ReadWriteLock::with_options(backend.clone(), "d-rw", opts(true)).unwrap();
    let sem = Semaphore::with_options(
        backend.clone(),
        "d-sem",
        NonZeroU32::new(4).unwrap(),
        LockOptions::new().lease(LEASE),
    )
    .unwrap();
    // Guards held, per lock: (lock index, guard).
    let mut held: Vec<(usize, LockGuard<B>)> = Vec::new();
    let mut last_fence: [u64; 5] = [0; 5];
    for step in 0..400 {
        let which = rng.random_range(0..5usize);
        let op = rng.random_range(0..10u32);
        let line = if op < 5 {
            // Acquire.
            let o = &owners[rng.random_range(0..owners.len())];
            let g = match which {
                0 => plain.try_lock().await.unwrap(),
                1 => fair.try_lock().await.unwrap(),
                2 => re.try_lock(o).await.unwrap(),
                3 => {
                    if rng.random_bool(0.5) {
                        rw.try_read(o).await.unwrap()
                    } else {
                        rw.try_write(o).await.unwrap()
                    }
                }
                _ => {
                    let n = rng.random_range(1..=4u32);
                    sem.try_acquire_many(NonZeroU32::new(n).unwrap())
                        .await
                        .unwrap()
                }
            };
            let text = format!("{step}: acquire lock{which} {} -> {}", o.id(), took(&g));
            if let Some(g) = g {
                if let Some(f) = g.fencing_token() {
                    // Fences rise per lock on both backends (memory's are
                    // one counter for all names; only the order compares).
                    assert!(f >= last_fence[which], "{text}: fence {f} went back");
                    last_fence[which] = f;
                }
                held.push((which, g));
            }
            text
        } else if op < 8 {
            // Release one of this lock's guards, if any.
            match held.iter().position(|(w, _)| *w == which) {
                Some(i) => {
                    let (_, g) = held.remove(i);
                    format!(
                        "{step}: release lock{which} -> {}",
                        g.release().await.unwrap()
                    )
                }
                None => format!("{step}: nothing to release on lock{which}"),
            }
        } else if op < 9 {
            let state = match which {
                0 => plain.state().await.unwrap(),
                1 => fair.state().await.unwrap(),
                2 => re.state().await.unwrap(),
                3 => rw.state().await.unwrap(),
                _ => {
                    let available = sem.available().await.unwrap();
                    log.push(format!("{step}: sem available {available}"));
                    None
                }
            };
            format!(
                "{step}: state lock{which} -> {:?}",
                state.map(|s| (s.taken, s.remaining.is_some()))
            )
        } else if rng.random_bool(0.1) {
            // Rarely: force every holder out; guards of it are now stale.
            let forced = match which {
                0 => plain.force_unlock().await.unwrap(),
                1 => fair.force_unlock().await.unwrap(),
                2 => re.force_unlock().await.unwrap(),
                3 => rw.force_unlock().await.unwrap(),
                _ => sem.force_release_all().await.unwrap(),
            };
            format!("{step}: force lock{which} -> {forced}")
        } else {
            // Extend one guard.
            match held.iter().find(|(w, _)| *w == which) {
                Some((_, g)) => format!(
                    "{step}: extend lock{which} -> {}",
                    g.extend(LEASE).await.unwrap()
                ),
                None => format!("{step}: nothing to extend on lock{which}"),
            }
        };
        log.push(line);
    }
    for (which, g) in held {
        log.push(format!(
            "end: release lock{which} -> {}",
            g.release().await.unwrap()
        ));
    }
    log
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_and_redis_decide_every_kind_alike() {
    for seed in [1u64, 2, 3, 4] {
        let memory = run(MemoryBackend::new(), seed).await;
        let (_server, redis): (_, RedisBackend) = lock_tests::redis_backend().await;
        let on_redis = run(redis, seed).await;
        for (m, r) in memory.iter().zip(&on_redis) {
            assert_eq!(m, r, "seed {seed}: memory and Redis differ");
        }
        assert_eq!(memory.len(), on_redis.len());
        // The sequence exercised every lock both ways.
        for which in 0..5 {
            let granted = format!("lock{which} ");
            let has = |what: &str| {
                memory
                    .iter()
                    .any(|l| l.contains(&granted) && l.contains(what))
            };
            assert!(
                has("granted") && has("busy"),
                "seed {seed}: lock{which} not covered"
            );
        }
    }
}

/// Writer preference: a writer waiting behind a reader keeps new readers
/// out, in memory as on Redis; the writer gets the lock when the reader
/// leaves.
async fn writer_preference<B: LockBackend>(backend: B) -> Vec<String> {
    let rw = ReadWriteLock::with_options(backend, "pref", opts(true)).unwrap();
    let (r1, w, r2) = (Owner::new(), Owner::new(), Owner::new());
    let mut log = Vec::new();
    let reading = rw.try_read(&r1).await.unwrap().expect("free");
    let writer = {
        let (rw, w) = (rw.clone(), w.clone());
        tokio::spawn(async move { rw.write(&w, Duration::from_secs(5)).await.unwrap() })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    log.push(format!(
        "new reader while a writer waits: {}",
        took(&rw.try_read(&r2).await.unwrap())
    ));
    let again = rw.try_read(&r1).await.unwrap();
    log.push(format!("reader re-enters: {}", took(&again)));
    if let Some(again) = again {
        log.push(format!(
            "release re-entry: {}",
            again.release().await.unwrap()
        ));
    }
    log.push(format!(
        "release reader: {}",
        reading.release().await.unwrap()
    ));
    let written = writer.await.unwrap();
    log.push(format!("writer after the reader: {}", took(&written)));
    log.push(format!(
        "reader while writing: {}",
        took(&rw.try_read(&r2).await.unwrap())
    ));
    if let Some(written) = written {
        log.push(format!(
            "release writer: {}",
            written.release().await.unwrap()
        ));
    }
    log
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_writer_holds_off_new_readers_alike() {
    let memory = writer_preference(MemoryBackend::new()).await;
    let (_server, redis) = lock_tests::redis_backend().await;
    let on_redis = writer_preference(redis).await;
    assert_eq!(memory, on_redis);
}
