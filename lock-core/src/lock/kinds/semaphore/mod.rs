//! The semaphore: up to `permits` permits taken at once, each acquisition
//! taking `count` of them (all or none). On Redis, a zset of permits
//! scored by expiry, so a crashed holder's permits come back when their
//! lease ends.

use std::collections::HashMap;
use std::num::NonZeroU32;
#[cfg(feature = "redis")]
use std::sync::LazyLock;
use std::time::Duration;

use tokio::time::Instant;

use super::LockKind;
use super::memory::{Held, Token, Wake, busy, ms};
#[cfg(feature = "redis")]
use super::redis::{self, Keys, millis};
#[cfg(feature = "redis")]
use crate::backend::script::{Invocation, LuaScript, lua_script};
#[cfg(feature = "redis")]
use crate::lock::interface::RELEASE_REMEMBERED;
use crate::lock::interface::{AcquireRequest, Attempt, Kind, LockState};
#[cfg(feature = "redis")]
use crate::name::{KeySpace, Name};

#[cfg(feature = "redis")]
static ACQUIRE: LazyLock<LuaScript> = lua_script!("../fence.lua", "semaphore_acquire.lua");
#[cfg(feature = "redis")]
static RELEASE: LazyLock<LuaScript> = lua_script!("../fence.lua", "semaphore_release.lua");
#[cfg(feature = "redis")]
static EXTEND: LazyLock<LuaScript> = lua_script!("../fence.lua", "semaphore_extend.lua");

/// A semaphore of `permits`, asked for `count` of them. (In memory each
/// step reads them from its request, as one state serves every count.)
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
pub(super) struct Semaphore {
    pub(super) permits: NonZeroU32,
    pub(super) count: NonZeroU32,
}

const TAG: &str = "sem";

impl LockKind for Semaphore {
    fn tag(&self) -> &'static str {
        TAG
    }

    /// Permits are shared: no one sequence of holders to number.
    fn fences(&self) -> bool {
        false
    }

    #[cfg(feature = "redis")]
    fn acquire_call(&self, ks: &KeySpace, request: &AcquireRequest<'_>) -> Invocation<'static> {
        let mut invocation = ACQUIRE.call();
        invocation
            .key(ks.key(request.name, TAG))
            .arg(request.token)
            .arg(millis(request.lease))
            .arg(self.permits.get())
            .arg(self.count.get());
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
            .arg(millis(RELEASE_REMEMBERED))
            .arg(self.count.get());
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
            .arg(millis(lease))
            .arg(self.count.get());
        invocation
    }

    #[cfg(feature = "redis")]
    fn inspect_call(&self, ks: &KeySpace, name: &Name) -> Invocation<'static> {
        redis::inspect(&ks.key(name, TAG), None, "zset")
    }

    fn memory_state(&self) -> Box<dyn Held> {
        Box::new(Permits::default())
    }
}

/// A semaphore in memory: each holder's lease and how many permits it
/// holds.
#[derive(Default)]
struct Permits(HashMap<Token, (Instant, u32)>);

impl Held for Permits {
    fn prune(&mut self, now: Instant) -> bool {
        self.0.retain(|_, (expires, _)| *expires > now);
        !self.0.is_empty()
    }

    fn acquire(
        &mut self,
        request: &AcquireRequest<'_>,
        now: Instant,
        fence: &dyn Fn() -> u64,
    ) -> (Attempt, Wake) {
        let Kind::Semaphore {
            permits: max,
            count,
        } = request.kind
        else {
            unreachable!("a semaphore's state is only asked for permits");
        };
        let token: Token = request.token.into();
        let held = self.0.contains_key(&token);
        // In u64: the permits of several holders may pass u32 between them.
        let taken: u64 = self.0.values().map(|(_, n)| u64::from(*n)).sum();
        // A free semaphore grants any count (a semaphore never asks for
        // more than it has).
        if self.0.is_empty() || held || taken + u64::from(count.get()) <= u64::from(max.get()) {
            self.0.insert(token, (now + request.lease, count.get()));
            let fence = request.fencing.then(fence);
            return (Attempt::Acquired { fence }, Wake::Nobody);
        }
        let until = self.0.values().map(|(expires, _)| *expires).min();
        (busy(until, now), Wake::Nobody)
    }

    fn release(&mut self, token: &str) -> (bool, Wake) {
        if self.0.remove(token).is_some() {
            (true, Wake::Everyone)
        } else {
            (false, Wake::Nobody)
        }
    }

    fn extend(&mut self, token: &str, lease: Duration, now: Instant) -> bool {
        match self.0.get_mut(token) {
            Some((expires, _)) => {
                *expires = now + lease;
                true
            }
            None => false,
        }
    }

    fn force(&mut self) -> (bool, Wake) {
        let held = !self.0.is_empty();
        self.0.clear();
        (held, Wake::Everyone)
    }

    fn state(&self, now: Instant) -> Option<LockState> {
        // Never more than the permits (a u32) while the limit holds.
        let taken = self.0.values().map(|(_, n)| u64::from(*n)).sum::<u64>();
        let taken = u32::try_from(taken).unwrap_or(u32::MAX);
        let (token, (expires, _)) = self.0.iter().min_by_key(|(_, (expires, _))| *expires)?;
        Some(LockState::new(taken, ms(*expires, now), token))
    }
}
