//! A separate OS process for cross-process tests: runs critical sections on a
//! Redis key under a lock, or holds a lock until killed.
//!
//! ```text
//! lock-worker rmw  <redis-url> <lock-name> <counter-key> <rounds>
//! lock-worker hold <redis-url> <lock-name> <lease-ms>
//! ```

use std::time::Duration;

use lock_core::backend::RedisBackend;
use lock_core::lock::{Lock, LockOptions};
use redis::AsyncCommands;

type Error = Box<dyn std::error::Error>;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["rmw", url, name, key, rounds] => rmw(url, name, key, rounds.parse()?).await,
        ["hold", url, name, lease] => hold(url, name, lease.parse()?).await,
        _ => Err(format!("usage: lock-worker rmw|hold ... (got {args:?})").into()),
    }
}

/// Non-atomic GET + SET on `key` under the lock, `rounds` times.
async fn rmw(url: &str, name: &str, key: &str, rounds: u64) -> Result<(), Error> {
    let backend = RedisBackend::connect(url).await?;
    let mut conn = backend.connection();
    let lock = Lock::with_options(
        backend,
        name,
        LockOptions::new().lease(Duration::from_secs(30)),
    )?;
    for _ in 0..rounds {
        let guard = lock
            .lock(Duration::from_secs(60))
            .await?
            .ok_or("lock busy for 60 s")?;
        let seen: u64 = conn.get::<_, Option<u64>>(key).await?.unwrap_or(0);
        tokio::task::yield_now().await;
        let () = conn.set(key, seen + 1).await?;
        if !guard.release().await? {
            return Err("lost the lock inside a critical section".into());
        }
    }
    println!("done {rounds}");
    Ok(())
}

/// Takes the lock with a watchdog lease, prints `held`, and waits to be killed.
async fn hold(url: &str, name: &str, lease_ms: u64) -> Result<(), Error> {
    let backend = RedisBackend::connect(url).await?;
    let lock = Lock::with_options(
        backend,
        name,
        LockOptions::new().watchdog(Duration::from_millis(lease_ms)),
    )?;
    let _guard = lock
        .lock(Duration::from_secs(30))
        .await?
        .ok_or("lock busy for 30 s")?;
    println!("held");
    std::future::pending::<()>().await;
    Ok(())
}
