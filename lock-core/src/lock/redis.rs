//! Locks on Redis: each operation is one script call, which the lock's
//! kind builds and reads (see [`kinds`](super::kinds)); this sends it, and
//! makes writes count only once enough replicas have them.

use std::time::Duration;

use redis::aio::ConnectionLike;

use super::interface::{AcquireRequest, Attempt, Kind, LockBackend, LockState};
use super::redis_waiter::RedisWaiter;
use crate::backend::RedisBackend;
use crate::error::Result;
use crate::name::Name;

impl<C> LockBackend for RedisBackend<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    type Waiter = RedisWaiter;

    async fn acquire(&self, request: &AcquireRequest<'_>) -> Result<Attempt> {
        let kind = request.kind;
        let call = kind.module(|k| k.acquire_call(self.keyspace(), request));
        let (reply, replicated): (Vec<i64>, _) = self.invoke_write(call).await?;
        let attempt = kind.module(|k| k.read_acquire(&reply, request))?;
        if let Attempt::Acquired { .. } = attempt
            && let Some(replicated) = replicated
            && !replicated.enough()
        {
            // A failover could lose it and grant it again: give it back.
            if let Err(error) = self.release(kind, request.name, request.token).await {
                tracing::warn!(lock = %request.name, %error, "cannot give back a lock too few replicas confirmed; it expires with its lease");
            }
            return Err(replicated.error());
        }
        Ok(attempt)
    }

    async fn release(&self, kind: Kind, name: &Name, token: &str) -> Result<bool> {
        let call = kind.module(|k| k.release_call(self.keyspace(), name, token));
        let released: i64 = self.invoke(call).await?;
        Ok(released == 1)
    }

    async fn extend(&self, kind: Kind, name: &Name, token: &str, lease: Duration) -> Result<bool> {
        let call = kind.module(|k| k.extend_call(self.keyspace(), name, token, lease));
        let (extended, replicated): (i64, _) = self.invoke_write(call).await?;
        if let Some(replicated) = replicated
            && extended == 1
            && !replicated.enough()
        {
            return Err(replicated.error());
        }
        Ok(extended == 1)
    }

    async fn force_release(&self, kind: Kind, name: &Name) -> Result<bool> {
        let call = kind.module(|k| k.force_release_call(self.keyspace(), name));
        let released: i64 = self.invoke(call).await?;
        Ok(released == 1)
    }

    async fn inspect(&self, kind: Kind, name: &Name) -> Result<Option<LockState>> {
        let call = kind.module(|k| k.inspect_call(self.keyspace(), name));
        let state: Option<(u32, i64, String)> = self.invoke(call).await?;
        Ok(state.map(|(taken, ms, holder)| LockState::new(taken, ms, &holder)))
    }

    fn confirms_grants(&self) -> bool {
        self.syncs_replicas()
    }

    fn waiter(&self, kind: Kind, name: &Name, token: &str) -> RedisWaiter {
        let channel = kind.module(|k| k.channel(self.keyspace(), name, token));
        let reader = channel.handoffs.map(|h| h.read);
        RedisWaiter::new(self.subscription(channel.name, reader), channel.handoffs)
    }
}
