//! The plain lock as Redlock sends it to each of its servers.

use std::time::Duration;

use redis::aio::ConnectionLike;

use super::super::redis::{busy, millis};
use super::{RELEASE, keys};
use crate::backend::RedisBackend;
use crate::error::{Error, Result};
use crate::lock::interface::{Attempt, Kind, RELEASE_REMEMBERED};
use crate::name::Name;

/// Refuses every kind but the plain lock: Redlock keeps plain locks only.
/// [`LockBackend`](crate::lock::LockBackend) takes the kind with each
/// call, so a `Lock` of another kind over Redlock type-checks, and is
/// refused here, at its first call, with a typed error.
///
/// # Errors
/// [`Error::InvalidArgument`] for any other kind.
pub(crate) fn redlock_only(kind: Kind) -> Result<()> {
    if kind == Kind::Plain {
        Ok(())
    } else {
        Err(Error::invalid_argument(
            "kind",
            "Redlock supports plain locks only",
        ))
    }
}

impl<C> RedisBackend<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// A plain acquire as the Redlock algorithm sends it to each server: a
    /// native `SET NX PX`, with the same key and value as the plain lock's
    /// script, but no fencing token and about half Redis's work, which
    /// counts when every acquire goes to several servers. When the caller
    /// `waits` after a busy answer, the holder's `PTTL` is pipelined with it
    /// (one round trip) for the retry hint; otherwise the `SET` goes alone,
    /// which on loopback took a few percent off a Redlock acquire over five
    /// servers.
    pub(crate) async fn set_nx_px(
        &self,
        name: &Name,
        token: &str,
        lease: Duration,
        waits: bool,
    ) -> Result<Attempt> {
        let key = self.key(name, "lock");
        // Sized up front (six arguments: `SET`, the key, the token, two
        // flags and at most 20 digits): grown argument by argument, its
        // buffer was reallocated three times on every call to every server.
        let mut set = redis::Cmd::with_capacity(6, key.len() + token.len() + 27);
        set.arg("SET")
            .arg(&key)
            .arg(token)
            .arg("NX")
            .arg("PX")
            .arg(millis(lease));
        let mut conn = self.connection();
        let (taken, busy): (Option<String>, _) = if waits {
            let mut pipe = redis::pipe();
            pipe.add_command(set).cmd("PTTL").arg(&key);
            let (taken, ttl) = self.bounded(pipe.query_async(&mut conn)).await?;
            (taken, busy(ttl, 0))
        } else {
            let taken = self.bounded(set.query_async(&mut conn)).await?;
            (taken, Attempt::busy(None))
        };
        Ok(match taken {
            Some(_) => Attempt::Acquired { fence: None },
            None => busy,
        })
    }

    /// Compare-and-delete of a plain lock, for Redlock: its release, and
    /// (with `wake` false) how it takes back what a failed acquire got. A
    /// failed attempt must not wake waiters, its own included, or
    /// contenders that each get a minority would wake one another into
    /// attempt after attempt.
    ///
    /// Sent as `EVAL` with the script's text, not `EVALSHA`: a release must
    /// take effect even on a server slower than the per-server timeout,
    /// whose answer nobody waits for. It arrives after that server's `SET`
    /// on the same connection and runs as one command, where an `EVALSHA`
    /// meeting an empty script cache (a new or restarted server) would get
    /// `NOSCRIPT`, and the load and retry would never be sent.
    pub(crate) async fn release_plain_whole(
        &self,
        name: &Name,
        token: &str,
        wake: bool,
    ) -> Result<bool> {
        let keys = keys(self.keyspace(), name);
        let mut call = RELEASE.call();
        call.key(&keys.lock)
            .key(keys.released(token))
            .arg(token)
            .arg(if wake { keys.channel } else { String::new() })
            // An undo is no release anyone will retry: nothing to remember,
            // and no key left on servers the attempt never won.
            .arg(if wake { millis(RELEASE_REMEMBERED) } else { 0 });
        let mut conn = self.connection();
        let released: i64 = self
            .bounded(call.cmd(self.sharded_pubsub(), true).query_async(&mut conn))
            .await?;
        Ok(released == 1)
    }
}
