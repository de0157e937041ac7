//! Read-write locks: many readers or one writer.

use std::time::Duration;

use super::{Kind, Lock, LockBackend, LockGuard, LockOptions, LockState, Owner};
use crate::error::{Error, Result};
use crate::name::Name;

/// A distributed read-write lock: any number of readers at once, or one
/// writer. Each side is held with a lease (a watchdog by default), as a
/// [`Lock`] is; [`read`](Self::read) and [`write`](Self::write) return a
/// [`LockGuard`] each.
///
/// * **Writers are not starved.** A writer that finds readers waits ahead
///   of every reader that comes after it: new readers are refused until it
///   has had its turn (its place lapses after
///   [`FAIR_SLOT`](super::backend::FAIR_SLOT) without a retry, so a crashed writer
///   does not hold readers back for long). Readers already in finish
///   first; a writer waits for at most one batch of readers.
/// * **Reentrant for one [`Owner`].** An owner that holds either side
///   takes the read side again at once (even past waiting writers, which
///   wait for it), and a writer takes either side again. An owner that is
///   the only reader may take the write side (an upgrade); two readers
///   that both try to upgrade wait for each other until their waits run
///   out, so prefer taking the write side from the start.
/// * **Fencing tokens** ([`LockOptions::fencing`]) come with the write
///   side only: readers do not change the resource.
///
/// On Redis the lock is one hash with one lease for every acquisition
/// (renewed by each holder's watchdog), and a sorted set of waiting
/// writers, both under the name's hash tag; each operation is one script.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> lock_core::Result<()> {
/// use std::time::Duration;
/// use lock_core::backend::MemoryBackend;
/// use lock_core::lock::{Owner, ReadWriteLock};
///
/// let catalog = ReadWriteLock::new(MemoryBackend::new(), "catalog")?;
/// let (alice, bob, carol) = (Owner::new(), Owner::new(), Owner::new());
/// let a = catalog.try_read(&alice).await?.expect("free");
/// let b = catalog.try_read(&bob).await?.expect("readers share");
/// assert!(catalog.try_write(&carol).await?.is_none()); // readers hold it
/// a.release().await?;
/// b.release().await?;
/// let w = catalog.write(&carol, Duration::from_secs(1)).await?.expect("free again");
/// assert!(catalog.try_read(&alice).await?.is_none()); // the writer holds it
/// w.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct ReadWriteLock<B> {
    read: Lock<B>,
    write: Lock<B>,
}

impl<B: LockBackend> ReadWriteLock<B> {
    /// A read-write lock named `name` with default options.
    ///
    /// # Errors
    /// As [`Lock::new`].
    pub fn new(backend: B, name: impl AsRef<str>) -> Result<Self> {
        Self::with_options(backend, name, LockOptions::new())
    }

    /// A read-write lock with `options` (lease or watchdog, fencing tokens
    /// for writers; not fair: writers already go ahead of new readers).
    ///
    /// # Errors
    /// As [`Lock::with_options`], and [`Error::InvalidArgument`] when
    /// `options` ask for fairness.
    pub fn with_options(backend: B, name: impl AsRef<str>, options: LockOptions) -> Result<Self> {
        if options.fair {
            return Err(Error::invalid_argument(
                "options",
                "a read-write lock already lets waiting writers go ahead of new readers; it takes no fair(true)",
            ));
        }
        let name = name.as_ref();
        Ok(ReadWriteLock {
            read: Lock::of_kind(backend.clone(), name, Kind::Read, options)?,
            write: Lock::of_kind(backend, name, Kind::Write, options)?,
        })
    }

    /// The lock's name.
    pub fn name(&self) -> &Name {
        self.read.name()
    }

    /// Takes the read side for `owner` if no writer holds or waits for
    /// the lock (or `owner` already holds it), without waiting.
    ///
    /// # Errors
    /// Backend failures and timeouts.
    pub async fn try_read(&self, owner: &Owner) -> Result<Option<LockGuard<B>>> {
        self.read(owner, Duration::ZERO).await
    }

    /// Takes the read side for `owner`, waiting at most `wait`.
    /// Cancel-safe, as [`Lock::lock`].
    ///
    /// # Errors
    /// Backend failures and timeouts.
    pub async fn read(&self, owner: &Owner, wait: Duration) -> Result<Option<LockGuard<B>>> {
        self.read.acquire(Some(owner.id()), wait).await
    }

    /// Takes the write side for `owner` if nobody else holds the lock,
    /// without waiting.
    ///
    /// # Errors
    /// Backend failures and timeouts.
    pub async fn try_write(&self, owner: &Owner) -> Result<Option<LockGuard<B>>> {
        self.write(owner, Duration::ZERO).await
    }

    /// Takes the write side for `owner`, waiting at most `wait`; while it
    /// waits, new readers are held back. Cancel-safe: a writer that gives
    /// up or is dropped lets held-back readers go at once.
    ///
    /// # Errors
    /// Backend failures and timeouts.
    pub async fn write(&self, owner: &Owner, wait: Duration) -> Result<Option<LockGuard<B>>> {
        self.write.acquire(Some(owner.id()), wait).await
    }

    /// Who holds the lock now (`None`: nobody): the number of acquisitions
    /// (readers, or the writer's), the start of the writer's owner (or of
    /// one reader's), and how long the lease still runs.
    ///
    /// # Errors
    /// Backend failures and timeouts.
    pub async fn state(&self) -> Result<Option<LockState>> {
        self.read.state().await
    }

    /// Releases every reader and writer (administrative unlock); says
    /// whether anyone held it.
    ///
    /// # Errors
    /// Backend failures and timeouts.
    pub async fn force_unlock(&self) -> Result<bool> {
        self.read.force_unlock().await
    }
}
