//! Lock demo: workers do a non-atomic read-modify-write under one distributed
//! lock and lose no update.
//!
//! Runs on the in-memory backend; set `REDIS_URL` to run on Redis (start several
//! copies at once to see them exclude each other across processes).
//!
//! ```text
//! cargo run -p lock-examples --bin lock-demo
//! REDIS_URL=redis://127.0.0.1:6379 cargo run -p lock-examples --bin lock-demo
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lock_core::backend::{MemoryBackend, RedisBackend};
use lock_core::lock::{Lock, LockBackend, LockOptions};

const WORKERS: u64 = 16;
const ROUNDS: u64 = 50;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    match std::env::var("REDIS_URL") {
        Ok(url) => {
            println!("backend: redis at {url}");
            run(RedisBackend::connect(&url).await?).await
        }
        Err(_) => {
            println!("backend: in-memory (set REDIS_URL to use Redis)");
            run(MemoryBackend::new()).await
        }
    }
}

async fn run<B: LockBackend>(backend: B) -> Result<(), Box<dyn std::error::Error>> {
    let options = LockOptions::new().fencing(true);
    let lock = Lock::with_options(backend, "demo:counter", options)?;
    let counter = Arc::new(AtomicU64::new(0));
    let last_fence = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..WORKERS {
        let (lock, counter, last_fence) = (lock.clone(), counter.clone(), last_fence.clone());
        workers.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let guard = lock
                    .lock(Duration::from_secs(30))
                    .await?
                    .ok_or("lock busy for 30 s")?;
                // Fencing tokens only grow: a stale holder could be detected here.
                let fence = guard.fencing_token().unwrap_or_default();
                let previous = last_fence.swap(fence, Ordering::SeqCst);
                if fence <= previous {
                    return Err(format!("fencing token went back: {previous} -> {fence}").into());
                }
                // Non-atomic read-modify-write: safe only under the lock.
                let seen = counter.load(Ordering::SeqCst);
                tokio::task::yield_now().await;
                counter.store(seen + 1, Ordering::SeqCst);
                guard.release().await?;
            }
            Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
        }));
    }
    for worker in workers {
        worker.await?.map_err(|e| e.to_string())?;
    }
    let elapsed = started.elapsed();
    let total = counter.load(Ordering::SeqCst);
    println!("workers:              {WORKERS}");
    println!("critical sections:    {}", WORKERS * ROUNDS);
    println!(
        "counter:              {total} (lost updates: {})",
        WORKERS * ROUNDS - total
    );
    println!(
        "last fencing token:   {}",
        last_fence.load(Ordering::SeqCst)
    );
    println!(
        "throughput:           {:.0} lock handoffs/s",
        (WORKERS * ROUNDS) as f64 / elapsed.as_secs_f64()
    );
    if total != WORKERS * ROUNDS {
        return Err("lost updates".into());
    }
    Ok(())
}
