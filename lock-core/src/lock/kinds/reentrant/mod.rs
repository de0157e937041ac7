//! The reentrant lock: one owner, who may hold it several times at once.
//! On Redis, a hash with the owner, its fencing token once one was asked
//! for, and one field per live acquisition, under one lease.

use std::collections::HashSet;
#[cfg(feature = "redis")]
use std::sync::LazyLock;
use std::time::Duration;

use tokio::time::Instant;

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
use crate::name::{KeySpace, Name};

#[cfg(feature = "redis")]
static ACQUIRE: LazyLock<LuaScript> = lua_script!("../fence.lua", "reentrant_acquire.lua");
#[cfg(feature = "redis")]
static RELEASE: LazyLock<LuaScript> = lua_script!("reentrant_release.lua");
/// Also the read-write lock's, which keeps the same layout: one field per
/// live acquisition, one lease for the hash.
#[cfg(feature = "redis")]
pub(super) static EXTEND: LazyLock<LuaScript> = lua_script!("reentrant_extend.lua");

/// The reentrant lock.
pub(super) struct Reentrant;

const TAG: &str = "rlock";

impl LockKind for Reentrant {
    fn tag(&self) -> &'static str {
        TAG
    }

    #[cfg(feature = "redis")]
    fn acquire_call(&self, ks: &KeySpace, request: &AcquireRequest<'_>) -> Invocation<'static> {
        let mut invocation = ACQUIRE.call();
        invocation
            .key(ks.key(request.name, TAG))
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
        let keys = Keys::tagged(ks, name, TAG);
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
            .key(ks.key(name, TAG))
            .arg(token)
            .arg(millis(lease));
        invocation
    }

    #[cfg(feature = "redis")]
    fn inspect_call(&self, ks: &KeySpace, name: &Name) -> Invocation<'static> {
        redis::inspect(&ks.key(name, TAG), None, "hash")
    }

    fn memory_state(&self) -> Box<dyn Held> {
        Box::new(Owned(None))
    }
}

/// A reentrant lock's holding in memory.
struct Holding {
    owner: Token,
    acquisitions: HashSet<Token>,
    expires: Instant,
    /// The owner's fencing token, once one was asked for: every re-entry
    /// gets it, as the resource has already seen it.
    fence: Option<u64>,
}

/// A reentrant lock in memory: its holding, if any.
struct Owned(Option<Holding>);

impl Held for Owned {
    fn prune(&mut self, now: Instant) -> bool {
        if self.0.as_ref().is_some_and(|h| h.expires <= now) {
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
        let until = now + request.lease;
        let Some(holding) = self.0.as_mut() else {
            let fence = request.fencing.then(fence);
            self.0 = Some(Holding {
                owner: request.owner.unwrap_or_default().into(),
                acquisitions: HashSet::from([request.token.into()]),
                expires: until,
                fence,
            });
            return (Attempt::Acquired { fence }, Wake::Nobody);
        };
        if Some(&*holding.owner) != request.owner {
            return (busy(Some(holding.expires), now), Wake::Nobody);
        }
        holding.acquisitions.insert(request.token.into());
        holding.expires = holding.expires.max(until);
        if request.fencing && holding.fence.is_none() {
            holding.fence = Some(fence());
        }
        let fence = holding.fence.filter(|_| request.fencing);
        (Attempt::Acquired { fence }, Wake::Nobody)
    }

    fn release(&mut self, token: &str) -> (bool, Wake) {
        let Some(holding) = self.0.as_mut() else {
            return (false, Wake::Nobody);
        };
        let released = holding.acquisitions.remove(token);
        if holding.acquisitions.is_empty() {
            self.0 = None;
        }
        if released {
            (true, Wake::Everyone)
        } else {
            (false, Wake::Nobody)
        }
    }

    fn extend(&mut self, token: &str, lease: Duration, now: Instant) -> bool {
        match self.0.as_mut() {
            Some(holding) if holding.acquisitions.contains(token) => {
                holding.expires = holding.expires.max(now + lease);
                true
            }
            _ => false,
        }
    }

    fn force(&mut self) -> (bool, Wake) {
        (self.0.take().is_some(), Wake::Everyone)
    }

    fn state(&self, now: Instant) -> Option<LockState> {
        let holding = self.0.as_ref()?;
        Some(LockState::new(1, ms(holding.expires, now), &holding.owner))
    }
}
