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
}

impl<B: LockBackend> Semaphore<B> {
    /// A semaphore named `name` with `permits` permits and default options.
    ///
    /// # Errors
    /// As [`Lock::new`].
    pub fn new(backend: B, name: impl AsRef<str>, permits: NonZeroU32) -> Result<Self> {
        Self::with_options(backend, name, permits, LockOptions::new())
    }

    /// A semaphore with `options` (lease or watchdog; no fencing, not fair).
    ///
    /// # Errors
    /// As [`Lock::with_options`], and [`Error::InvalidArgument`] when
    /// `options` ask for fencing tokens or fairness.
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
        Ok(Semaphore {
            inner: Lock::of_kind(backend, name, Kind::Semaphore { permits }, options)?,
        })
    }

    /// The semaphore's name.
    pub fn name(&self) -> &Name {
        self.inner.name()
    }

    /// How many permits there are.
    pub fn permits(&self) -> u32 {
        match self.inner.kind() {
            Kind::Semaphore { permits } => permits.get(),
            _ => 1,
        }
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

    /// Returns every permit (administrative reset).
    ///
    /// # Errors
    /// Backend failures and timeouts.
    pub async fn force_release_all(&self) -> Result<bool> {
        self.inner.force_unlock().await
    }
}
