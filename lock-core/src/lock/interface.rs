//! What a lock store is asked and answers: the items of
//! [`lock::backend`](super::backend), defined here, below the kinds and
//! the stores that use them.

use std::future::Future;
use std::num::NonZeroU32;
use std::time::Duration;

use crate::error::Result;
use crate::name::Name;

/// Result of one acquisition attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Attempt {
    /// The lock is ours.
    Acquired {
        /// The fencing token, when one was asked for.
        fence: Option<u64>,
    },
    /// Someone else holds it.
    Busy {
        /// When the holder's lease runs out, if known.
        retry_in: Option<Duration>,
        /// How many times the store had handed this lock to a waiter when it
        /// answered (0 for a store that never hands locks over). A handoff
        /// numbered at most this was made before the answer, and is no
        /// longer the waiter's: the answer would have said the lock was its
        /// own. See [`ReleaseWaiter::handed_over`].
        handoffs: u64,
    },
}

impl Attempt {
    /// A busy answer from a store that never hands locks over.
    pub const fn busy(retry_in: Option<Duration>) -> Self {
        Attempt::Busy {
            retry_in,
            handoffs: 0,
        }
    }
}

/// The kinds of lock a [`LockBackend`] keeps. Each kind has keys of its own,
/// so kinds never see each other even under the same name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Kind {
    /// One holder; `SET NX PX` + token on Redis.
    Plain,
    /// One owner, who may hold it several times at once ([`ReentrantLock`](crate::lock::ReentrantLock)).
    Reentrant,
    /// One holder; waiters get it in arrival order. Taken with an owner
    /// (a fair [`ReentrantLock`](crate::lock::ReentrantLock)), the holder's owner
    /// re-enters without queueing.
    Fair,
    /// Up to `permits` permits taken at once ([`Semaphore`](crate::lock::Semaphore)).
    Semaphore {
        /// How many permits there are.
        permits: NonZeroU32,
        /// How many one acquisition takes (all or none).
        count: NonZeroU32,
    },
    /// The read side of a [`ReadWriteLock`](crate::lock::ReadWriteLock): shared
    /// with other readers, excluded by a writer.
    Read,
    /// The write side of a [`ReadWriteLock`](crate::lock::ReadWriteLock): one
    /// owner, no readers but its own. Shares its keys with [`Kind::Read`].
    Write,
}

/// How long a fair waiter keeps its place in line without retrying; a
/// crashed waiter stops blocking the queue after this.
pub const FAIR_SLOT: Duration = Duration::from_secs(3);
/// How often a fair waiter retries (and so keeps its place) at the least.
pub(crate) const FAIR_REFRESH: Duration = Duration::from_secs(1);
/// How long a fair lock handed to a waiter (on Redis) stays the waiter's
/// until the waiter confirms its lease, when its lease is longer. A waiter
/// that hears of the handoff confirms within a round trip; one whose
/// message was lost takes the lock at its next attempt (a fair waiter
/// tries at least once a second). A waiter that crashed or was stopped
/// while first in line holds the lock no longer than this.
pub const HANDOFF_CLAIM: Duration = Duration::from_secs(2);
/// How long a lock remembers the token of its last release, so that a
/// release retried after its answer was lost (a timeout, a reconnect) gets
/// the first answer again instead of "not held".
pub const RELEASE_REMEMBERED: Duration = Duration::from_secs(60);

/// One acquisition attempt, as a backend sees it.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct AcquireRequest<'a> {
    /// The kind of lock.
    pub kind: Kind,
    /// Its name.
    pub name: &'a Name,
    /// This acquisition's token (128 random bits).
    pub token: &'a str,
    /// The owner, for [`Kind::Reentrant`], [`Kind::Read`] and
    /// [`Kind::Write`], and for a [`Kind::Fair`] lock that its owner
    /// re-enters.
    pub owner: Option<&'a str>,
    /// The lease asked for.
    pub lease: Duration,
    /// Whether to issue a fencing token.
    pub fencing: bool,
    /// Whether the caller waits for a release after a busy answer, and so
    /// uses its [`Attempt::Busy::retry_in`]. A backend may leave out
    /// finding the holder's lease when it does not (an attempt of
    /// [`Lock::try_lock`](crate::lock::Lock::try_lock), or the first of [`Lock::lock`](crate::lock::Lock::lock), which
    /// subscribes to releases before it waits).
    pub waits: bool,
}

/// A store that can hold locks. Implemented by
/// [`RedisBackend`](crate::backend::RedisBackend),
/// [`MemoryBackend`](crate::backend::MemoryBackend) and [`Redlock`](crate::lock::Redlock); [`Lock`](crate::lock::Lock),
/// [`ReentrantLock`](crate::lock::ReentrantLock) and [`Semaphore`](crate::lock::Semaphore) build on it.
///
/// Each method is one round trip to the store (one per server for [`Redlock`](crate::lock::Redlock)).
pub trait LockBackend: Clone + Send + Sync + 'static {
    /// What waits for a release.
    type Waiter: ReleaseWaiter;

    /// Takes the lock for `request.token` if it is free (for a fair lock: and
    /// the token is first in line, else it joins the line).
    fn acquire(&self, request: &AcquireRequest<'_>)
    -> impl Future<Output = Result<Attempt>> + Send;

    /// Releases `name` if `token` holds it (for a fair lock, a token that only
    /// waits leaves the line); says whether it was held.
    fn release(
        &self,
        kind: Kind,
        name: &Name,
        token: &str,
    ) -> impl Future<Output = Result<bool>> + Send;

    /// Sets the lease to `lease` from now if `token` still holds it.
    fn extend(
        &self,
        kind: Kind,
        name: &Name,
        token: &str,
        lease: Duration,
    ) -> impl Future<Output = Result<bool>> + Send;

    /// Releases `name` whoever holds it; says whether it was held.
    fn force_release(&self, kind: Kind, name: &Name) -> impl Future<Output = Result<bool>> + Send;

    /// Who holds `name` now (`None`: nobody), for operators.
    fn inspect(
        &self,
        kind: Kind,
        name: &Name,
    ) -> impl Future<Output = Result<Option<LockState>>> + Send;

    /// Registers interest in releases of `name` that concern `token`.
    fn waiter(&self, kind: Kind, name: &Name, token: &str) -> Self::Waiter;

    /// How much of a lease the holder must not count on, for clock drift
    /// between servers (zero for one server).
    fn clock_drift(&self, lease: Duration) -> Duration {
        let _ = lease;
        Duration::ZERO
    }

    /// Whether a grant counts only once the store confirmed it: on Redis
    /// with [`sync_replicas`](crate::backend::RedisBackend::sync_replicas),
    /// enough replicas must have it. An [`acquire`](Self::acquire) confirms
    /// its own grant; a lock handed over to a waiter
    /// ([`ReleaseWaiter::handed_over`]) was granted by someone else's
    /// release, so the waiter confirms it with an [`extend`](Self::extend)
    /// (which must then fail with [`Error::NotReplicated`](crate::Error::NotReplicated)
    /// when too few replicas have it) before its guard is returned. The
    /// default: no.
    fn confirms_grants(&self) -> bool {
        false
    }
}

/// Who holds a lock, as its store sees it: for operators and dashboards,
/// not for deciding whether to go ahead (that is what taking the lock is
/// for).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockState {
    /// 1 for a held lock (a reentrant lock's owner counts once); the
    /// permits taken, for a semaphore.
    pub taken: u32,
    /// Until the (first) lease runs out; `None` when the key has no expiry
    /// (set by some other client).
    pub remaining: Option<Duration>,
    /// The start of the holder's token (or of a reentrant lock's owner),
    /// enough to tell holders apart in a log, not to act as one.
    pub holder: String,
}

/// How much of a holder's token a [`LockState`] shows.
pub(crate) const HOLDER_PREFIX: usize = 8;

impl LockState {
    pub(crate) fn new(taken: u32, remaining_ms: i64, holder: &str) -> Self {
        // A semaphore's members are `<token>#<n>`.
        let token = holder.split('#').next().unwrap_or(holder);
        LockState {
            taken,
            remaining: u64::try_from(remaining_ms).ok().map(Duration::from_millis),
            holder: token.chars().take(HOLDER_PREFIX).collect(),
        }
    }
}

/// Waits for a lock to be released.
pub trait ReleaseWaiter: Send + 'static {
    /// Called before each attempt: a release after this call wakes the next
    /// [`wait`](Self::wait).
    fn arm(&mut self) -> impl Future<Output = ()> + Send;
    /// Waits for a release at most `max`.
    fn wait(&mut self, max: Duration) -> impl Future<Output = ()> + Send;

    /// Whether the lock was handed over to this waiter after the busy answer
    /// that counted `after` handoffs ([`Attempt::Busy::handoffs`]): on
    /// Redis, a fair lock's release gives the lock to the first in line and
    /// says so, with the handoff's number, on that waiter's channel. The
    /// waiter then holds the lock without another attempt. A handoff
    /// numbered `after` or less came before that answer, which found the
    /// lock not the waiter's: it has lapsed, and is not returned. The
    /// default: never.
    fn handed_over(&self, after: u64) -> Option<Handoff> {
        let _ = after;
        None
    }
}

/// A lock handed over to a waiter by the store ([`ReleaseWaiter::handed_over`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Handoff {
    /// The fencing token, when one was asked for.
    pub fence: Option<u64>,
    /// How long the lock is held for the waiter at the least, counted from
    /// the waiter's last attempt, until it confirms its lease (an
    /// [`extend`](LockBackend::extend), which the guard sends at once when
    /// its lease is longer).
    pub claim: Duration,
}

impl Handoff {
    /// A handoff with fencing token `fence` and `claim` (see the fields).
    pub const fn new(fence: Option<u64>, claim: Duration) -> Self {
        Handoff { fence, claim }
    }
}
