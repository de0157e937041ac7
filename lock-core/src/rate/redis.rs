//! Rate limiting on Redis: the algorithm's script (see [`Unit`](super::algorithm::Unit)),
//! every quota in one call.

use std::time::Duration;

use redis::aio::ConnectionLike;

use super::backend::{RateBackend, RateRequest};
use super::decision::{Decision, decision};
use crate::backend::RedisBackend;
use crate::backend::script::packed;
use crate::error::{Error, Result};

impl<C> RateBackend for RedisBackend<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    async fn check(&self, request: &RateRequest<'_>) -> Result<Decision> {
        let policy = request.policy;
        let unit = policy.algorithm().unit();
        let mut invocation = unit.script.call();
        if request.at_most {
            invocation.arg(-i64::from(request.cost));
        } else {
            invocation.arg(request.cost);
        }
        request.caller.write(|caller| {
            let scope = request.scope.as_str();
            for suffix in policy.suffixes() {
                invocation.key(self.keyspace().scoped_key(scope, caller, suffix));
            }
        });
        for (quota, gcra) in policy.quotas().iter().zip(policy.gcras()) {
            (unit.quota_args)(&mut invocation, quota, gcra);
        }
        let reply: redis::Value = self.invoke(invocation).await?;
        let [allowed, index, remaining, reset_us, retry_us, cost] = packed(&reply)?;
        let index = usize::try_from(index)
            .ok()
            .filter(|&i| i < policy.quotas().len())
            .ok_or_else(|| Error::UnexpectedReply(format!("quota index {index}")))?;
        let micros = |v: i64| Duration::from_micros(u64::try_from(v).unwrap_or(0));
        Ok(decision(
            policy,
            allowed == 1,
            index,
            u64::try_from(remaining).unwrap_or(0),
            micros(reset_us),
            micros(retry_us),
            u32::try_from(cost).unwrap_or(0),
        ))
    }

    async fn reset(&self, request: &RateRequest<'_>) -> Result<()> {
        // Every key of one caller shares its hash tag: one command, one slot.
        let mut del = redis::cmd("DEL");
        request.caller.write(|caller| {
            let scope = request.scope.as_str();
            for suffix in request.policy.suffixes() {
                del.arg(self.keyspace().scoped_key(scope, caller, suffix));
            }
        });
        let mut conn = self.connection();
        let _: i64 = self.bounded(del.query_async(&mut conn)).await?;
        Ok(())
    }
}
