//! The fair lock: one holder, and waiters served in arrival order. Taken
//! with an owner (a fair reentrant lock), the holder's owner re-enters
//! without queueing. On Redis a release hands the lock straight to the
//! first in line and tells that waiter so on its own channel; in memory a
//! release wakes the first in line, which comes for the lock itself.

#[cfg(feature = "redis")]
mod handoff;
mod memory;

#[cfg(feature = "redis")]
use std::sync::LazyLock;
use std::time::Duration;

use tokio::time::Instant;

use self::memory::Line;
use super::LockKind;
use super::memory::{Held, Token, Wake};
#[cfg(feature = "redis")]
use super::redis::{self, Channel, FENCE_TTL, Handoffs, Keys, millis};
#[cfg(feature = "redis")]
use crate::backend::script::{Invocation, LuaScript, lua_script};
use crate::lock::interface::{AcquireRequest, Attempt, LockState};
#[cfg(feature = "redis")]
use crate::lock::interface::{FAIR_SLOT, HANDOFF_CLAIM, RELEASE_REMEMBERED};
#[cfg(feature = "redis")]
use crate::name::KeySpace;
use crate::name::Name;

#[cfg(feature = "redis")]
static ACQUIRE: LazyLock<LuaScript> =
    lua_script!("../fence.lua", "fair_prune.lua", "fair_acquire.lua");
#[cfg(feature = "redis")]
static RELEASE: LazyLock<LuaScript> =
    lua_script!("../fence.lua", "fair_prune.lua", "fair_release.lua");
#[cfg(feature = "redis")]
static FORCE_RELEASE: LazyLock<LuaScript> =
    lua_script!("../fence.lua", "fair_prune.lua", "fair_force_release.lua");
#[cfg(feature = "redis")]
static EXTEND: LazyLock<LuaScript> = lua_script!("fair_extend.lua");

/// The fair lock.
pub(super) struct Fair;

const TAG: &str = "flock";

/// A call of `script` with the keys of `fair_prune.lua`'s prelude, in its
/// order.
#[cfg(feature = "redis")]
fn call(script: &'static LuaScript, ks: &KeySpace, name: &Name) -> Invocation<'static> {
    let mut invocation = script.call();
    invocation
        .key(ks.key(name, TAG))
        .key(ks.key(name, "flock:queue"))
        .key(ks.key(name, "flock:deadlines"))
        .key(ks.key(name, "flock:terms"))
        .key(ks.key(name, "fence"))
        .key(ks.key(name, "flock:handoffs"))
        .key(ks.key(name, "flock:holding"));
    invocation
}

/// The start of each waiter's own channel (its token follows): only the
/// head of the line is woken, and handed the lock, on it.
#[cfg(feature = "redis")]
fn channel_prefix(ks: &KeySpace, name: &Name) -> String {
    ks.key(name, "flock:wake:")
}

impl LockKind for Fair {
    fn tag(&self) -> &'static str {
        TAG
    }

    fn keeps_a_place(&self) -> bool {
        true
    }

    #[cfg(feature = "redis")]
    fn acquire_call(&self, ks: &KeySpace, request: &AcquireRequest<'_>) -> Invocation<'static> {
        let mut invocation = call(&ACQUIRE, ks, request.name);
        invocation
            .arg(request.token)
            .arg(millis(request.lease))
            .arg(if request.fencing { "1" } else { "0" })
            .arg(millis(FENCE_TTL))
            .arg(millis(FAIR_SLOT))
            .arg(channel_prefix(ks, request.name))
            .arg(millis(HANDOFF_CLAIM))
            .arg(request.owner.unwrap_or_default());
        invocation
    }

    #[cfg(feature = "redis")]
    fn release_call(&self, ks: &KeySpace, name: &Name, token: &str) -> Invocation<'static> {
        let mut invocation = call(&RELEASE, ks, name);
        invocation
            .key(Keys::tagged(ks, name, TAG).released(token))
            .arg(token)
            .arg(channel_prefix(ks, name))
            .arg(millis(FENCE_TTL))
            .arg(millis(HANDOFF_CLAIM))
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
            .key(ks.key(name, "flock:holding"))
            .arg(token)
            .arg(millis(lease));
        invocation
    }

    #[cfg(feature = "redis")]
    fn force_release_call(&self, ks: &KeySpace, name: &Name) -> Invocation<'static> {
        let mut invocation = call(&FORCE_RELEASE, ks, name);
        invocation
            .arg(channel_prefix(ks, name))
            .arg(millis(FENCE_TTL))
            .arg(millis(HANDOFF_CLAIM));
        invocation
    }

    #[cfg(feature = "redis")]
    fn inspect_call(&self, ks: &KeySpace, name: &Name) -> Invocation<'static> {
        let holding = ks.key(name, "flock:holding");
        redis::inspect(&ks.key(name, TAG), Some(&holding), "fair")
    }

    #[cfg(feature = "redis")]
    fn channel(&self, ks: &KeySpace, name: &Name, token: &str) -> Channel {
        Channel {
            name: format!("{}{token}", channel_prefix(ks, name)),
            handoffs: Some(Handoffs {
                read: handoff::read,
                handoff: handoff::handoff,
            }),
        }
    }

    fn memory_state(&self) -> Box<dyn Held> {
        Box::new(Line::default())
    }

    /// Each waiter has a key of its own: a release wakes only the head.
    fn memory_channel(&self, name: &Name, waiter: Option<&str>) -> String {
        match waiter {
            Some(token) => format!("{TAG}:{name}:{token}"),
            None => format!("{TAG}:{name}"),
        }
    }
}

/// Wakes the waiter `head`, if any.
fn head(head: Option<Token>) -> Wake {
    head.map_or(Wake::Nobody, Wake::Waiter)
}

impl Held for Line {
    fn prune(&mut self, now: Instant) -> bool {
        Line::prune(self, now)
    }

    fn acquire(
        &mut self,
        request: &AcquireRequest<'_>,
        now: Instant,
        fence: &dyn Fn() -> u64,
    ) -> (Attempt, Wake) {
        let fair = memory::Request {
            token: request.token,
            owner: request.owner,
            lease: request.lease,
            fencing: request.fencing,
        };
        let (attempt, nudge) = Line::acquire(self, &fair, now, || request.fencing.then(fence));
        (attempt, head(nudge))
    }

    fn release(&mut self, token: &str) -> (bool, Wake) {
        let (mine, next) = Line::release(self, token);
        (mine, head(next))
    }

    fn extend(&mut self, token: &str, lease: Duration, now: Instant) -> bool {
        Line::extend(self, token, lease, now)
    }

    fn force(&mut self) -> (bool, Wake) {
        let (held, next) = Line::force(self);
        (held, head(next))
    }

    fn state(&self, now: Instant) -> Option<LockState> {
        Line::state(self, now)
    }
}
