//! Waiting for a release on Redis: the lock's pub/sub channel (for a kind
//! that hands locks over, the waiter's own channel, which also carries
//! handoffs), or polling with jitter when the subscriber cannot be
//! reached.

use std::time::Duration;

use rand::Rng;

use super::interface::{Handoff, ReleaseWaiter};
use super::kinds::Handoffs;
use crate::backend::Subscription;

/// Waits for a release announced on the lock's pub/sub channel; polls (with
/// jitter) when there is no subscriber or it cannot be reached.
pub struct RedisWaiter {
    subscription: Option<Subscription>,
    polling: bool,
    /// How the channel's messages hand the lock over, for a kind whose
    /// releases do.
    handoffs: Option<Handoffs>,
}

impl std::fmt::Debug for RedisWaiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisWaiter")
            .field("polling", &self.polling)
            .field("handoffs", &self.handoffs.is_some())
            .finish_non_exhaustive()
    }
}

/// Poll period when pub/sub is not available.
const POLL: Duration = Duration::from_millis(50);

/// `min(max, period ± 50%)`, drawn at random.
pub(super) fn jittered(max: Duration, period: Duration) -> Duration {
    let half = u64::try_from(period.as_micros() / 2).unwrap_or(u64::MAX);
    let jitter = rand::rng().random_range(0..=2 * half);
    max.min(Duration::from_micros(half.saturating_add(jitter)))
}

impl RedisWaiter {
    /// A waiter on `subscription` (none: it polls), whose messages may
    /// hand the lock over as `handoffs` says.
    pub(super) fn new(subscription: Option<Subscription>, handoffs: Option<Handoffs>) -> Self {
        RedisWaiter {
            subscription,
            polling: true,
            handoffs,
        }
    }

    /// Whether the last [`arm`](ReleaseWaiter::arm) subscribed to the
    /// channel, so that a release from then on wakes [`released`](Self::released).
    pub(super) fn armed(&self) -> bool {
        !self.polling
    }

    /// [`arm`](ReleaseWaiter::arm) bounded by `timeout`; past it, the waiter
    /// counts as not armed. Says whether it is armed.
    pub(super) async fn arm_within(&mut self, timeout: Duration) -> bool {
        if tokio::time::timeout(timeout, self.arm()).await.is_err() {
            self.polling = true;
        }
        self.armed()
    }

    /// Waits for a release message (or a reconnect of the subscriber); never
    /// returns when the waiter is not [`armed`](Self::armed).
    pub(super) async fn released(&mut self) {
        match self.subscription.as_mut() {
            Some(subscription) if !self.polling => subscription.changed().await,
            _ => std::future::pending().await,
        }
    }
}

impl ReleaseWaiter for RedisWaiter {
    async fn arm(&mut self) {
        self.polling = match self.subscription.as_mut() {
            Some(subscription) => match subscription.ensure().await {
                Ok(()) => false,
                Err(error) => {
                    tracing::debug!(%error, "lock wake-ups unavailable, polling");
                    true
                }
            },
            None => true,
        };
    }

    async fn wait(&mut self, max: Duration) {
        if self.armed() {
            let _ = tokio::time::timeout(max, self.released()).await;
        } else {
            tokio::time::sleep(jittered(max, POLL)).await;
        }
    }

    fn handed_over(&self, after: u64) -> Option<Handoff> {
        let handoffs = self.handoffs?;
        let note = self.subscription.as_ref()?.note()?;
        // Numbered as the busy answers count handoffs: one numbered
        // `after` or less came before the last answer, and has lapsed.
        if note.number <= after {
            return None;
        }
        Some((handoffs.handoff)(note))
    }
}
