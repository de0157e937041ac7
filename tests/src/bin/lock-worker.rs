//! A separate OS process for cross-process tests: runs critical sections on a
//! Redis key under a lock, or holds a lock until killed.
//!
//! ```text
//! lock-worker rmw  <redis-url> <lock-name> <counter-key> <rounds> [kind]
//! lock-worker hold <redis-url> <lock-name> <lease-ms> [kind]
//! lock-worker wait <redis-url> <lock-name> <lease-ms> <kind> <wait-ms>
//! lock-worker buy  <redis-url> <item> <buyers> <tag>
//! lock-worker hit  <redis-url> <key> <limit> <period-ms> <calls>
//! lock-worker fenced <redis-url> <lock-name> <lease-ms>
//! lock-worker serve <one|cluster|sentinel> <replicas> <sync-ms> <url>...
//! lock-worker serve-redlock <redis-url>...
//! ```
//!
//! `serve` runs the fault suite's operations one command a line (see
//! `lock_worker/serve.rs`).
//!
//! `fenced` takes commands on stdin, one a line: `take <wait-ms>` takes a
//! plain lock with fencing and a fixed lease, answering `got <token>
//! <valid-ms>`, `busy` or `err <error>`; `write` answers `write <token>`
//! (the token of the guard it holds, whatever became of its lease: a
//! client about to write, which the test pauses past its lease before
//! letting it go on) and drops the guard; end of input ends it.

use std::time::Duration;

use lock_core::backend::RedisBackend;
use lock_core::counter::{Purchase, Stock};
use lock_core::lock::{Lock, LockGuard, LockOptions, Owner, ReentrantLock, Semaphore};
use lock_core::rate::{Algorithm, Policy, Quota, RateLimiter};
use redis::AsyncCommands;

#[path = "lock_worker/serve.rs"]
mod serve;

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
        ["rmw", url, name, key, rounds] => rmw(url, name, key, rounds.parse()?, "plain").await,
        ["rmw", url, name, key, rounds, kind] => rmw(url, name, key, rounds.parse()?, kind).await,
        ["hold", url, name, lease] => hold(url, name, lease.parse()?, "plain").await,
        ["hold", url, name, lease, kind] => hold(url, name, lease.parse()?, kind).await,
        ["wait", url, name, lease, kind, wait] => {
            wait_once(url, name, lease.parse()?, kind, wait.parse()?).await
        }
        ["buy", url, item, buyers, tag] => buy(url, item, buyers.parse()?, tag).await,
        ["fenced", url, name, lease] => fenced(url, name, lease.parse()?).await,
        ["serve", topology, replicas, sync, urls @ ..] => {
            serve::serve(topology, replicas.parse()?, sync.parse()?, urls).await
        }
        ["serve-redlock", urls @ ..] if !urls.is_empty() => serve::serve_redlock(urls).await,
        ["hit", url, key, limit, period, calls] => {
            hit(url, key, limit.parse()?, period.parse()?, calls.parse()?).await
        }
        _ => Err(format!("usage: lock-worker rmw|hold ... (got {args:?})").into()),
    }
}

/// A lock of `kind` (plain, fair, reentrant, semaphore: one permit).
#[derive(Clone)]
enum AnyLock {
    Lock(Lock<RedisBackend>),
    Reentrant(ReentrantLock<RedisBackend>, Owner),
    Semaphore(Semaphore<RedisBackend>),
}

impl AnyLock {
    fn new(
        backend: RedisBackend,
        name: &str,
        kind: &str,
        options: LockOptions,
    ) -> Result<Self, Error> {
        Ok(match kind {
            "plain" => AnyLock::Lock(Lock::with_options(backend, name, options)?),
            "fair" => AnyLock::Lock(Lock::with_options(backend, name, options.fair(true))?),
            "reentrant" => AnyLock::Reentrant(
                ReentrantLock::with_options(backend, name, options)?,
                Owner::new(),
            ),
            "semaphore" => AnyLock::Semaphore(Semaphore::with_options(
                backend,
                name,
                std::num::NonZeroU32::MIN,
                options,
            )?),
            other => return Err(format!("unknown kind {other}").into()),
        })
    }

    async fn lock(&self, wait: Duration) -> Result<LockGuard<RedisBackend>, Error> {
        self.try_lock_for(wait)
            .await?
            .ok_or_else(|| format!("busy for {wait:?}").into())
    }

    async fn try_lock_for(&self, wait: Duration) -> Result<Option<LockGuard<RedisBackend>>, Error> {
        Ok(match self {
            AnyLock::Lock(lock) => lock.lock(wait).await?,
            AnyLock::Reentrant(lock, owner) => lock.lock(owner, wait).await?,
            AnyLock::Semaphore(sem) => sem.acquire(wait).await?,
        })
    }
}

/// Non-atomic GET + SET on `key` under a lock of `kind`, `rounds` times.
async fn rmw(url: &str, name: &str, key: &str, rounds: u64, kind: &str) -> Result<(), Error> {
    let backend = RedisBackend::connect(url).await?;
    let mut conn = backend.connection();
    let lock = AnyLock::new(
        backend,
        name,
        kind,
        LockOptions::new().lease(Duration::from_secs(30)),
    )?;
    for _ in 0..rounds {
        let guard = lock.lock(Duration::from_secs(60)).await?;
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

/// Takes a lock of `kind` with a watchdog lease, prints `held`, and waits to
/// be killed.
async fn hold(url: &str, name: &str, lease_ms: u64, kind: &str) -> Result<(), Error> {
    let backend = RedisBackend::connect(url).await?;
    let options = LockOptions::new().watchdog(Duration::from_millis(lease_ms));
    let lock = AnyLock::new(backend, name, kind, options)?;
    let _guard = lock.lock(Duration::from_secs(30)).await?;
    println!("held");
    std::future::pending::<()>().await;
    Ok(())
}

/// Waits up to `wait_ms` for a lock of `kind` with a fixed lease, and prints
/// what it got the moment `lock` returned: `got lost=<0|1> holder=<0|1>
/// valid_ms=<n>`, or `busy`; `holder` says whether Redis named this guard
/// the holder right after. Then releases it and exits.
async fn wait_once(
    url: &str,
    name: &str,
    lease_ms: u64,
    kind: &str,
    wait_ms: u64,
) -> Result<(), Error> {
    let backend = RedisBackend::connect(url).await?;
    let mut conn = backend.connection();
    let options = LockOptions::new().lease(Duration::from_millis(lease_ms));
    let lock = AnyLock::new(backend, name, kind, options)?;
    println!("waiting");
    match lock.try_lock_for(Duration::from_millis(wait_ms)).await? {
        Some(guard) => {
            let (lost, valid) = (guard.is_lost(), guard.valid_for());
            let holder = match kind {
                "reentrant" => {
                    let field = format!("acq:{}", guard.token());
                    conn.hexists(format!("lock:{{{name}}}:rlock"), field)
                        .await?
                }
                _ => {
                    let key = match kind {
                        "fair" => format!("lock:{{{name}}}:flock"),
                        _ => format!("lock:{{{name}}}:lock"),
                    };
                    let holder: Option<String> = conn.get(key).await?;
                    holder.as_deref() == Some(guard.token())
                }
            };
            println!(
                "got lost={} holder={} valid_ms={}",
                u8::from(lost),
                u8::from(holder),
                valid.as_millis(),
            );
            guard.release().await?;
        }
        None => println!("busy"),
    }
    Ok(())
}

/// `buyers` concurrent buyers each buy one unit with an idempotent decrement
/// and retry it once (as a client whose first response was lost would).
/// Prints `sold N replayed M`, counting first-time successes and replays.
async fn buy(url: &str, item: &str, buyers: u64, tag: &str) -> Result<(), Error> {
    let stock = Stock::new(RedisBackend::connect(url).await?);
    let mut tasks = Vec::new();
    for buyer in 0..buyers {
        let stock = stock.clone();
        let operation = format!("{tag}-{buyer}");
        let item = item.to_owned();
        tasks.push(tokio::spawn(async move {
            let first = stock
                .decrement_once(&item, 1, &operation)
                .await
                .map_err(|e| e.to_string())?;
            let retry = stock
                .decrement_once(&item, 1, &operation)
                .await
                .map_err(|e| e.to_string())?;
            match (first, retry) {
                (
                    Purchase::Done {
                        replayed: false,
                        remaining,
                    },
                    Purchase::Done {
                        replayed: true,
                        remaining: again,
                    },
                ) if remaining == again => Ok((1, 1)),
                (Purchase::SoldOut { .. }, Purchase::SoldOut { .. }) => Ok((0, 0)),
                other => Err(format!("inconsistent retry: {other:?}")),
            }
        }));
    }
    let (mut sold, mut replayed) = (0, 0);
    for task in tasks {
        let (s, r) = task.await??;
        sold += s;
        replayed += r;
    }
    println!("sold {sold} replayed {replayed}");
    Ok(())
}

/// `calls` checks against a fixed window of `limit` per `period_ms`; prints
/// `allowed N`.
async fn hit(url: &str, key: &str, limit: u32, period_ms: u64, calls: u64) -> Result<(), Error> {
    let quota = Quota::new(
        std::num::NonZeroU32::new(limit).ok_or("limit must be positive")?,
        Duration::from_millis(period_ms),
    )
    .ok_or("bad period")?;
    let limiter = RateLimiter::new(
        RedisBackend::connect(url).await?,
        "workers",
        Policy::new(Algorithm::FixedWindow).quota(quota),
    )?;
    let mut tasks = Vec::new();
    for _ in 0..calls {
        let limiter = limiter.clone();
        let key = key.to_owned();
        tasks.push(tokio::spawn(async move { limiter.check(&key).await }));
    }
    let mut allowed = 0;
    for task in tasks {
        allowed += u64::from(task.await??.allowed);
    }
    println!("allowed {allowed}");
    Ok(())
}

/// The next line of standard input (`None` at its end), read off the
/// runtime's thread.
async fn next_line() -> Result<Option<String>, Error> {
    let read = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|n| (n, line))
    });
    let (n, line) = read.await??;
    Ok((n > 0).then_some(line))
}

/// The `fenced` command loop (see the module docs).
async fn fenced(url: &str, name: &str, lease_ms: u64) -> Result<(), Error> {
    let backend = RedisBackend::connect(url).await?;
    let options = LockOptions::new()
        .lease(Duration::from_millis(lease_ms))
        .fencing(true);
    let lock = Lock::with_options(backend, name, options)?;
    let mut held: Option<LockGuard<RedisBackend>> = None;
    while let Some(line) = next_line().await? {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["take", wait] => match lock.lock(Duration::from_millis(wait.parse()?)).await {
                Ok(Some(guard)) => {
                    let token = guard.fencing_token().ok_or("no fencing token")?;
                    println!("got {token} {}", guard.valid_for().as_millis());
                    held = Some(guard);
                }
                Ok(None) => println!("busy"),
                Err(e) => println!("err {e}"),
            },
            ["write"] => {
                let guard = held.take().ok_or("write without a guard")?;
                let token = guard.fencing_token().ok_or("no fencing token")?;
                println!("write {token}");
                drop(guard);
            }
            _ => return Err(format!("unknown command {line:?}").into()),
        }
    }
    Ok(())
}
