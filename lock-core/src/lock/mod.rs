//! Distributed mutual exclusion.
//!
//! A [`Lock`] is a handle on one named lock; [`Lock::try_lock`] and
//! [`Lock::lock`] return a [`LockGuard`] when it was taken, `None` when it is
//! busy (busy is a value, not an error).
//!
//! On Redis the lock is the classic `SET key token NX PX ttl` with a random
//! 128-bit token as the whole value, released by a compare-and-delete script,
//! so other clients that follow the same convention on the same key interoperate.
//!
//! * **Lease**: a fixed TTL ([`LockOptions::lease`]), or a watchdog
//!   ([`LockOptions::watchdog`], the default: 30 s renewed every 10 s while the
//!   guard lives). [`LockGuard::lost`] completes when the lease is lost.
//! * **Waiting**: waiters are woken through pub/sub (one shared subscriber per
//!   client); a missed wake-up costs at most the holder's remaining TTL. A
//!   fair lock on Redis is handed straight to its first waiter
//!   ([`LockOptions::fair`]).
//! * **Release**: [`LockGuard::release`] says whether we still owned the lock;
//!   dropping the guard releases it in the background; a cancelled
//!   [`Lock::lock`] that may have taken the lock cleans up the same way.
//! * **Fencing**: with [`LockOptions::fencing`], each acquisition carries a
//!   monotonically increasing [`LockGuard::fencing_token`].
//!
//! A guard is only ever returned for a grant whose lease is still running,
//! counted from before the request that granted it: a grant seen too late
//! (the process was paused, an answer or a handoff came after the lease
//! ran out) is given back, and the acquire keeps waiting within its bound.
//!
//! # What no client library can prevent
//!
//! A guard knows its lease only from its own clock. Between checking
//! [`LockGuard::is_lost`] (or [`LockGuard::valid_for`]) and writing to an
//! outside resource, the process may pause (a GC-like stall, a stopped VM,
//! a slow disk) for longer than the lease, and the write then lands after
//! another holder took over. No lock can rule that out on the client side.
//! The guard for it is a **fencing token** checked by the resource itself
//! ([`Fence::admit`], or a `WHERE fence <= $token` in a database): a write
//! with an older token than one the resource has seen is refused. Check the
//! lease right before each outside write, and pass the token along:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> lock_core::Result<()> {
//! use std::time::Duration;
//! use lock_core::backend::MemoryBackend;
//! use lock_core::lock::{Fence, Lock, LockOptions};
//!
//! // The resource's side: it remembers the highest token it has seen.
//! let resource = Fence::new();
//! let lock = Lock::with_options(
//!     MemoryBackend::new(),
//!     "ledger",
//!     LockOptions::new().lease(Duration::from_secs(10)).fencing(true),
//! )?;
//! let guard = lock.lock(Duration::from_secs(1)).await?.expect("free");
//! let token = guard.fencing_token().expect("fencing is on");
//! for entry in ["debit", "credit"] {
//!     // Right before each write: is the lease still ours, with room to spare?
//!     if guard.is_lost() || guard.valid_for() < Duration::from_millis(100) {
//!         break; // stop: another holder may take over at any moment
//!     }
//!     // The write carries the token; a stale holder's write is refused.
//!     resource.admit(token).expect("a newer holder wrote first");
//!     let _ = entry; // ... write `entry` ...
//! }
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> lock_core::Result<()> {
//! use std::time::Duration;
//! use lock_core::backend::MemoryBackend;
//! use lock_core::lock::{Lock, LockOptions};
//!
//! let backend = MemoryBackend::new();
//! let options = LockOptions::new().lease(Duration::from_secs(5)).fencing(true);
//! let lock = Lock::with_options(backend, "order:42", options)?;
//!
//! let guard = lock.lock(Duration::from_secs(1)).await?.expect("free");
//! assert!(lock.try_lock().await?.is_none()); // busy: a value, not an error
//! assert!(guard.fencing_token().is_some());
//! assert!(guard.release().await?); // we still owned it
//! # Ok(()) }
//! ```

mod fencing;
mod guard;
pub(crate) mod memory;
mod redis;
mod redlock;
mod reentrant;
mod semaphore;
mod watchdog;

use std::future::Future;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

pub use self::fencing::{Fence, StaleToken};
use self::guard::Granted;
pub use self::guard::LockGuard;
pub use self::memory::MemoryWaiter;
pub use self::redis::RedisWaiter;
pub use self::redlock::{DEFAULT_PER_SERVER_TIMEOUT, Redlock, RedlockWaiter};
pub use self::reentrant::{Owner, ReentrantLock};
pub use self::semaphore::Semaphore;
use crate::error::{Error, Result};
use crate::key::Name;

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
    /// One owner, who may hold it several times at once ([`ReentrantLock`]).
    Reentrant,
    /// One holder; waiters get it in arrival order.
    Fair,
    /// Up to `permits` holders at once ([`Semaphore`]).
    Semaphore {
        /// How many holders at once.
        permits: NonZeroU32,
    },
}

impl Kind {
    /// Short tag used in key names.
    pub fn tag(self) -> &'static str {
        match self {
            Kind::Plain => "lock",
            Kind::Reentrant => "rlock",
            Kind::Fair => "flock",
            Kind::Semaphore { .. } => "sem",
        }
    }

    /// Whether acquisitions of this kind can carry fencing tokens (those with
    /// one holder at a time).
    pub fn fences(self) -> bool {
        !matches!(self, Kind::Semaphore { .. })
    }
}

/// How long a fair waiter keeps its place in line without retrying; a
/// crashed waiter stops blocking the queue after this.
pub const FAIR_SLOT: Duration = Duration::from_secs(3);
/// How often a fair waiter retries (and so keeps its place) at the least.
const FAIR_REFRESH: Duration = Duration::from_secs(1);
/// How long a fair lock handed to a waiter (on Redis) stays the waiter's
/// until the waiter confirms its lease, when its lease is longer. A waiter
/// that hears of the handoff confirms within a round trip; one whose
/// message was lost takes the lock at its next attempt (a fair waiter
/// tries at least once a second). A waiter that crashed or was stopped
/// while first in line holds the lock no longer than this.
pub const HANDOFF_CLAIM: Duration = Duration::from_secs(2);

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
    /// The owner, for [`Kind::Reentrant`].
    pub owner: Option<&'a str>,
    /// The lease asked for.
    pub lease: Duration,
    /// Whether to issue a fencing token.
    pub fencing: bool,
    /// Whether the caller waits for a release after a busy answer, and so
    /// uses its [`Attempt::Busy::retry_in`]. A backend may leave out
    /// finding the holder's lease when it does not (an attempt of
    /// [`Lock::try_lock`], or the first of [`Lock::lock`], which
    /// subscribes to releases before it waits).
    pub waits: bool,
}

/// A store that can hold locks. Implemented by
/// [`RedisBackend`](crate::backend::RedisBackend),
/// [`MemoryBackend`](crate::backend::MemoryBackend) and [`Redlock`]; [`Lock`],
/// [`ReentrantLock`] and [`Semaphore`] build on it.
///
/// Each method is one round trip to the store (one per server for [`Redlock`]).
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

    /// Registers interest in releases of `name` that concern `token`.
    fn waiter(&self, kind: Kind, name: &Name, token: &str) -> Self::Waiter;

    /// How much of a lease the holder must not count on, for clock drift
    /// between servers (zero for one server).
    fn clock_drift(&self, lease: Duration) -> Duration {
        let _ = lease;
        Duration::ZERO
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

/// How long a lock is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lease {
    /// The lock expires this long after it was taken unless extended by hand.
    Fixed(Duration),
    /// The lock is held for this long and renewed every third of it while the
    /// guard lives.
    Watchdog(Duration),
}

impl Lease {
    /// The lease duration.
    pub fn duration(self) -> Duration {
        match self {
            Lease::Fixed(d) | Lease::Watchdog(d) => d,
        }
    }
}

/// Longest lease accepted.
pub const MAX_LEASE: Duration = Duration::from_secs(365 * 24 * 3600);
/// Default watchdog lease.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// Options of a [`Lock`] (also used by [`ReentrantLock`] and [`Semaphore`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockOptions {
    lease: Lease,
    fencing: bool,
    fair: bool,
}

impl Default for LockOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl LockOptions {
    /// Watchdog lease of [`DEFAULT_LEASE`], no fencing tokens, not fair.
    pub const fn new() -> Self {
        LockOptions {
            lease: Lease::Watchdog(DEFAULT_LEASE),
            fencing: false,
            fair: false,
        }
    }

    /// A fixed lease: the lock expires `ttl` after it was taken.
    pub const fn lease(mut self, ttl: Duration) -> Self {
        self.lease = Lease::Fixed(ttl);
        self
    }

    /// A watchdog lease: held for `lease`, renewed every `lease / 3` while the
    /// guard lives.
    pub const fn watchdog(mut self, lease: Duration) -> Self {
        self.lease = Lease::Watchdog(lease);
        self
    }

    /// Whether each acquisition returns a fencing token.
    pub const fn fencing(mut self, on: bool) -> Self {
        self.fencing = on;
        self
    }

    /// A fair [`Lock`]: waiters get it in arrival order, and a release wakes
    /// only the first of them. A waiter that gives up or is cancelled leaves
    /// the line at once; a crashed one is dropped after [`FAIR_SLOT`].
    ///
    /// On Redis a release hands the lock straight to the first waiter, with
    /// the fencing token it asked for, and tells it so on its own channel: it
    /// holds the lock one message after the release, with no attempt of its
    /// own. The lock is set for the waiter's lease but at most
    /// [`HANDOFF_CLAIM`] until the waiter confirms its lease (its guard
    /// extends it at once, in the background), so a waiter that crashed or
    /// was stopped while first in line blocks the lock no longer than that.
    /// The guard counts the lease from the waiter's last attempt, which came
    /// before the handoff, so it never counts on more lease than it has. Each
    /// handoff is numbered, and each busy answer says how far the numbers
    /// had got: a handoff message that arrives after an answer that came
    /// after it (the handoff lapsed, and someone else took the lock) is
    /// ignored, and one whose claim has already run out when it arrives is
    /// given back, so the waiter never holds a guard while another client
    /// holds the lock.
    pub const fn fair(mut self, on: bool) -> Self {
        self.fair = on;
        self
    }

    /// The lease.
    pub const fn get_lease(&self) -> Lease {
        self.lease
    }

    fn validate(&self) -> Result<()> {
        let (d, min) = match self.lease {
            Lease::Fixed(d) => (d, Duration::from_millis(1)),
            Lease::Watchdog(d) => (d, Duration::from_millis(3)),
        };
        if d < min {
            return Err(Error::invalid_argument(
                "lease",
                "must be at least 1 ms (3 ms with a watchdog)",
            ));
        }
        if d > MAX_LEASE {
            return Err(Error::invalid_argument("lease", "must be at most a year"));
        }
        Ok(())
    }
}

/// A handle on one named distributed lock (plain, or fair with
/// [`LockOptions::fair`]). Cheap to clone.
#[derive(Debug, Clone)]
pub struct Lock<B> {
    backend: B,
    name: Name,
    kind: Kind,
    options: LockOptions,
}

impl<B: LockBackend> Lock<B> {
    /// A lock named `name` with default options.
    ///
    /// # Errors
    /// [`Error::InvalidName`] for an empty or oversized name, or one with braces.
    pub fn new(backend: B, name: impl AsRef<str>) -> Result<Self> {
        Self::with_options(backend, name, LockOptions::new())
    }

    /// A lock named `name` with `options`.
    ///
    /// # Errors
    /// [`Error::InvalidName`] for a bad name, [`Error::InvalidArgument`] for a
    /// zero lease or one longer than [`MAX_LEASE`].
    pub fn with_options(backend: B, name: impl AsRef<str>, options: LockOptions) -> Result<Self> {
        let kind = if options.fair {
            Kind::Fair
        } else {
            Kind::Plain
        };
        Self::of_kind(backend, name, kind, options)
    }

    pub(crate) fn of_kind(
        backend: B,
        name: impl AsRef<str>,
        kind: Kind,
        options: LockOptions,
    ) -> Result<Self> {
        let name = Name::new(name)?;
        options.validate()?;
        Ok(Lock {
            backend,
            name,
            kind,
            options,
        })
    }

    /// The lock's name.
    pub fn name(&self) -> &Name {
        &self.name
    }

    /// The lock's kind.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The lock's options.
    pub fn options(&self) -> &LockOptions {
        &self.options
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// Takes the lock if it is free, without waiting.
    ///
    /// # Errors
    /// Backend failures and timeouts.
    pub async fn try_lock(&self) -> Result<Option<LockGuard<B>>> {
        self.lock(Duration::ZERO).await
    }

    /// Takes the lock, waiting at most `wait` for it; `Ok(None)` when it was
    /// still busy. Cancel-safe: dropping the future releases anything it may
    /// have taken (and leaves a fair lock's line).
    ///
    /// # Errors
    /// Backend failures and timeouts. On [`Redlock`], an attempt that too
    /// few servers answered ([`Error::NoQuorum`]) is tried again, as a busy
    /// one is, while the wait lasts (the Redlock algorithm's retry); the
    /// error comes back only when the wait ran out on one.
    pub async fn lock(&self, wait: Duration) -> Result<Option<LockGuard<B>>> {
        self.acquire(None, wait).await
    }

    pub(crate) async fn acquire(
        &self,
        owner: Option<&str>,
        wait: Duration,
    ) -> Result<Option<LockGuard<B>>> {
        let deadline = Instant::now() + wait.min(MAX_LEASE);
        loop {
            match self.acquire_until(owner, deadline).await? {
                Acquisition::Held(guard) => return Ok(Some(guard)),
                Acquisition::Busy => return Ok(None),
                // A grant that ran out before it could be used: given back;
                // try again with a new token while the wait lasts.
                Acquisition::Stale if Instant::now() < deadline => {}
                Acquisition::Stale => return Ok(None),
            }
        }
    }

    /// One token's attempts until `deadline`: a guard whose lease is still
    /// running, busy when the wait ran out, or stale when Redis granted the
    /// lock but its lease had run out by the time the grant was seen (the
    /// process was paused, a handoff message came late). A stale grant is
    /// released before this returns, in the background if that fails; the
    /// caller must not reuse its token.
    async fn acquire_until(
        &self,
        owner: Option<&str>,
        deadline: Instant,
    ) -> Result<Acquisition<B>> {
        let token: Arc<str> = new_token().into();
        let lease = self.options.lease.duration();
        let mut cleanup = Cleanup {
            backend: &self.backend,
            kind: self.kind,
            name: &self.name,
            token: token.clone(),
            armed: false,
        };
        let mut waiter: Option<B::Waiter> = None;
        loop {
            if let Some(waiter) = waiter.as_mut() {
                waiter.arm().await;
            }
            let started = Instant::now();
            // A fair waiter that is cut off here has joined the line: leave it.
            cleanup.armed = true;
            let request = AcquireRequest {
                kind: self.kind,
                name: &self.name,
                token: &token,
                owner,
                lease,
                fencing: self.options.fencing && self.kind.fences(),
                // Only an attempt made with a waiter armed waits after a
                // busy answer (see the `Busy` arm below).
                waits: waiter.is_some(),
            };
            // A majority that did not answer in time may answer the next
            // attempt: Redlock retries it like a busy lock (the attempt has
            // already undone itself on every server).
            let (attempt, unanswered) = match self.backend.acquire(&request).await {
                Ok(attempt) => (attempt, None),
                Err(error @ Error::NoQuorum { .. }) => (Attempt::busy(None), Some(error)),
                Err(error) => return Err(error),
            };
            let (fence, granted) = match attempt {
                Attempt::Acquired { fence } => (
                    fence,
                    Granted {
                        at: started,
                        claim: None,
                    },
                ),
                Attempt::Busy { retry_in, handoffs } => {
                    cleanup.armed = self.kind == Kind::Fair;
                    let now = Instant::now();
                    if now >= deadline {
                        if self.kind == Kind::Fair {
                            // Give up our place in line now, not when it lapses
                            // (on failure, the cleanup retries in the background).
                            let left = self.backend.release(self.kind, &self.name, &token).await;
                            cleanup.armed = left.is_err();
                        }
                        return match unanswered {
                            Some(error) => Err(error),
                            None => Ok(Acquisition::Busy),
                        };
                    }
                    let Some(armed) = waiter.as_mut() else {
                        // First miss: subscribe, then retry at once so a
                        // release during the subscription is not missed.
                        waiter = Some(self.backend.waiter(self.kind, &self.name, &token));
                        continue;
                    };
                    let mut max = deadline - now;
                    if let Some(ttl) = retry_in {
                        max = max.min(ttl + Duration::from_millis(1));
                    }
                    if self.kind == Kind::Fair {
                        max = max.min(FAIR_REFRESH);
                    }
                    armed.wait(max).await;
                    // Handed over after this attempt was answered (a handoff
                    // from before the answer has lapsed: the answer was
                    // busy), so the claim counts from `started` at the
                    // earliest.
                    let Some(handoff) = armed.handed_over(handoffs) else {
                        continue;
                    };
                    (
                        handoff.fence,
                        Granted {
                            at: started,
                            claim: Some(handoff.claim),
                        },
                    )
                }
            };
            cleanup.armed = false;
            let drift = self.backend.clock_drift(lease);
            if granted.valid_until(self.options.lease, drift) <= Instant::now() {
                tracing::debug!(lock = %self.name, "a grant ran out before it was seen; giving it back");
                if self
                    .backend
                    .release(self.kind, &self.name, &token)
                    .await
                    .is_err()
                {
                    cleanup.armed = true;
                }
                return Ok(Acquisition::Stale);
            }
            return Ok(Acquisition::Held(LockGuard::new(
                self.backend.clone(),
                self.kind,
                self.name.clone(),
                token,
                fence,
                self.options.lease,
                granted,
                drift,
            )));
        }
    }

    /// Releases the lock whoever holds it (administrative unlock); says whether
    /// it was held. The holder learns of it at its next renewal. A fair lock
    /// then goes to the first in line, as on a release.
    ///
    /// # Errors
    /// Backend failures and timeouts.
    pub async fn force_unlock(&self) -> Result<bool> {
        self.backend.force_release(self.kind, &self.name).await
    }
}

/// What one token's attempts came to (see [`Lock::acquire_until`]).
enum Acquisition<B: LockBackend> {
    Held(LockGuard<B>),
    Busy,
    Stale,
}

/// Releases what an interrupted acquisition may have taken.
struct Cleanup<'a, B: LockBackend> {
    backend: &'a B,
    kind: Kind,
    name: &'a Name,
    token: Arc<str>,
    armed: bool,
}

impl<B: LockBackend> Drop for Cleanup<'_, B> {
    fn drop(&mut self) {
        if self.armed {
            guard::release_in_background(
                self.backend.clone(),
                self.kind,
                self.name.clone(),
                self.token.clone(),
                tokio::runtime::Handle::try_current().ok(),
            );
        }
    }
}

/// 128 random bits, hex-encoded.
fn new_token() -> String {
    format!("{:032x}", rand::random::<u128>())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::MemoryBackend;

    #[test]
    fn tokens_are_128_bit_hex_and_distinct() {
        let a = new_token();
        assert_eq!(a.len(), 32);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, new_token());
    }

    /// `lost()` is ready as soon as the lease has run out, even when no
    /// timer has fired yet (here the whole thread was blocked past the
    /// lease, as a paused process would be).
    #[tokio::test(flavor = "current_thread")]
    async fn lost_is_ready_once_the_lease_has_run_out() {
        use futures_util::FutureExt;
        let options = LockOptions::new().lease(Duration::from_millis(30));
        let lock = Lock::with_options(MemoryBackend::new(), "paused", options).unwrap();
        let guard = lock.try_lock().await.unwrap().expect("free");
        assert!(guard.lost().now_or_never().is_none(), "lost at once");
        std::thread::sleep(Duration::from_millis(60));
        assert!(guard.is_lost());
        assert!(
            guard.lost().now_or_never().is_some(),
            "lost() was pending although is_lost() was true"
        );
        let owned = guard.lost_owned();
        assert!(owned.now_or_never().is_some());
    }

    #[test]
    fn options_are_validated() {
        let b = MemoryBackend::new();
        for options in [
            LockOptions::new().lease(Duration::ZERO),
            LockOptions::new().watchdog(Duration::from_millis(2)),
            LockOptions::new().lease(MAX_LEASE + Duration::from_secs(1)),
        ] {
            assert!(matches!(
                Lock::with_options(b.clone(), "n", options),
                Err(Error::InvalidArgument { .. })
            ));
        }
        assert!(matches!(Lock::new(b, ""), Err(Error::InvalidName { .. })));
    }
}
