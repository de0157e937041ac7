//! Distributed semaphores with expiring permits.

use std::num::NonZeroU32;
use std::time::Duration;

use super::{Kind, Lock, LockBackend, LockGuard, LockOptions};
use crate::error::{Error, Result};
use crate::name::Name;

/// At most `permits` holders at once, across every instance. Each permit has
/// a lease (fixed or renewed by a watchdog, as for a [`Lock`]), so a crashed
/// holder's permit comes back when its lease ends. Permits carry no fencing
/// tokens (several holders at once).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> lock_core::Result<()> {
/// use std::num::NonZeroU32;
/// use lock_core::backend::MemoryBackend;
/// use lock_core::lock::Semaphore;
///
/// let two = NonZeroU32::new(2).unwrap();
/// let sem = Semaphore::new(MemoryBackend::new(), "exports", two)?;
/// let a = sem.try_acquire().await?.expect("permit");
/// let b = sem.try_acquire().await?.expect("permit");
/// assert!(sem.try_acquire().await?.is_none());
/// a.release().await?;
/// assert!(sem.try_acquire().await?.is_some());
/// # drop(b);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Semaphore<B> {
    inner: Lock<B>,
    permits: NonZeroU32,
}

/// The most permits a [`Semaphore`] has. On Redis a holder keeps one
/// member per permit it holds, and a call changes them all at once: more
/// would hold up the server for every call, and a release could not name
/// them all in one script call.
pub const MAX_PERMITS: u32 = 4096;

impl<B: LockBackend> Semaphore<B> {
    /// A semaphore named `name` with `permits` permits and default options.
    ///
    /// # Errors
    /// As [`Lock::new`], and [`Error::InvalidArgument`] for more than
    /// [`MAX_PERMITS`] permits.
    pub fn new(backend: B, name: impl AsRef<str>, permits: NonZeroU32) -> Result<Self> {
        Self::with_options(backend, name, permits, LockOptions::new())
    }

    /// A semaphore with `options` (lease or watchdog; no fencing, not fair).
    ///
    /// # Errors
    /// As [`Lock::with_options`], and [`Error::InvalidArgument`] when
    /// `options` ask for fencing tokens or fairness, or for more than
    /// [`MAX_PERMITS`] permits.
    pub fn with_options(
        backend: B,
        name: impl AsRef<str>,
        permits: NonZeroU32,
        options: LockOptions,
    ) -> Result<Self> {
        if options.fencing || options.fair {
            return Err(Error::invalid_argument(
                "options",
                "semaphore permits are neither fenced nor fair",
            ));
        }
        if permits.get() > MAX_PERMITS {
            return Err(Error::invalid_argument(
                "permits",
                "at most 4096 (lock::MAX_PERMITS): on Redis each permit held is a member",
            ));
        }
        let kind = Kind::Semaphore {
            permits,
            count: NonZeroU32::MIN,
        };
        Ok(Semaphore {
            inner: Lock::of_kind(backend, name, kind, options)?,
            permits,
        })
    }

    /// The semaphore's name.
    pub fn name(&self) -> &Name {
        self.inner.name()
    }

    /// How many permits there are.
    pub fn permits(&self) -> u32 {
        self.permits.get()
    }

    /// Takes a permit if one is free, without waiting.
    ///
    /// # Errors
    /// Backend failures and timeouts.
    pub async fn try_acquire(&self) -> Result<Option<LockGuard<B>>> {
        self.acquire(Duration::ZERO).await
    }

    /// Takes a permit, waiting at most `wait` for one.
    ///
    /// # Errors
    /// Backend failures and timeouts.
    pub async fn acquire(&self, wait: Duration) -> Result<Option<LockGuard<B>>> {
        self.inner.acquire(None, wait).await
    }

    /// Takes `n` permits at once if that many are free (all or none),
    /// without waiting. Releasing the guard returns all of them.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `n` is above the number of permits
    /// (it could never be granted); backend failures and timeouts.
    pub async fn try_acquire_many(&self, n: NonZeroU32) -> Result<Option<LockGuard<B>>> {
        self.acquire_many(n, Duration::ZERO).await
    }

    /// Takes `n` permits at once (all or none), waiting at most `wait` for
    /// that many to be free.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> lock_core::Result<()> {
    /// use std::num::NonZeroU32;
    /// use std::time::Duration;
    /// use lock_core::backend::MemoryBackend;
    /// use lock_core::lock::Semaphore;
    ///
    /// let sem = Semaphore::new(MemoryBackend::new(), "gpu", NonZeroU32::new(4).unwrap())?;
    /// let three = sem.try_acquire_many(NonZeroU32::new(3).unwrap()).await?.expect("free");
    /// assert_eq!(sem.available().await?, 1);
    /// // Two more do not fit: none is taken.
    /// assert!(sem.try_acquire_many(NonZeroU32::new(2).unwrap()).await?.is_none());
    /// three.release().await?;
    /// assert_eq!(sem.available().await?, 4);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`try_acquire_many`](Self::try_acquire_many).
    pub async fn acquire_many(
        &self,
        n: NonZeroU32,
        wait: Duration,
    ) -> Result<Option<LockGuard<B>>> {
        let permits = self.permits;
        if n > permits {
            return Err(Error::invalid_argument(
                "n",
                "more permits than the semaphore has (they could never be taken)",
            ));
        }
        let kind = Kind::Semaphore { permits, count: n };
        let lock = Lock::of_kind(
            self.inner.backend().clone(),
            self.inner.name().as_str(),
            kind,
            *self.inner.options(),
        )?;
        lock.acquire(None, wait).await
    }

    /// How many permits are free now (the permits, less those whose lease
    /// is running).
    ///
    /// # Errors
    /// Backend failures and timeouts.
    pub async fn available(&self) -> Result<u32> {
        let taken = self.inner.state().await?.map_or(0, |state| state.taken);
        Ok(self.permits().saturating_sub(taken))
    }

    /// Returns every permit (administrative reset).
    ///
    /// # Errors
    /// Backend failures and timeouts.
    pub async fn force_release_all(&self) -> Result<bool> {
        self.inner.force_unlock().await
    }
}
