//! The read-write lock: readers share it, a writer excludes every other
//! owner, and writers that wait go ahead of new readers. Both sides keep
//! one set of keys (tagged `rw`): on Redis a hash of every acquisition
//! under one lease, and the waiting writers apart.

mod memory;

#[cfg(feature = "redis")]
use std::sync::LazyLock;
use std::time::Duration;

use tokio::time::Instant;

use self::memory::ReadWrite as State;
use super::LockKind;
use super::memory::{Held, Wake};
#[cfg(feature = "redis")]
use super::redis::{self, FENCE_TTL, Keys, millis};
#[cfg(feature = "redis")]
use super::reentrant::EXTEND;
#[cfg(feature = "redis")]
use crate::backend::script::{Invocation, LuaScript, lua_script};
use crate::lock::interface::{AcquireRequest, Attempt, Kind, LockState};
#[cfg(feature = "redis")]
use crate::lock::interface::{FAIR_SLOT, RELEASE_REMEMBERED};
#[cfg(feature = "redis")]
use crate::name::{KeySpace, Name};

#[cfg(feature = "redis")]
static ACQUIRE: LazyLock<LuaScript> = lua_script!("../fence.lua", "rw_acquire.lua");
#[cfg(feature = "redis")]
static RELEASE: LazyLock<LuaScript> = lua_script!("rw_release.lua");

/// One side of a read-write lock.
pub(super) struct ReadWrite {
    /// The write side; else the read side.
    pub(super) write: bool,
}

const TAG: &str = "rw";

impl LockKind for ReadWrite {
    fn tag(&self) -> &'static str {
        TAG
    }

    /// The writer is one owner at a time; readers are many.
    fn fences(&self) -> bool {
        self.write
    }

    /// A waiting writer keeps its place ahead of new readers.
    fn keeps_a_place(&self) -> bool {
        self.write
    }

    #[cfg(feature = "redis")]
    fn acquire_call(&self, ks: &KeySpace, request: &AcquireRequest<'_>) -> Invocation<'static> {
        let mut invocation = ACQUIRE.call();
        invocation
            .key(ks.key(request.name, TAG))
            .key(ks.key(request.name, "rw:writers"))
            .key(ks.key(request.name, "fence"))
            .arg(request.token)
            .arg(millis(request.lease))
            .arg(if request.fencing { "1" } else { "0" })
            .arg(millis(FENCE_TTL))
            .arg(request.owner.unwrap_or_default())
            .arg(if self.write { "w" } else { "r" })
            .arg(millis(FAIR_SLOT));
        invocation
    }

    #[cfg(feature = "redis")]
    fn release_call(&self, ks: &KeySpace, name: &Name, token: &str) -> Invocation<'static> {
        let keys = Keys::tagged(ks, name, TAG);
        let mut invocation = RELEASE.call();
        invocation
            .key(&keys.lock)
            .key(ks.key(name, "rw:writers"))
            .key(keys.released(token))
            .arg(token)
            .arg(keys.channel)
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
        redis::inspect(&ks.key(name, TAG), None, "rw")
    }

    fn memory_state(&self) -> Box<dyn Held> {
        Box::new(State::default())
    }
}

impl Held for State {
    fn prune(&mut self, now: Instant) -> bool {
        State::prune(self, now)
    }

    fn acquire(
        &mut self,
        request: &AcquireRequest<'_>,
        now: Instant,
        fence: &dyn Fn() -> u64,
    ) -> (Attempt, Wake) {
        let write = request.kind == Kind::Write;
        let rw = memory::Request {
            token: request.token,
            owner: request.owner.unwrap_or_default(),
            write,
            lease: request.lease,
        };
        if let Some(busy) = State::acquire(self, &rw, now) {
            return (busy, Wake::Nobody);
        }
        if write && request.fencing && self.fence.is_none() {
            self.fence = Some(fence());
        }
        let fence = self.fence.filter(|_| write && request.fencing);
        (Attempt::Acquired { fence }, Wake::Nobody)
    }

    fn release(&mut self, token: &str) -> (bool, Wake) {
        match State::release(self, token) {
            (released, true) => (released, Wake::Everyone),
            (released, false) => (released, Wake::Nobody),
        }
    }

    fn extend(&mut self, token: &str, lease: Duration, now: Instant) -> bool {
        State::extend(self, token, lease, now)
    }

    /// Writers waiting keep their places.
    fn force(&mut self) -> (bool, Wake) {
        (self.clear(), Wake::Everyone)
    }

    fn state(&self, now: Instant) -> Option<LockState> {
        State::state(self, now)
    }
}
