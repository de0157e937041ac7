//! Redlock's waiter, woken by the release message of any of its servers.

use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::join_all;
use futures_util::stream::FuturesUnordered;

use crate::lock::interface::ReleaseWaiter;
use crate::lock::redis_waiter::{RedisWaiter, jittered};

/// Waits for a Redlock to be released: woken by the release message of any
/// server (each server's shared pub/sub subscriber), and never waiting
/// longer than a random delay around the retry delay, so a lost message or
/// an attempt that lost a race costs one delay at most, and competing
/// clients do not retry in lockstep.
///
/// A server whose subscriber cannot be reached within the per-server
/// timeout is left out for the rest of that wait for the lock; the others
/// still wake it. Servers wrapped without a subscriber
/// ([`RedisBackend::from_connection`]) never wake it: with none, a waiter
/// just waits out the delay.
///
/// [`RedisBackend::from_connection`]: crate::backend::RedisBackend::from_connection
pub struct RedlockWaiter {
    delay: Duration,
    arm_timeout: Duration,
    /// The servers whose release messages still wake this waiter; one that
    /// fails to arm is dropped (and its channel left).
    servers: Vec<RedisWaiter>,
}

impl RedlockWaiter {
    pub(super) fn new(delay: Duration, arm_timeout: Duration, servers: Vec<RedisWaiter>) -> Self {
        RedlockWaiter {
            delay,
            arm_timeout,
            servers,
        }
    }
}

impl std::fmt::Debug for RedlockWaiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedlockWaiter")
            .field("delay", &self.delay)
            .field("listening_to", &self.servers.len())
            .finish_non_exhaustive()
    }
}

impl ReleaseWaiter for RedlockWaiter {
    async fn arm(&mut self) {
        let timeout = self.arm_timeout;
        join_all(self.servers.iter_mut().map(|s| s.arm_within(timeout))).await;
        self.servers.retain(RedisWaiter::armed);
    }

    async fn wait(&mut self, max: Duration) {
        let bound = jittered(max, self.delay);
        let mut released: FuturesUnordered<_> =
            self.servers.iter_mut().map(RedisWaiter::released).collect();
        if released.is_empty() {
            tokio::time::sleep(bound).await;
        } else {
            let _ = tokio::time::timeout(bound, released.next()).await;
        }
    }
}
