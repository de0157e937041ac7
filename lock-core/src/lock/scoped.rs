//! Work run under a lock: taken before, stopped when the lease is lost,
//! released after, whichever way it ends.

use std::future::Future;
use std::time::Duration;

use super::{Lock, LockBackend};
use crate::error::{Error, Result};

impl<B: LockBackend> Lock<B> {
    /// Runs `work` holding the lock, waiting at most `wait` for it:
    /// `Ok(Some(output))` when it ran to the end, `Ok(None)` when the lock
    /// stayed busy (the work did not start), and [`Error::LeaseLost`] when
    /// the lease was lost first (the work was stopped, dropped where it
    /// stood). The lock is released on every path: at the end, on an
    /// error, and when the returned future is itself dropped.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> lock_core::Result<()> {
    /// use std::time::Duration;
    /// use lock_core::backend::MemoryBackend;
    /// use lock_core::lock::Lock;
    ///
    /// let lock = Lock::new(MemoryBackend::new(), "nightly-report")?;
    /// let rows = lock
    ///     .run(Duration::from_secs(1), async { 42 /* ... build the report ... */ })
    ///     .await?;
    /// assert_eq!(rows, Some(42));
    /// assert!(!lock.is_locked().await?);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::LeaseLost`]; backend failures and timeouts, taking or
    /// releasing the lock.
    pub async fn run<T>(&self, wait: Duration, work: impl Future<Output = T>) -> Result<Option<T>> {
        let Some(guard) = self.lock(wait).await? else {
            return Ok(None);
        };
        let output = tokio::select! {
            biased;
            () = guard.lost() => None,
            output = work => Some(output),
        };
        match output {
            Some(output) => {
                guard.release().await?;
                Ok(Some(output))
            }
            // The guard goes: a lost lock is given back in the background,
            // in case it is still ours on some server.
            None => Err(Error::LeaseLost),
        }
    }
}
