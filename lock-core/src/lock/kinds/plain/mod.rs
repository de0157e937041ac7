//! The plain lock: one holder. On Redis, `SET key token NX PX ttl` with the
//! token as the whole value and a compare-and-delete release, so other
//! clients that follow the same convention on the same key interoperate;
//! the only kind Redlock keeps.

#[cfg(feature = "redis")]
mod redlock;

#[cfg(feature = "redis")]
use std::sync::LazyLock;
use std::time::Duration;

use tokio::time::Instant;

#[cfg(feature = "redis")]
pub(crate) use self::redlock::redlock_only;
use super::LockKind;
use super::memory::{Held, Token, Wake, busy, ms};
#[cfg(feature = "redis")]
use super::redis::{self, FENCE_TTL, Keys, millis};
#[cfg(feature = "redis")]
use crate::backend::script::{Invocation, LuaScript, lua_script};
#[cfg(feature = "redis")]
use crate::lock::interface::RELEASE_REMEMBERED;
use crate::lock::interface::{AcquireRequest, Attempt, LockState};
#[cfg(feature = "redis")]
use crate::name::KeySpace;
#[cfg(feature = "redis")]
use crate::name::Name;

#[cfg(feature = "redis")]
static ACQUIRE: LazyLock<LuaScript> = lua_script!("../fence.lua", "acquire.lua");
/// Also sent whole by Redlock (see `release_whole`).
#[cfg(feature = "redis")]
static RELEASE: LazyLock<LuaScript> = lua_script!("release.lua");
#[cfg(feature = "redis")]
static EXTEND: LazyLock<LuaScript> = lua_script!("extend.lua");

/// The plain lock.
pub(super) struct Plain;

/// The plain lock keeps the shortest names: `<prefix>{name}:lock`, its
/// channel `released`, its releases under `lock:last`.
#[cfg(feature = "redis")]
fn keys(keys: &KeySpace, name: &Name) -> Keys {
    Keys {
        lock: keys.key(name, "lock"),
        channel: keys.key(name, "released"),
        last: keys.key(name, "lock:last"),
    }
}

impl LockKind for Plain {
    fn tag(&self) -> &'static str {
        "lock"
    }

    /// The plain lock keeps the shortest names, as other clients of the
    /// `SET NX PX` convention expect: `lock`, `released`, `lock:last`.
    #[cfg(feature = "redis")]
    fn keys(&self, ks: &KeySpace, name: &Name) -> Keys {
        keys(ks, name)
    }

    #[cfg(feature = "redis")]
    fn acquire_call(&self, ks: &KeySpace, request: &AcquireRequest<'_>) -> Invocation<'static> {
        let mut invocation = ACQUIRE.call();
        invocation
            .key(ks.key(request.name, "lock"))
            .key(ks.key(request.name, "fence"))
            .arg(request.token)
            .arg(millis(request.lease))
            .arg(if request.fencing { "1" } else { "0" })
            .arg(millis(FENCE_TTL));
        if let Some(owner) = request.owner {
            invocation.arg(owner);
        }
        invocation
    }

    #[cfg(feature = "redis")]
    fn release_call(&self, ks: &KeySpace, name: &Name, token: &str) -> Invocation<'static> {
        let keys = keys(ks, name);
        let mut invocation = RELEASE.call();
        invocation
            .key(&keys.lock)
            .key(keys.released(token))
            .arg(token)
            .arg(&keys.channel)
            .arg(millis(RELEASE_REMEMBERED));
        invocation
    }

    #[cfg(feature = "redis")]
    fn extend_call(
        &self,
        ks: &KeySpace,
        name: &Name,
        token: &str,
        lease: Duration,
    ) -> Invocation<'static> {
        let mut invocation = EXTEND.call();
        invocation
            .key(ks.key(name, "lock"))
            .arg(token)
            .arg(millis(lease));
        invocation
    }

    #[cfg(feature = "redis")]
    fn inspect_call(&self, ks: &KeySpace, name: &Name) -> Invocation<'static> {
        redis::inspect(&ks.key(name, "lock"), None, "string")
    }

    fn memory_state(&self) -> Box<dyn Held> {
        Box::new(Holder(None))
    }
}

/// A plain lock in memory: its holder's token and lease, if any.
struct Holder(Option<(Token, Instant)>);

impl Held for Holder {
    fn prune(&mut self, now: Instant) -> bool {
        if self.0.as_ref().is_some_and(|(_, expires)| *expires <= now) {
            self.0 = None;
        }
        self.0.is_some()
    }

    fn acquire(
        &mut self,
        request: &AcquireRequest<'_>,
        now: Instant,
        fence: &dyn Fn() -> u64,
    ) -> (Attempt, Wake) {
        let attempt = match &self.0 {
            Some((_, expires)) => busy(Some(*expires), now),
            None => {
                self.0 = Some((request.token.into(), now + request.lease));
                Attempt::Acquired {
                    fence: request.fencing.then(fence),
                }
            }
        };
        (attempt, Wake::Nobody)
    }

    fn release(&mut self, token: &str) -> (bool, Wake) {
        match &self.0 {
            Some((held, _)) if &**held == token => {
                self.0 = None;
                (true, Wake::Everyone)
            }
            _ => (false, Wake::Nobody),
        }
    }

    fn extend(&mut self, token: &str, lease: Duration, now: Instant) -> bool {
        match &mut self.0 {
            Some((held, expires)) if &**held == token => {
                *expires = now + lease;
                true
            }
            _ => false,
        }
    }

    fn force(&mut self) -> (bool, Wake) {
        (self.0.take().is_some(), Wake::Everyone)
    }

    fn state(&self, now: Instant) -> Option<LockState> {
        let (token, expires) = self.0.as_ref()?;
        Some(LockState::new(1, ms(*expires, now), token))
    }
}
