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

mod acquire;
pub mod backend;
mod fencing;
mod guard;
mod interface;
mod kinds;
pub(crate) mod memory;
mod multi;
mod options;
mod read_write;
#[cfg(feature = "redis")]
mod redis;
#[cfg(feature = "redis")]
mod redis_waiter;
#[cfg(feature = "redis")]
mod redlock;
mod reentrant;
mod scoped;
mod semaphore;
mod watchdog;

use std::time::Duration;

pub use self::backend::{LockBackend, LockState};
pub use self::fencing::{Fence, StaleToken};
pub use self::guard::LockGuard;
use self::interface::{AcquireRequest, Attempt, Kind, ReleaseWaiter};
pub use self::multi::{MultiGuard, MultiLock};
pub use self::options::{DEFAULT_LEASE, Lease, LockOptions, MAX_LEASE};
pub use self::read_write::ReadWriteLock;
#[cfg(feature = "redis")]
pub use self::redlock::{DEFAULT_PER_SERVER_TIMEOUT, Redlock};
pub use self::reentrant::{Owner, ReentrantLock};
pub use self::semaphore::{MAX_PERMITS, Semaphore};
use crate::error::Result;
use crate::name::Name;

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
    /// [`Error::InvalidName`](crate::Error::InvalidName) for an empty or oversized name, or one with braces.
    pub fn new(backend: B, name: impl AsRef<str>) -> Result<Self> {
        Self::with_options(backend, name, LockOptions::new())
    }

    /// A lock named `name` with `options`.
    ///
    /// # Errors
    /// [`Error::InvalidName`](crate::Error::InvalidName) for a bad name, [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a
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
    /// few servers answered ([`Error::NoQuorum`](crate::Error::NoQuorum)) is tried again, as a busy
    /// one is, while the wait lasts (the Redlock algorithm's retry); the
    /// error comes back only when the wait ran out on one.
    pub async fn lock(&self, wait: Duration) -> Result<Option<LockGuard<B>>> {
        self.acquire(None, wait).await
    }

    /// Who holds the lock now (`None`: nobody): how long its lease still
    /// runs and the start of its token, for operators.
    ///
    /// # Errors
    /// Backend failures and timeouts.
    pub async fn state(&self) -> Result<Option<LockState>> {
        self.backend.inspect(self.kind, &self.name).await
    }

    /// Whether someone holds the lock now.
    ///
    /// # Errors
    /// Backend failures and timeouts.
    pub async fn is_locked(&self) -> Result<bool> {
        Ok(self.state().await?.is_some())
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

/// 128 random bits, hex-encoded (by hand: `format!` costs several times
/// as much, on every acquire).
fn new_token() -> String {
    hex(rand::random::<u128>())
}

/// `bits` as 32 lowercase hex digits.
fn hex(bits: u128) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    (0..32)
        .rev()
        .map(|nibble| char::from(HEX[(bits >> (4 * nibble)) as usize & 0xf]))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::MemoryBackend;
    use crate::error::Error;

    #[test]
    fn tokens_are_128_bit_hex_and_distinct() {
        let a = new_token();
        assert_eq!(a.len(), 32);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, new_token());
        for bits in [0, 1, 0xfedc_ba98, u128::MAX, u128::MAX / 3] {
            assert_eq!(hex(bits), format!("{bits:032x}"));
        }
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
