//! Rate limiting on Redis: one script per algorithm, every quota in one call.

use std::sync::LazyLock;

use redis::Script;
use redis::aio::ConnectionLike;

use super::{Algorithm, Decision, Policy, RateBackend, RateKey, decision};
use crate::backend::RedisBackend;
use crate::error::{Error, Result};

static FIXED_WINDOW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("fixed_window.lua")));
static SLIDING_WINDOW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("sliding_window.lua")));
static GCRA: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("gcra.lua")));

/// GCRA emission interval in microseconds: `period / limit`, rounded down
/// (at least 1 us; policies are validated for that).
pub(crate) fn gcra_interval_us(limit: u32, period_us: u64) -> u64 {
    (period_us / u64::from(limit)).max(1)
}

impl<C> RateBackend for RedisBackend<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    async fn check(&self, key: RateKey<'_>, policy: &Policy, cost: u32) -> Result<Decision> {
        let script = match policy.algorithm() {
            Algorithm::FixedWindow => &*FIXED_WINDOW,
            Algorithm::SlidingWindow => &*SLIDING_WINDOW,
            Algorithm::Gcra => &*GCRA,
        };
        let mut invocation = script.prepare_invoke();
        invocation.arg(cost);
        let params = policy.quotas().iter().zip(policy.gcra_intervals());
        for ((quota, &interval), suffix) in params.zip(policy.suffixes()) {
            invocation.key(
                self.keyspace()
                    .scoped_key(key.scope().as_str(), key.key(), suffix),
            );
            match policy.algorithm() {
                Algorithm::Gcra => {
                    invocation
                        .arg(interval)
                        .arg(interval * u64::from(quota.limit()));
                }
                _ => {
                    invocation.arg(quota.limit()).arg(quota.period_ms());
                }
            }
        }
        let (allowed, index, remaining, reset_us, retry_us): (i64, i64, i64, i64, i64) =
            self.invoke(invocation).await?;
        let index = usize::try_from(index)
            .ok()
            .filter(|&i| i < policy.quotas().len())
            .ok_or_else(|| Error::UnexpectedReply(format!("quota index {index}")))?;
        let non_negative = |v: i64| u64::try_from(v).unwrap_or(0);
        Ok(decision(
            policy,
            allowed == 1,
            index,
            non_negative(remaining),
            non_negative(reset_us),
            non_negative(retry_us),
        ))
    }
}
