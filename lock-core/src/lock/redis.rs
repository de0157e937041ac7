//! Every lock kind on Redis. Each operation is one script call.

use std::sync::LazyLock;
use std::time::Duration;

use redis::aio::ConnectionLike;

use super::backend::{
    AcquireRequest, Attempt, FAIR_SLOT, HANDOFF_CLAIM, Kind, LockBackend, LockState,
    RELEASE_REMEMBERED, RedisWaiter,
};
use crate::backend::RedisBackend;
use crate::backend::script::{Invocation, LuaScript, lua_script};
use crate::error::{Error, Result};
use crate::name::Name;

static ACQUIRE: LazyLock<LuaScript> = lua_script!("fence.lua", "acquire.lua");
/// Also sent whole by [`RedisBackend::release_plain_whole`].
static RELEASE: LazyLock<LuaScript> = lua_script!("release.lua");
static EXTEND: LazyLock<LuaScript> = lua_script!("extend.lua");
static FORCE_RELEASE: LazyLock<LuaScript> = lua_script!("force_release.lua");
static REENTRANT_ACQUIRE: LazyLock<LuaScript> = lua_script!("fence.lua", "reentrant_acquire.lua");
static REENTRANT_RELEASE: LazyLock<LuaScript> = lua_script!("reentrant_release.lua");
static REENTRANT_EXTEND: LazyLock<LuaScript> = lua_script!("reentrant_extend.lua");
static FAIR_ACQUIRE: LazyLock<LuaScript> =
    lua_script!("fence.lua", "fair_prune.lua", "fair_acquire.lua");
static FAIR_RELEASE: LazyLock<LuaScript> =
    lua_script!("fence.lua", "fair_prune.lua", "fair_release.lua");
static FAIR_FORCE_RELEASE: LazyLock<LuaScript> =
    lua_script!("fence.lua", "fair_prune.lua", "fair_force_release.lua");
static SEMAPHORE_ACQUIRE: LazyLock<LuaScript> = lua_script!("fence.lua", "semaphore_acquire.lua");
static SEMAPHORE_RELEASE: LazyLock<LuaScript> = lua_script!("fence.lua", "semaphore_release.lua");
static SEMAPHORE_EXTEND: LazyLock<LuaScript> = lua_script!("fence.lua", "semaphore_extend.lua");
static RW_ACQUIRE: LazyLock<LuaScript> = lua_script!("fence.lua", "rw_acquire.lua");
static RW_RELEASE: LazyLock<LuaScript> = lua_script!("rw_release.lua");
static FAIR_EXTEND: LazyLock<LuaScript> = lua_script!("fair_extend.lua");
static INSPECT: LazyLock<LuaScript> = lua_script!("fence.lua", "inspect.lua");

/// How long the fencing counter outlives its last grant.
const FENCE_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// Busy, given the holder's PTTL (-1 = no expiry, a foreign holder, or
/// queued behind others; -2 = gone meanwhile) and the handoffs so far.
fn busy(ttl_ms: i64, handoffs: i64) -> Attempt {
    Attempt::Busy {
        retry_in: match ttl_ms {
            -2 => Some(Duration::ZERO),
            ms if ms >= 0 => Some(Duration::from_millis(ms.unsigned_abs())),
            _ => None,
        },
        handoffs: u64::try_from(handoffs).unwrap_or(0),
    }
}

/// The keys of one lock of one kind.
struct Keys {
    lock: String,
    channel: String,
    /// Where the releases of this lock are remembered for
    /// [`RELEASE_REMEMBERED`]: one key per released token (see
    /// [`Keys::released`]), so a release retried after others still gets
    /// its own first answer.
    last: String,
}

impl Keys {
    /// The key that remembers `token`'s release: `<last>:<token>`.
    fn released(&self, token: &str) -> String {
        let mut key = String::with_capacity(self.last.len() + 1 + token.len());
        key.push_str(&self.last);
        key.push(':');
        key.push_str(token);
        key
    }
}

impl<C> RedisBackend<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// The key of the lock itself, without the others of
    /// [`lock_keys`](Self::lock_keys) (an acquire needs no more).
    fn lock_key(&self, kind: Kind, name: &Name) -> String {
        match kind {
            // The plain lock keeps the shortest names: `<prefix>{name}:lock`.
            Kind::Plain => self.key(name, "lock"),
            _ => self.key(name, kind.tag()),
        }
    }

    fn lock_keys(&self, kind: Kind, name: &Name) -> Keys {
        let lock = self.lock_key(kind, name);
        match kind {
            Kind::Plain => Keys {
                lock,
                channel: self.key(name, "released"),
                last: self.key(name, "lock:last"),
            },
            _ => {
                let base = kind.tag();
                Keys {
                    lock,
                    channel: self.key(name, &format!("{base}:released")),
                    last: self.key(name, &format!("{base}:last")),
                }
            }
        }
    }

    fn fair_invocation<'a>(&self, script: &'a LuaScript, name: &Name) -> Invocation<'a> {
        let mut invocation = script.call();
        invocation
            .key(self.key(name, "flock"))
            .key(self.key(name, "flock:queue"))
            .key(self.key(name, "flock:deadlines"))
            .key(self.key(name, "flock:terms"))
            .key(self.key(name, "fence"))
            .key(self.key(name, "flock:handoffs"))
            .key(self.key(name, "flock:holding"));
        invocation
    }

    fn fair_channel_prefix(&self, name: &Name) -> String {
        self.key(name, "flock:wake:")
    }

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
        let key = self.lock_key(Kind::Plain, name);
        let mut set = redis::cmd("SET");
        set.arg(&key)
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
        let keys = self.lock_keys(Kind::Plain, name);
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

impl<C> LockBackend for RedisBackend<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    type Waiter = RedisWaiter;

    async fn acquire(&self, request: &AcquireRequest<'_>) -> Result<Attempt> {
        let name = request.name;
        let fencing = if request.fencing { "1" } else { "0" };
        let lease = millis(request.lease);
        let invocation = match request.kind {
            Kind::Plain | Kind::Reentrant => {
                let script = if request.kind == Kind::Plain {
                    &*ACQUIRE
                } else {
                    &*REENTRANT_ACQUIRE
                };
                let mut invocation = script.call();
                invocation
                    .key(self.lock_key(request.kind, name))
                    .key(self.key(name, "fence"))
                    .arg(request.token)
                    .arg(lease)
                    .arg(fencing)
                    .arg(millis(FENCE_TTL));
                if let Some(owner) = request.owner {
                    invocation.arg(owner);
                }
                invocation
            }
            Kind::Fair => {
                let mut invocation = self.fair_invocation(&FAIR_ACQUIRE, name);
                invocation
                    .arg(request.token)
                    .arg(lease)
                    .arg(fencing)
                    .arg(millis(FENCE_TTL))
                    .arg(millis(FAIR_SLOT))
                    .arg(self.fair_channel_prefix(name))
                    .arg(millis(HANDOFF_CLAIM))
                    .arg(request.owner.unwrap_or_default());
                invocation
            }
            Kind::Read | Kind::Write => {
                let mut invocation = RW_ACQUIRE.call();
                invocation
                    .key(self.lock_key(request.kind, name))
                    .key(self.key(name, "rw:writers"))
                    .key(self.key(name, "fence"))
                    .arg(request.token)
                    .arg(lease)
                    .arg(fencing)
                    .arg(millis(FENCE_TTL))
                    .arg(request.owner.unwrap_or_default())
                    .arg(if request.kind == Kind::Read { "r" } else { "w" })
                    .arg(millis(FAIR_SLOT));
                invocation
            }
            Kind::Semaphore { permits, count } => {
                let mut invocation = SEMAPHORE_ACQUIRE.call();
                invocation
                    .key(self.lock_key(request.kind, name))
                    .arg(request.token)
                    .arg(lease)
                    .arg(permits.get())
                    .arg(count.get());
                invocation
            }
        };
        let (reply, replicated): (Vec<i64>, _) = self.invoke_write(invocation).await?;
        let (taken, value, handoffs) = match reply[..] {
            [taken, value] => (taken, value, 0),
            [taken, value, handoffs] => (taken, value, handoffs),
            _ => {
                return Err(Error::UnexpectedReply(format!(
                    "acquire returned {reply:?}"
                )));
            }
        };
        match taken {
            1 if replicated.is_some_and(|r| !r.enough()) => {
                // A failover could lose it and grant it again: give it back.
                let replicated = replicated.expect("checked");
                if let Err(error) = self.release(request.kind, name, request.token).await {
                    tracing::warn!(lock = %name, %error, "cannot give back a lock too few replicas confirmed; it expires with its lease");
                }
                Err(replicated.error())
            }
            1 => {
                let fence =
                    if request.fencing && request.kind.fences() {
                        Some(u64::try_from(value).map_err(|_| {
                            Error::UnexpectedReply(format!("fencing token {value}"))
                        })?)
                    } else {
                        None
                    };
                Ok(Attempt::Acquired { fence })
            }
            0 => Ok(busy(value, handoffs)),
            other => Err(Error::UnexpectedReply(format!("acquire returned {other}"))),
        }
    }

    async fn release(&self, kind: Kind, name: &Name, token: &str) -> Result<bool> {
        let keys = self.lock_keys(kind, name);
        let released: i64 = match kind {
            Kind::Fair => {
                let mut invocation = self.fair_invocation(&FAIR_RELEASE, name);
                invocation
                    .key(keys.released(token))
                    .arg(token)
                    .arg(self.fair_channel_prefix(name))
                    .arg(millis(FENCE_TTL))
                    .arg(millis(HANDOFF_CLAIM))
                    .arg(millis(RELEASE_REMEMBERED));
                self.invoke(invocation).await?
            }
            Kind::Read | Kind::Write => {
                let mut invocation = RW_RELEASE.call();
                invocation
                    .key(&keys.lock)
                    .key(self.key(name, "rw:writers"))
                    .key(keys.released(token))
                    .arg(token)
                    .arg(keys.channel)
                    .arg(millis(RELEASE_REMEMBERED));
                self.invoke(invocation).await?
            }
            _ => {
                let script = match kind {
                    Kind::Reentrant => &*REENTRANT_RELEASE,
                    Kind::Semaphore { .. } => &*SEMAPHORE_RELEASE,
                    _ => &*RELEASE,
                };
                let mut invocation = script.call();
                invocation
                    .key(&keys.lock)
                    .key(keys.released(token))
                    .arg(token)
                    .arg(&keys.channel)
                    .arg(millis(RELEASE_REMEMBERED));
                if let Kind::Semaphore { count, .. } = kind {
                    invocation.arg(count.get());
                }
                self.invoke(invocation).await?
            }
        };
        Ok(released == 1)
    }

    async fn extend(&self, kind: Kind, name: &Name, token: &str, lease: Duration) -> Result<bool> {
        let script = match kind {
            // The same layout: one field per live acquisition.
            Kind::Reentrant | Kind::Read | Kind::Write => &*REENTRANT_EXTEND,
            Kind::Semaphore { .. } => &*SEMAPHORE_EXTEND,
            Kind::Fair => &*FAIR_EXTEND,
            Kind::Plain => &*EXTEND,
        };
        let mut invocation = script.call();
        invocation.key(self.lock_key(kind, name));
        if kind == Kind::Fair {
            invocation.key(self.key(name, "flock:holding"));
        }
        invocation.arg(token).arg(millis(lease));
        if let Kind::Semaphore { count, .. } = kind {
            invocation.arg(count.get());
        }
        let (extended, replicated): (i64, _) = self.invoke_write(invocation).await?;
        if let Some(replicated) = replicated
            && extended == 1
            && !replicated.enough()
        {
            return Err(replicated.error());
        }
        Ok(extended == 1)
    }

    async fn force_release(&self, kind: Kind, name: &Name) -> Result<bool> {
        let released: i64 = if kind == Kind::Fair {
            let mut invocation = self.fair_invocation(&FAIR_FORCE_RELEASE, name);
            invocation
                .arg(self.fair_channel_prefix(name))
                .arg(millis(FENCE_TTL))
                .arg(millis(HANDOFF_CLAIM));
            self.invoke(invocation).await?
        } else {
            let keys = self.lock_keys(kind, name);
            let mut invocation = FORCE_RELEASE.call();
            invocation.key(keys.lock).arg(keys.channel);
            self.invoke(invocation).await?
        };
        Ok(released == 1)
    }

    async fn inspect(&self, kind: Kind, name: &Name) -> Result<Option<LockState>> {
        let kept = match kind {
            Kind::Reentrant => "hash",
            Kind::Semaphore { .. } => "zset",
            Kind::Read | Kind::Write => "rw",
            Kind::Plain => "string",
            Kind::Fair => "fair",
        };
        let mut invocation = INSPECT.call();
        invocation.key(self.lock_key(kind, name));
        if kind == Kind::Fair {
            invocation.key(self.key(name, "flock:holding"));
        }
        invocation.arg(kept);
        let state: Option<(u32, i64, String)> = self.invoke(invocation).await?;
        Ok(state.map(|(taken, ms, holder)| LockState::new(taken, ms, &holder)))
    }

    fn confirms_grants(&self) -> bool {
        self.syncs_replicas()
    }

    fn waiter(&self, kind: Kind, name: &Name, token: &str) -> RedisWaiter {
        let channel = match kind {
            // Only the head of a fair queue is woken, on its own channel.
            Kind::Fair => format!("{}{token}", self.fair_channel_prefix(name)),
            _ => self.lock_keys(kind, name).channel,
        };
        RedisWaiter::new(self.subscription(channel), kind == Kind::Fair)
    }
}
