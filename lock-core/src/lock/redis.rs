//! The plain lock on Redis: SET NX PX + token, compare-and-delete release.

use std::sync::LazyLock;
use std::time::Duration;

use rand::Rng;
use redis::Script;
use redis::aio::ConnectionLike;

use super::{Attempt, LockBackend, ReleaseWaiter};
use crate::backend::{RedisBackend, Subscription};
use crate::error::{Error, Result};
use crate::key::Name;

static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("acquire.lua")));
static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("release.lua")));
static EXTEND: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("extend.lua")));
static FORCE_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("force_release.lua")));

/// How long the fencing counter outlives its last grant.
const FENCE_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

pub(super) const LOCK_SUFFIX: &str = "lock";
const FENCE_SUFFIX: &str = "fence";
const CHANNEL_SUFFIX: &str = "released";

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

impl<C> LockBackend for RedisBackend<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    type Waiter = RedisWaiter;

    async fn acquire(
        &self,
        name: &Name,
        token: &str,
        lease: Duration,
        fencing: bool,
    ) -> Result<Attempt> {
        let mut invocation = ACQUIRE.prepare_invoke();
        invocation
            .key(self.key(name, LOCK_SUFFIX))
            .key(self.key(name, FENCE_SUFFIX))
            .arg(token)
            .arg(millis(lease))
            .arg(if fencing { "1" } else { "0" })
            .arg(millis(FENCE_TTL));
        let (taken, value): (i64, i64) = self.invoke(invocation).await?;
        match taken {
            1 if fencing => {
                let fence = u64::try_from(value)
                    .map_err(|_| Error::UnexpectedReply(format!("fencing token {value}")))?;
                Ok(Attempt::Acquired { fence: Some(fence) })
            }
            1 => Ok(Attempt::Acquired { fence: None }),
            0 => Ok(Attempt::Busy {
                // PTTL: -1 = no expiry (a foreign holder), -2 = gone meanwhile.
                retry_in: match value {
                    -2 => Some(Duration::ZERO),
                    ms if ms >= 0 => Some(Duration::from_millis(ms.unsigned_abs())),
                    _ => None,
                },
            }),
            other => Err(Error::UnexpectedReply(format!("acquire returned {other}"))),
        }
    }

    async fn release(&self, name: &Name, token: &str) -> Result<bool> {
        let mut invocation = RELEASE.prepare_invoke();
        invocation
            .key(self.key(name, LOCK_SUFFIX))
            .arg(token)
            .arg(self.key(name, CHANNEL_SUFFIX));
        self.invoke(invocation).await
    }

    async fn extend(&self, name: &Name, token: &str, lease: Duration) -> Result<bool> {
        let mut invocation = EXTEND.prepare_invoke();
        invocation
            .key(self.key(name, LOCK_SUFFIX))
            .arg(token)
            .arg(millis(lease));
        self.invoke(invocation).await
    }

    async fn force_release(&self, name: &Name) -> Result<bool> {
        let mut invocation = FORCE_RELEASE.prepare_invoke();
        invocation
            .key(self.key(name, LOCK_SUFFIX))
            .arg(self.key(name, CHANNEL_SUFFIX));
        self.invoke(invocation).await
    }

    fn waiter(&self, name: &Name) -> RedisWaiter {
        RedisWaiter {
            subscription: self.subscription(self.key(name, CHANNEL_SUFFIX)),
            polling: true,
        }
    }
}

/// Waits for a release announced on the lock's pub/sub channel; polls (with
/// jitter) when there is no subscriber or it cannot be reached.
pub struct RedisWaiter {
    subscription: Option<Subscription>,
    polling: bool,
}

impl std::fmt::Debug for RedisWaiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisWaiter")
            .field("polling", &self.polling)
            .finish_non_exhaustive()
    }
}

/// Poll period when pub/sub is not available.
const POLL: Duration = Duration::from_millis(50);

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
        match self.subscription.as_mut() {
            Some(subscription) if !self.polling => {
                let _ = tokio::time::timeout(max, subscription.changed()).await;
            }
            _ => {
                let jitter = rand::rng().random_range(0..=POLL.as_millis() as u64);
                let period = POLL / 2 + Duration::from_millis(jitter);
                tokio::time::sleep(max.min(period)).await;
            }
        }
    }
}
