//! `lock-worker serve`: the fault suite's workloads from another process.
//! Reads one command a line and answers each with one line; the test
//! process records the call around the exchange, so its history needs no
//! clock of this process's.
//!
//! ```text
//! (at the start)                                     ready
//! lock <h> <kind> <name> <lease> <wait-ms> [<arg>]   got <fence|-> <valid-us> <lost|->
//!                                                    | busy | err ..
//! valid <h>                                          valid <us>
//! release <h>                                        released <true|false> | err ..
//! drop <h>                                           dropped
//! multi <h> <name>,.. <lease-ms> <wait-ms>           got <names> <fences> <valid-us> <at|-> <lost|->
//!                                                    | busy | err ..   (lists: `,`-joined)
//! mvalid <h>                                         valid <us>,..
//! mrelease <h>                                       released <true|false> | err ..
//! decrement <item> <n> <op-id|->                     done <remaining> <replayed> | soldout <n>
//!                                                    | unknown | err ..
//! reserve <item> <n> <order> <hold-ms>               held <remaining> <us> | already <n> <us>
//!                                                    | confirmed | soldout <n> | unknown | err ..
//! confirm|cancel <item> <order>                      settled confirmed | settled cancelled <n>
//!                                                    | settled already | settled notheld | err ..
//! restock <item> <quantity>                          restocked <n|-> | err ..
//! rate <name> <fw|sw|gcra> <limit>:<ms>[,..] <cost>   decision <allowed> <granted> | err ..
//! ```
//!
//! `serve-redlock <url>...` serves locks of kind `redlock` only (plain
//! locks over those servers).
//!
//! `<h>` names the guard for the commands after; `<kind>` is `plain` or
//! `fair` (fencing on), `reentrant` or `fair-reentrant` (fencing on;
//! `<arg>`: the owner id), `semaphore` (`<arg>`: permits taken of
//! [`PERMITS`]), `read` or `write` (`<arg>`: the owner id); `<lease>` is
//! `f<ms>` (fixed) or `w<ms>` (a watchdog); `<lost>` says why the guard
//! was provably lost before it was returned (as
//! [`Recorded::lost_before_return`] proves it), the rest of the line. An error answers `err
//! <backend:0|1> <why it is untyped, or -> <Debug of the error>`.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::time::Duration;

use lock_core::backend::{AnyBackend, RedisBackend, RedisConfig};
use lock_core::counter::{Purchase, Reservation, Settle, Stock};
use lock_core::lock::{
    Lock, LockBackend, LockGuard, LockOptions, MultiGuard, MultiLock, Owner, ReadWriteLock,
    Redlock, ReentrantLock, Semaphore,
};
use lock_core::rate::{Algorithm, Policy, Quota, RateLimiter};
use lock_tests::history::{Recorded, classify};
use lock_tests::sentinel::MASTER_NAME;
use redis::cluster::ClusterClientBuilder;

use crate::{Error, next_line};

/// The permits of every semaphore served.
pub(crate) const PERMITS: u32 = 3;

/// `serve <one|cluster|sentinel> <replicas> <sync-ms> <url>...`: connects
/// as the fault suite's clients do (short timeouts; writes wait for
/// `replicas`) to one server, a cluster (`urls`: its nodes) or the master
/// a Sentinel names (`urls`: the Sentinels), and serves.
pub(crate) async fn serve(
    topology: &str,
    replicas: u32,
    sync_ms: u64,
    urls: &[&str],
) -> Result<(), Error> {
    let config = RedisConfig::default()
        .response_timeout(Duration::from_secs(1))
        .connect_timeout(Duration::from_secs(1));
    let sync = Duration::from_millis(sync_ms);
    let backend: AnyBackend = match (topology, urls) {
        ("one", [url]) => connect(url).await?.sync_replicas(replicas, sync).into(),
        ("cluster", nodes) => {
            let builder = ClusterClientBuilder::new(nodes.to_vec());
            let backend = RedisBackend::connect_cluster_with(builder, config).await?;
            backend.sync_replicas(replicas, sync).into()
        }
        ("sentinel", sentinels) => {
            let backend =
                RedisBackend::connect_sentinel_with(sentinels, MASTER_NAME, None, config).await?;
            backend.sync_replicas(replicas, sync).into()
        }
        _ => return Err(format!("cannot serve {topology} at {urls:?}").into()),
    };
    run(backend.clone(), Some(backend)).await
}

/// `serve-redlock <url>...`: locks of kind `redlock` only, over the
/// servers at `urls`, as the fault suite's Redlock clients are made.
pub(crate) async fn serve_redlock(urls: &[&str]) -> Result<(), Error> {
    let mut servers = Vec::new();
    for url in urls {
        servers.push(connect(url).await?);
    }
    let redlock = Redlock::new(servers)?.per_server_timeout(Duration::from_millis(150));
    run(redlock, None).await
}

/// A client with the fault suite's short timeouts.
async fn connect(url: &str) -> Result<RedisBackend, Error> {
    let config = RedisConfig::default()
        .response_timeout(Duration::from_secs(1))
        .connect_timeout(Duration::from_secs(1));
    Ok(RedisBackend::connect_with(redis::Client::open(url)?, config).await?)
}

/// Serves commands until the end of input: locks on `locks`, stock and
/// rate limits on `redis` (refused without one).
async fn run<B: LockBackend>(locks: B, redis: Option<AnyBackend>) -> Result<(), Error> {
    // Timed, to tell whether a guard was lost before it was returned.
    let backend = Recorded::new(locks);
    let stock = redis.clone().map(Stock::new);
    let mut held: HashMap<String, LockGuard<Recorded<B>>> = HashMap::new();
    let mut multis: HashMap<String, MultiGuard<Recorded<B>>> = HashMap::new();
    println!("ready");
    while let Some(line) = next_line().await? {
        let words: Vec<&str> = line.split_whitespace().collect();
        let answer = match words.as_slice() {
            ["lock", h, kind, name, lease, wait, rest @ ..] => {
                let wait = Duration::from_millis(wait.parse()?);
                let options = options(lease)?;
                let lease = options.get_lease().duration();
                match acquire(&backend, kind, name, options, wait, rest.first()).await? {
                    Ok(Some(guard)) => {
                        let fence = guard
                            .fencing_token()
                            .map_or("-".to_owned(), |f| f.to_string());
                        let lost = backend.lost_before_return(&[(guard.token(), lease)]);
                        let why = lost.map_or("-".to_owned(), |(_, why)| why);
                        let valid = guard.valid_for().as_micros();
                        let answer = format!("got {fence} {valid} {why}");
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
            ["multi", h, names, lease, wait] => {
                let names: Vec<&str> = names.split(',').collect();
                let lease = Duration::from_millis(lease.parse()?);
                let options = LockOptions::new().lease(lease).fencing(true);
                let multi = MultiLock::with_options(backend.clone(), &names, options)?;
                match multi.lock(Duration::from_millis(wait.parse()?)).await {
                    Ok(Some(guard)) => {
                        let guards = guard.guards();
                        let tokens: Vec<(&str, Duration)> =
                            guards.iter().map(|g| (g.token(), lease)).collect();
                        let (at, why) = backend
                            .lost_before_return(&tokens)
                            .map_or(("-".to_owned(), "-".to_owned()), |(at, why)| {
                                (at.to_string(), why)
                            });
                        let list = |f: &dyn Fn(&LockGuard<Recorded<B>>) -> String| {
                            guards.iter().map(f).collect::<Vec<_>>().join(",")
                        };
                        let names = list(&|g| g.name().as_str().to_owned());
                        let fences =
                            list(&|g| g.fencing_token().map_or("-".into(), |f| f.to_string()));
                        let valid = list(&|g| g.valid_for().as_micros().to_string());
                        multis.insert((*h).to_owned(), guard);
                        format!("got {names} {fences} {valid} {at} {why}")
                    }
                    Ok(None) => "busy".to_owned(),
                    Err(e) => error(&e),
                }
            }
            ["mvalid", h] => {
                let guard = multis.get(*h).ok_or("no such multi-lock")?;
                let valid: Vec<String> = guard
                    .guards()
                    .iter()
                    .map(|g| g.valid_for().as_micros().to_string())
                    .collect();
                format!("valid {}", valid.join(","))
            }
            ["mrelease", h] => {
                let guard = multis.remove(*h).ok_or("no such multi-lock")?;
                match guard.release().await {
                    Ok(was_held) => format!("released {was_held}"),
                    Err(e) => error(&e),
                }
            }
            [
                "decrement" | "reserve" | "confirm" | "cancel" | "restock",
                ..,
            ] => stock_command(stock.as_ref().ok_or("no stock here")?, &words).await?,
            ["rate", name, algorithm, quotas, cost] => {
                let policy = policy(algorithm, quotas)?;
                let redis = redis.clone().ok_or("no rate limits here")?;
                let limiter = RateLimiter::new(redis, *name, policy)?;
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
    Ok(())
}

/// A stock command's answer (see the module docs).
async fn stock_command(stock: &Stock<AnyBackend>, words: &[&str]) -> Result<String, Error> {
    let settled = |r: lock_core::Result<Settle>| match r {
        Ok(Settle::Confirmed) => "settled confirmed".to_owned(),
        Ok(Settle::Cancelled { available }) => format!("settled cancelled {available}"),
        Ok(Settle::AlreadyConfirmed) => "settled already".to_owned(),
        Ok(Settle::NotHeld) => "settled notheld".to_owned(),
        Ok(other) => format!("err 0 unlisted-reply {other:?}"),
        Err(e) => error(&e),
    };
    Ok(match words {
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
        ["reserve", item, n, order, hold] => {
            let hold = Duration::from_millis(hold.parse()?);
            match stock.reserve(item, n.parse()?, order, hold).await {
                Ok(Reservation::Held {
                    remaining,
                    expires_in,
                }) => format!("held {remaining} {}", expires_in.as_micros()),
                Ok(Reservation::AlreadyHeld {
                    quantity,
                    expires_in,
                }) => format!("already {quantity} {}", expires_in.as_micros()),
                Ok(Reservation::AlreadyConfirmed) => "confirmed".to_owned(),
                Ok(Reservation::SoldOut { available }) => format!("soldout {available}"),
                Ok(Reservation::UnknownItem) => "unknown".to_owned(),
                Ok(other) => format!("err 0 unlisted-reply {other:?}"),
                Err(e) => error(&e),
            }
        }
        ["confirm", item, order] => settled(stock.confirm(item, order).await),
        ["cancel", item, order] => settled(stock.cancel(item, order).await),
        ["restock", item, quantity] => match stock.restock(item, quantity.parse()?).await {
            Ok(now) => format!(
                "restocked {}",
                now.map_or("-".to_owned(), |n| n.to_string())
            ),
            Err(e) => error(&e),
        },
        _ => return Err(format!("unknown stock command {words:?}").into()),
    })
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

type Acquired<B> = lock_core::Result<Option<LockGuard<B>>>;

/// One acquisition of `kind` (see the module docs); an outer `Err` is a
/// command the test got wrong.
async fn acquire<B: LockBackend>(
    backend: &B,
    kind: &str,
    name: &str,
    options: LockOptions,
    wait: Duration,
    arg: Option<&&str>,
) -> Result<Acquired<B>, Error> {
    let backend = backend.clone();
    let owner = || -> Result<Owner, Error> { Ok(Owner::from_id(*arg.ok_or("an owner id")?)?) };
    Ok(match kind {
        // No fencing: N servers' counters give no one order.
        "redlock" => Lock::with_options(backend, name, options)?.lock(wait).await,
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
