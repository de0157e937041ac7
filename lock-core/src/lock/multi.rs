//! Several locks held together, taken in one fixed order.

use std::time::Duration;

use tokio::time::Instant;

use super::{Lock, LockBackend, LockGuard, LockOptions};
use crate::error::{Error, Result};

/// Several named locks held as one: all or none. They are always taken in
/// the order of their names, whatever order they were given in, so two
/// callers locking overlapping sets (`{a, b}` and `{b, a}`) never wait for
/// each other in a circle; a caller that cannot have them all within its
/// wait gives back those it took.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> lock_core::Result<()> {
/// use std::time::Duration;
/// use lock_core::backend::MemoryBackend;
/// use lock_core::lock::MultiLock;
///
/// let backend = MemoryBackend::new();
/// // Move stock between two warehouses: both or neither.
/// let both = MultiLock::new(backend.clone(), ["warehouse:b", "warehouse:a"])?;
/// let held = both.lock(Duration::from_secs(1)).await?.expect("free");
/// let one = MultiLock::new(backend, ["warehouse:a"])?;
/// assert!(one.try_lock().await?.is_none());
/// held.release().await?;
/// assert!(one.try_lock().await?.is_some());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct MultiLock<B> {
    /// In the order they are taken: by name, each once.
    locks: Vec<Lock<B>>,
}

impl<B: LockBackend> MultiLock<B> {
    /// The locks named `names` (each once) with default options.
    ///
    /// # Errors
    /// As [`Lock::new`] for each name, and
    /// [`Error::InvalidArgument`] for no name at all.
    pub fn new<N: AsRef<str>>(backend: B, names: impl IntoIterator<Item = N>) -> Result<Self> {
        Self::with_options(backend, names, LockOptions::new())
    }

    /// The locks named `names` (each once), each with `options`.
    ///
    /// # Errors
    /// As [`new`](Self::new), and as [`Lock::with_options`].
    pub fn with_options<N: AsRef<str>>(
        backend: B,
        names: impl IntoIterator<Item = N>,
        options: LockOptions,
    ) -> Result<Self> {
        let mut locks = names
            .into_iter()
            .map(|name| Lock::with_options(backend.clone(), name, options))
            .collect::<Result<Vec<_>>>()?;
        if locks.is_empty() {
            return Err(Error::invalid_argument("names", "needs at least one lock"));
        }
        locks.sort_by(|a, b| a.name().as_str().cmp(b.name().as_str()));
        locks.dedup_by(|a, b| a.name() == b.name());
        Ok(MultiLock { locks })
    }

    /// The locks, in the order they are taken.
    pub fn locks(&self) -> &[Lock<B>] {
        &self.locks
    }

    /// Takes them all if they are all free now.
    ///
    /// # Errors
    /// Backend failures and timeouts; whatever was taken is given back.
    pub async fn try_lock(&self) -> Result<Option<MultiGuard<B>>> {
        self.lock(Duration::ZERO).await
    }

    /// Takes them all, waiting at most `wait` in all; `Ok(None)` when one
    /// stayed busy (those taken before it are given back). Cancel-safe, as
    /// [`Lock::lock`].
    ///
    /// Every guard returned is valid: when a lease taken early ran out
    /// while a later name was awaited (a fixed lease shorter than the
    /// wait), all are given back and taken again while the wait lasts;
    /// `Ok(None)` when it is over.
    ///
    /// # Errors
    /// Backend failures and timeouts; whatever was taken is given back.
    pub async fn lock(&self, wait: Duration) -> Result<Option<MultiGuard<B>>> {
        let deadline = crate::time::deadline_after(wait);
        loop {
            let mut guards = Vec::with_capacity(self.locks.len());
            for lock in &self.locks {
                let left = deadline.saturating_duration_since(Instant::now());
                match lock.lock(left).await {
                    Ok(Some(guard)) => guards.push(guard),
                    outcome => {
                        give_back(guards).await;
                        return outcome.map(|_| None);
                    }
                }
            }
            // A lease that ran out may be someone else's lock by now.
            if guards.iter().all(|guard| !guard.valid_for().is_zero()) {
                return Ok(Some(MultiGuard { guards }));
            }
            give_back(guards).await;
            if Instant::now() >= deadline {
                return Ok(None);
            }
        }
    }
}

/// Releases `guards` now, in the reverse order of taking.
async fn give_back<B: LockBackend>(guards: Vec<LockGuard<B>>) {
    for guard in guards.into_iter().rev() {
        let _ = guard.release().await;
    }
}

/// Every lock of a [`MultiLock`], held. Dropping it releases them all in
/// the background.
#[derive(Debug)]
pub struct MultiGuard<B: LockBackend> {
    guards: Vec<LockGuard<B>>,
}

impl<B: LockBackend> MultiGuard<B> {
    /// The guard of each lock, in the order they were taken (with their
    /// fencing tokens, when asked for).
    pub fn guards(&self) -> &[LockGuard<B>] {
        &self.guards
    }

    /// Whether any of the leases is lost.
    pub fn is_lost(&self) -> bool {
        self.guards.iter().any(LockGuard::is_lost)
    }

    /// Completes when any of the leases is lost.
    pub async fn lost(&self) {
        futures_util::future::select_all(self.guards.iter().map(|guard| Box::pin(guard.lost())))
            .await;
    }

    /// Releases them all, in the reverse order; says whether every one was
    /// still held.
    ///
    /// # Errors
    /// The first backend failure (the others are still released).
    pub async fn release(self) -> Result<bool> {
        let mut all = true;
        let mut failed = None;
        for guard in self.guards.into_iter().rev() {
            match guard.release().await {
                Ok(held) => all &= held,
                Err(error) => failed = failed.or(Some(error)),
            }
        }
        failed.map_or(Ok(all), Err)
    }
}
