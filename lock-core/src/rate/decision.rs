//! What a rate limiter answers, and how a backend's figures become it.

use std::time::Duration;

use super::policy::Policy;
use super::quota::Quota;

/// The answer to "may this go ahead?".
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Decision {
    /// Whether the call was allowed (and its cost consumed).
    pub allowed: bool,
    /// The limit of the deciding quota.
    pub limit: u32,
    /// Cost still available under the deciding quota right now.
    pub remaining: u32,
    /// Time until the deciding quota is fully available again.
    pub reset_after: Duration,
    /// When refused: wait at least this long before the same call can be
    /// allowed (if nobody else consumes meanwhile). Zero when allowed.
    pub retry_after: Duration,
    /// The deciding quota: the one that refused (the one with the longest
    /// wait, if several did), or when allowed the one with the least remaining.
    pub quota: Quota,
    /// The deciding quota's position in the policy.
    pub quota_index: usize,
    /// Units taken: the cost when allowed, 0 when refused; for
    /// [`allow_at_most`](super::RateLimiter::allow_at_most), how many of the most
    /// asked for.
    pub granted: u32,
}

/// Builds a decision from what a backend worked out.
#[inline]
#[allow(clippy::too_many_arguments)] // the fields of a decision, in order
pub(crate) fn decision(
    policy: &Policy,
    allowed: bool,
    index: usize,
    remaining: u64,
    reset: Duration,
    retry: Duration,
    cost: u32,
) -> Decision {
    let index = index.min(policy.quotas().len() - 1);
    let quota = policy.quotas()[index].clone();
    Decision {
        allowed,
        limit: quota.limit(),
        remaining: u32::try_from(remaining)
            .unwrap_or(u32::MAX)
            .min(quota.capacity()),
        reset_after: reset,
        retry_after: if allowed {
            Duration::ZERO
        } else {
            retry.max(Duration::from_micros(1))
        },
        quota,
        quota_index: index,
        granted: if allowed { cost } else { 0 },
    }
}
