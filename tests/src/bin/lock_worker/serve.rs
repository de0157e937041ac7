//! `lock-worker serve`: the fault suite's workloads from another process.
//! Reads one command a line and answers each with one line; the test
//! process records the call around the exchange, so its history needs no
//! clock of this process's.
//!
//! ```text
//! lock <h> <kind> <name> <lease> <wait-ms> [<arg>]   got <fence|-> <valid-us> | busy | err ..
//! valid <h>                                          valid <us>
//! release <h>                                        released <true|false> | err ..
//! drop <h>                                           dropped
//! decrement <item> <n> <op-id|->                     done <remaining> <replayed> | soldout <n>
//!                                                    | unknown | err ..
//! rate <name> <fw|sw|gcra> <limit>:<ms>[,..] <cost>   decision <allowed> <granted> | err ..
//! ```
//!
//! `<h>` names the guard for the commands after; `<kind>` is `plain` or
//! `fair` (fencing on), `reentrant` or `fair-reentrant` (fencing on;
//! `<arg>`: the owner id), `semaphore` (`<arg>`: permits taken of
//! [`PERMITS`]), `read` or `write` (`<arg>`: the owner id); `<lease>` is
//! `f<ms>` (fixed) or `w<ms>` (a watchdog). An error answers `err
//! <backend:0|1> <why it is untyped, or -> <Debug of the error>`.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::time::Duration;

use lock_core::backend::{RedisBackend, RedisConfig};
use lock_core::counter::{Purchase, Stock};
use lock_core::lock::{
    Lock, LockGuard, LockOptions, Owner, ReadWriteLock, ReentrantLock, Semaphore,
};
use lock_core::rate::{Algorithm, Policy, Quota, RateLimiter};
use lock_tests::history::classify;

use crate::Error;

/// The permits of every semaphore served.
pub(crate) const PERMITS: u32 = 3;

/// `serve <url> <replicas> <sync-ms>`: connects as the fault suite's
/// clients do (short timeouts; writes wait for `replicas`) and serves.
pub(crate) async fn serve(url: &str, replicas: u32, sync_ms: u64) -> Result<(), Error> {
    let config = RedisConfig::default()
        .response_timeout(Duration::from_secs(1))
        .connect_timeout(Duration::from_secs(1));
    let backend = RedisBackend::connect_with(redis::Client::open(url)?, config)
        .await?
        .sync_replicas(replicas, Duration::from_millis(sync_ms));
    let stock = Stock::new(backend.clone());
    let mut held: HashMap<String, LockGuard<RedisBackend>> = HashMap::new();
    loop {
        let read = tokio::task::spawn_blocking(|| {
            let mut line = String::new();
            std::io::stdin().read_line(&mut line).map(|n| (n, line))
        });
        let (n, line) = read.await??;
        if n == 0 {
            return Ok(());
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        let answer = match words.as_slice() {
            ["lock", h, kind, name, lease, wait, rest @ ..] => {
                let wait = Duration::from_millis(wait.parse()?);
                let options = options(lease)?;
                match acquire(&backend, kind, name, options, wait, rest.first()).await? {
                    Ok(Some(guard)) => {
                        let fence = guard
                            .fencing_token()
                            .map_or("-".to_owned(), |f| f.to_string());
                        let answer = format!("got {fence} {}", guard.valid_for().as_micros());
                        held.insert((*h).to_owned(), guard);
                        answer
                    }
                    Ok(None) => "busy".to_owned(),
                    Err(e) => error(&e),
                }
            }
            ["valid", h] => {
                let guard = held.get(*h).ok_or("no such guard")?;
                format!("valid {}", guard.valid_for().as_micros())
            }
            ["release", h] => {
                let guard = held.remove(*h).ok_or("no such guard")?;
                match guard.release().await {
                    Ok(was_held) => format!("released {was_held}"),
                    Err(e) => error(&e),
                }
            }
            ["drop", h] => {
                drop(held.remove(*h).ok_or("no such guard")?);
                "dropped".to_owned()
            }
            ["decrement", item, n, op] => {
                let n = n.parse()?;
                let result = match *op {
                    "-" => stock.decrement(item, n).await,
                    op => stock.decrement_once(item, n, op).await,
                };
                match result {
                    Ok(Purchase::Done {
                        remaining,
                        replayed,
                    }) => format!("done {remaining} {replayed}"),
                    Ok(Purchase::SoldOut { available }) => format!("soldout {available}"),
                    Ok(Purchase::UnknownItem) => "unknown".to_owned(),
                    Ok(other) => format!("err 0 unlisted-reply {other:?}"),
                    Err(e) => error(&e),
                }
            }
            ["rate", name, algorithm, quotas, cost] => {
                let policy = policy(algorithm, quotas)?;
                let limiter = RateLimiter::new(backend.clone(), *name, policy)?;
                match limiter.check_cost("k", cost.parse()?).await {
                    Ok(d) => format!("decision {} {}", d.allowed, d.granted),
                    Err(e) => error(&e),
                }
            }
            _ => return Err(format!("unknown command {line:?}").into()),
        };
        // A line at a time: Rust's standard output flushes at each.
        println!("{answer}");
    }
}

/// `f<ms>`: a fixed lease; `w<ms>`: a watchdog.
fn options(lease: &str) -> Result<LockOptions, Error> {
    let ms = |s: &str| -> Result<Duration, Error> { Ok(Duration::from_millis(s.parse()?)) };
    match lease.split_at_checked(1) {
        Some(("f", rest)) => Ok(LockOptions::new().lease(ms(rest)?)),
        Some(("w", rest)) => Ok(LockOptions::new().watchdog(ms(rest)?)),
        _ => Err(format!("bad lease {lease:?}").into()),
    }
}

/// `fw|sw|gcra` and `<limit>:<ms>[,<limit>:<ms>]`.
fn policy(algorithm: &str, quotas: &str) -> Result<Policy, Error> {
    let algorithm = match algorithm {
        "fw" => Algorithm::FixedWindow,
        "sw" => Algorithm::SlidingWindow,
        "gcra" => Algorithm::Gcra,
        other => return Err(format!("unknown algorithm {other}").into()),
    };
    let mut policy = Policy::new(algorithm);
    for quota in quotas.split(',') {
        let (limit, ms) = quota.split_once(':').ok_or("<limit>:<ms>")?;
        let limit = NonZeroU32::new(limit.parse()?).ok_or("a zero limit")?;
        let period = Duration::from_millis(ms.parse()?);
        policy = policy.quota(Quota::new(limit, period).ok_or("a bad quota")?);
    }
    Ok(policy)
}

type Acquired = lock_core::Result<Option<LockGuard<RedisBackend>>>;

/// One acquisition of `kind` (see the module docs); an outer `Err` is a
/// command the test got wrong.
async fn acquire(
    backend: &RedisBackend,
    kind: &str,
    name: &str,
    options: LockOptions,
    wait: Duration,
    arg: Option<&&str>,
) -> Result<Acquired, Error> {
    let backend = backend.clone();
    let owner = || -> Result<Owner, Error> { Ok(Owner::from_id(*arg.ok_or("an owner id")?)?) };
    Ok(match kind {
        "plain" | "fair" => {
            let options = options.fencing(true).fair(kind == "fair");
            Lock::with_options(backend, name, options)?.lock(wait).await
        }
        "reentrant" | "fair-reentrant" => {
            let options = options.fencing(true).fair(kind == "fair-reentrant");
            let lock = ReentrantLock::with_options(backend, name, options)?;
            lock.lock(&owner()?, wait).await
        }
        "semaphore" => {
            let take: u32 = arg.ok_or("permits to take")?.parse()?;
            let permits = NonZeroU32::new(PERMITS).ok_or("permits")?;
            let sem = Semaphore::with_options(backend, name, permits, options)?;
            sem.acquire_many(NonZeroU32::new(take).ok_or("take")?, wait)
                .await
        }
        "read" | "write" => {
            let lock = ReadWriteLock::with_options(backend, name, options.fencing(true))?;
            let owner = owner()?;
            if kind == "read" {
                lock.read(&owner, wait).await
            } else {
                lock.write(&owner, wait).await
            }
        }
        other => return Err(format!("unknown kind {other}").into()),
    })
}

/// `err <backend:0|1> <untyped reason, or -> <Debug>`.
fn error(e: &lock_core::Error) -> String {
    let (seen, backend) = classify(e);
    let why = seen.untyped.unwrap_or("-").replace(' ', "_");
    format!("err {} {why} {}", u8::from(backend), seen.text)
}
