//! Reentrant locks: one owner may hold the lock several times at once.

use std::sync::Arc;
use std::time::Duration;

use super::{Kind, Lock, LockBackend, LockGuard, LockOptions, LockState, new_token};
use crate::error::Result;
use crate::name::Name;

/// Who holds a [`ReentrantLock`]. Async tasks have no thread id, so ownership
/// is an explicit value: pass the same `Owner` down the nested code paths of
/// one request and they re-enter; any other owner is excluded.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Owner(Arc<str>);

impl Owner {
    /// A new owner with a random 128-bit id.
    pub fn new() -> Self {
        Owner(new_token().into())
    }

    /// An owner with a chosen id (e.g. a request id), validated like a name.
    ///
    /// # Errors
    /// [`Error::InvalidName`](crate::Error::InvalidName) for an empty, oversized or braced id.
    pub fn from_id(id: impl AsRef<str>) -> Result<Self> {
        Ok(Owner(Name::new(id)?.as_str().into()))
    }

    /// The id.
    pub fn id(&self) -> &str {
        &self.0
    }
}

impl Default for Owner {
    fn default() -> Self {
        Self::new()
    }
}

/// A distributed reentrant lock. Each successful [`lock`](Self::lock) returns
/// its own guard; the lock is free again once every guard of the owner is
/// released (or its lease ends).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> lock_core::Result<()> {
/// use lock_core::backend::MemoryBackend;
/// use lock_core::lock::{Owner, ReentrantLock};
///
/// let lock = ReentrantLock::new(MemoryBackend::new(), "account:7")?;
/// let me = Owner::new();
/// let outer = lock.try_lock(&me).await?.expect("free");
/// let inner = lock.try_lock(&me).await?.expect("same owner re-enters");
/// assert!(lock.try_lock(&Owner::new()).await?.is_none());
/// inner.release().await?;
/// outer.release().await?;
/// assert!(lock.try_lock(&Owner::new()).await?.is_some());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct ReentrantLock<B> {
    inner: Lock<B>,
}

impl<B: LockBackend> ReentrantLock<B> {
    /// A reentrant lock named `name` with default options.
    ///
    /// # Errors
    /// As [`Lock::new`].
    pub fn new(backend: B, name: impl AsRef<str>) -> Result<Self> {
        Self::with_options(backend, name, LockOptions::new())
    }

    /// A reentrant lock with `options`. With [`LockOptions::fair`], other
    /// owners get it in arrival order (a FIFO line, as a fair [`Lock`]),
    /// while the owner that holds it re-enters at once, without queueing.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> lock_core::Result<()> {
    /// use std::time::Duration;
    /// use lock_core::backend::MemoryBackend;
    /// use lock_core::lock::{LockOptions, Owner, ReentrantLock};
    ///
    /// let fair = LockOptions::new().fair(true);
    /// let lock = ReentrantLock::with_options(MemoryBackend::new(), "ledger", fair)?;
    /// let me = Owner::new();
    /// let outer = lock.lock(&me, Duration::from_secs(1)).await?.expect("free");
    /// let inner = lock.try_lock(&me).await?.expect("re-enters past any line");
    /// inner.release().await?;
    /// outer.release().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`Lock::with_options`].
    pub fn with_options(backend: B, name: impl AsRef<str>, options: LockOptions) -> Result<Self> {
        let kind = if options.fair {
            Kind::Fair
        } else {
            Kind::Reentrant
        };
        Ok(ReentrantLock {
            inner: Lock::of_kind(backend, name, kind, options)?,
        })
    }

    /// The lock's name.
    pub fn name(&self) -> &Name {
        self.inner.name()
    }

    /// Takes the lock for `owner` if it is free or already `owner`'s.
    ///
    /// # Errors
    /// Backend failures and timeouts.
    pub async fn try_lock(&self, owner: &Owner) -> Result<Option<LockGuard<B>>> {
        self.lock(owner, Duration::ZERO).await
    }

    /// Takes the lock for `owner`, waiting at most `wait` while another owner
    /// holds it.
    ///
    /// # Errors
    /// Backend failures and timeouts.
    pub async fn lock(&self, owner: &Owner, wait: Duration) -> Result<Option<LockGuard<B>>> {
        self.inner.acquire(Some(owner.id()), wait).await
    }

    /// Who holds the lock now (`None`: nobody): the start of the owner's
    /// name and how long its lease still runs.
    ///
    /// # Errors
    /// Backend failures and timeouts.
    pub async fn state(&self) -> Result<Option<LockState>> {
        self.inner.state().await
    }

    /// Releases the lock whoever holds it, however many times.
    ///
    /// # Errors
    /// Backend failures and timeouts.
    pub async fn force_unlock(&self) -> Result<bool> {
        self.inner.force_unlock().await
    }
}
