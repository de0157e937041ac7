//! Every kind of lock, one module each: [`plain`], [`reentrant`], [`fair`],
//! [`semaphore`] and [`read_write`]. A kind owns its Lua scripts, its Redis
//! keys, how each of its calls is built and its reply read, its state and
//! steps in memory and, for the fair lock, the message that hands the lock
//! to a waiter. The stores (the Redis backend, the memory table) run what
//! the kind gives them and name no kind.
//!
//! [`Kind::module`] is the one place where a [`Kind`] meets its module: a
//! new kind is a module here, a variant of [`Kind`] and one line there.

mod fair;
mod memory;
mod plain;
mod read_write;
#[cfg(feature = "redis")]
mod redis;
mod reentrant;
mod semaphore;

#[cfg(feature = "redis")]
use std::time::Duration;

pub(crate) use self::memory::{Held, Wake};
#[cfg(feature = "redis")]
pub(crate) use self::plain::redlock_only;
#[cfg(feature = "redis")]
use self::redis::Keys;
#[cfg(feature = "redis")]
pub(crate) use self::redis::{Channel, Handoffs};
use super::interface::Kind;
#[cfg(feature = "redis")]
use super::interface::{AcquireRequest, Attempt};
#[cfg(feature = "redis")]
use crate::backend::script::Invocation;
#[cfg(feature = "redis")]
use crate::error::Result;
#[cfg(feature = "redis")]
use crate::name::KeySpace;
use crate::name::Name;

/// What one kind of lock does, in each store. Each kind's module
/// implements it; the stores reach it through [`Kind::module`].
///
/// On Redis a kind builds each call (a script, its keys and arguments),
/// and the store sends it. A release, an extend and an administrative
/// release answer 1 (yes) or 0.
pub(crate) trait LockKind {
    /// Short tag in the kind's key names, and its place in a memory store.
    fn tag(&self) -> &'static str;

    /// Whether acquisitions can carry fencing tokens (those with one
    /// holder at a time).
    fn fences(&self) -> bool {
        true
    }

    /// Whether a busy attempt leaves the waiter with a place to keep (a
    /// fair lock's line, a writer waiting ahead of new readers): it must
    /// retry at least every [`FAIR_REFRESH`](super::interface::FAIR_REFRESH)
    /// to keep it, and give it up by a release when it stops waiting.
    fn keeps_a_place(&self) -> bool {
        false
    }

    /// The lock's own key, its release channel and where its releases are
    /// remembered: `<tag>`, `<tag>:released` and `<tag>:last` by default.
    #[cfg(feature = "redis")]
    fn keys(&self, keys: &KeySpace, name: &Name) -> Keys {
        Keys::tagged(keys, name, self.tag())
    }

    /// The call that tries to take the lock for `request`.
    #[cfg(feature = "redis")]
    fn acquire_call(&self, keys: &KeySpace, request: &AcquireRequest<'_>) -> Invocation<'static>;

    /// What the reply to [`acquire_call`](Self::acquire_call) says.
    #[cfg(feature = "redis")]
    fn read_acquire(&self, reply: &[i64], request: &AcquireRequest<'_>) -> Result<Attempt> {
        redis::read_acquire(reply, request.fencing && self.fences())
    }

    /// The call that releases `token`'s acquisition (or takes a waiter
    /// that gave up out of the line).
    #[cfg(feature = "redis")]
    fn release_call(&self, keys: &KeySpace, name: &Name, token: &str) -> Invocation<'static>;

    /// The call that sets `token`'s lease to `lease` from now, if it holds.
    #[cfg(feature = "redis")]
    fn extend_call(
        &self,
        keys: &KeySpace,
        name: &Name,
        token: &str,
        lease: Duration,
    ) -> Invocation<'static>;

    /// The call that releases the lock whoever holds it.
    #[cfg(feature = "redis")]
    fn force_release_call(&self, keys: &KeySpace, name: &Name) -> Invocation<'static> {
        let keys = self.keys(keys, name);
        redis::force_release(&keys.lock, &keys.channel)
    }

    /// The call that says who holds the lock: `{taken, ms, holder}` or nil.
    #[cfg(feature = "redis")]
    fn inspect_call(&self, keys: &KeySpace, name: &Name) -> Invocation<'static>;

    /// The channel on which `token`'s waiter hears of releases: by
    /// default the lock's release channel, shared by every waiter.
    #[cfg(feature = "redis")]
    fn channel(&self, keys: &KeySpace, name: &Name, token: &str) -> Channel {
        let _ = token;
        Channel::wake_ups(self.keys(keys, name).channel)
    }

    /// A free lock's state in memory.
    fn memory_state(&self) -> Box<dyn Held>;

    /// The key that wakes `waiter` (`None`: every waiter) in memory.
    fn memory_channel(&self, name: &Name, waiter: Option<&str>) -> String {
        let _ = waiter;
        format!("{}:{name}", self.tag())
    }
}

impl Kind {
    /// Runs `f` on this kind's module.
    pub(crate) fn module<T>(self, f: impl FnOnce(&dyn LockKind) -> T) -> T {
        match self {
            Kind::Plain => f(&plain::Plain),
            Kind::Reentrant => f(&reentrant::Reentrant),
            Kind::Fair => f(&fair::Fair),
            Kind::Semaphore { permits, count } => f(&semaphore::Semaphore { permits, count }),
            Kind::Read => f(&read_write::ReadWrite { write: false }),
            Kind::Write => f(&read_write::ReadWrite { write: true }),
        }
    }

    /// Short tag used in key names.
    pub(crate) fn tag(self) -> &'static str {
        self.module(|kind| kind.tag())
    }

    /// Whether acquisitions of this kind can carry fencing tokens (those with one
    /// holder at a time).
    pub fn fences(self) -> bool {
        self.module(|kind| kind.fences())
    }

    /// See [`LockKind::keeps_a_place`].
    pub(crate) fn keeps_a_place(self) -> bool {
        self.module(|kind| kind.keeps_a_place())
    }
}
