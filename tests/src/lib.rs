//! Test harness: real `redis-server` processes ([`RedisServer`]), the
//! conformance suites every backend must pass ([`mod@lock_suite`],
//! [`mod@rate_suite`], [`mod@counter_suite`],
//! [`mod@kinds_suite`]), network latency on loopback
//! ([`latency::DelayProxy`]), network faults ([`fault_proxy::FaultProxy`]), a
//! history recorder and checker for fault tests ([`history`]), and helpers
//! for end-to-end tests.
//!
//! ```no_run
//! use lock_tests::RedisServer;
//!
//! let mut server = RedisServer::start(); // panics, with an install hint, if it cannot
//! let url = server.url();
//! server.pause();   // SIGSTOP: nothing answers
//! server.resume();
//! server.restart(); // same port
//! ```

pub mod cluster;
pub mod counter_suite;
pub mod fair_reentrant_suite;
pub mod fault_proxy;
pub mod features_suite;
pub mod guarantees_suite;
pub mod history;
pub mod http;
pub mod kinds_suite;
pub mod latency;
pub mod lock_suite;
pub mod logs;
pub mod rate_suite;
pub mod read_write_suite;
pub mod sentinel;
mod server;
pub mod tls;

pub use server::{RedisServer, SERVER_BIN_ENV, ServerOptions, TlsFiles, server_binary};

use std::time::{Duration, Instant};

use lock_core::backend::RedisBackend;

/// Starts a redis-server and connects a [`RedisBackend`] to it with default
/// settings. Keep the server alive as long as the backend is used.
///
/// # Panics
/// When the server cannot be started or reached.
pub async fn redis_backend() -> (RedisServer, RedisBackend) {
    let server = RedisServer::start();
    let backend = RedisBackend::connect(&server.url())
        .await
        .unwrap_or_else(|e| panic!("cannot connect to {}: {e}", server.url()));
    (server, backend)
}

/// Starts a master and one replica of it, and waits until the replica's
/// link is up (for replica-safety tests: `sync_replicas`, `WAIT`).
///
/// # Panics
/// When either cannot be started, or the replica is not linked in 20 s.
pub fn master_and_replica() -> (RedisServer, RedisServer) {
    let master = RedisServer::start();
    let replica = RedisServer::start_with(
        ServerOptions::new()
            .arg("--replicaof")
            .arg("127.0.0.1")
            .arg(master.port().to_string()),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while cluster::info(&replica, "replication", "master_link_status").as_deref() != Some("up") {
        assert!(Instant::now() < deadline, "the replica never caught up");
        std::thread::sleep(Duration::from_millis(20));
    }
    (master, replica)
}

/// How many `EVALSHA` calls the server behind `conn` has run
/// (`INFO commandstats`): a count of script round trips.
pub fn evalsha_calls(conn: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(conn)
        .expect("INFO");
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Polls `check` every 5 ms until it holds or `within` passes; says whether it held.
pub async fn eventually(within: Duration, mut check: impl AsyncFnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if check().await {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Runs `future` and gives back its output, panicking, with `what`, the
/// bound and the time taken, when it took `bound` or longer. For generous
/// bounds that catch a hang or a missed wake-up, not for speed: a future
/// still running at `bound` is dropped there (on tokio's clock), so a hang
/// fails the test at once instead of stalling it.
///
/// ```
/// use std::time::Duration;
///
/// use lock_tests::within;
///
/// tokio::runtime::Runtime::new().expect("runtime").block_on(async {
///     let sum = within(Duration::from_secs(5), "an addition", async { 1 + 1 }).await;
///     assert_eq!(sum, 2);
/// });
/// ```
///
/// # Panics
/// When `future` does not finish in less than `bound`.
pub async fn within<T>(bound: Duration, what: &str, future: impl Future<Output = T>) -> T {
    let started = Instant::now();
    let Ok(output) = tokio::time::timeout(bound, future).await else {
        panic!("{what}: not done within {bound:?}");
    };
    let took = started.elapsed();
    assert!(
        took < bound,
        "{what}: took {took:?}, the bound is {bound:?}"
    );
    output
}

/// The README's code samples, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::within;

    // `within` is what makes the timed checks fail: it must, both for a
    // future that finishes late and for one that never finishes.
    #[tokio::test]
    #[should_panic(expected = "a late sleep: took")]
    async fn within_fails_a_future_that_finishes_late() {
        // Blocks the thread, so the timeout cannot cut it short.
        let late = async { std::thread::sleep(Duration::from_millis(60)) };
        within(Duration::from_millis(50), "a late sleep", late).await;
    }

    #[tokio::test]
    #[should_panic(expected = "a hang: not done within 50ms")]
    async fn within_fails_a_future_that_hangs() {
        within(
            Duration::from_millis(50),
            "a hang",
            std::future::pending::<()>(),
        )
        .await;
    }

    #[tokio::test]
    async fn within_gives_back_the_output_in_time() {
        assert_eq!(within(Duration::from_secs(5), "sum", async { 2 }).await, 2);
    }
}
