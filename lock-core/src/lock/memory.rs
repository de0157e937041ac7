//! The plain lock in memory: same semantics as on Redis, for one process.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use super::{Attempt, LockBackend, ReleaseWaiter};
use crate::backend::MemoryBackend;
use crate::backend::notify::{WaitHandle, Waiters};
use crate::error::Result;
use crate::key::Name;

struct Held {
    token: Box<str>,
    expires: Instant,
}

/// Held locks of one [`MemoryBackend`]. Expired entries are dropped when
/// touched and swept every [`SWEEP_EVERY`] acquisitions, so the map only
/// holds live locks.
#[derive(Default)]
pub(crate) struct LockTable {
    held: Mutex<HashMap<Name, Held>>,
    fence: AtomicU64,
    acquisitions: AtomicU64,
    waiters: Waiters,
}

const SWEEP_EVERY: u64 = 1024;

impl LockTable {
    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<Name, Held>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn acquire(&self, name: &Name, token: &str, lease: Duration, fencing: bool) -> Attempt {
        let now = Instant::now();
        let mut held = self.held();
        if self.acquisitions.fetch_add(1, Ordering::Relaxed) % SWEEP_EVERY == SWEEP_EVERY - 1 {
            held.retain(|_, h| h.expires > now);
        }
        if let Some(h) = held.get(name).filter(|h| h.expires > now) {
            return Attempt::Busy {
                retry_in: Some(h.expires - now),
            };
        }
        held.insert(
            name.clone(),
            Held {
                token: token.into(),
                expires: now + lease,
            },
        );
        // One counter for all names: monotonic overall, so monotonic per name.
        let fence = fencing.then(|| self.fence.fetch_add(1, Ordering::Relaxed) + 1);
        Attempt::Acquired { fence }
    }

    fn release(&self, name: &Name, token: &str) -> bool {
        let now = Instant::now();
        let mut held = self.held();
        match held.get(name) {
            Some(h) if h.expires > now && &*h.token == token => {
                held.remove(name);
                drop(held);
                self.waiters.wake(name.as_str());
                true
            }
            _ => false,
        }
    }

    fn extend(&self, name: &Name, token: &str, lease: Duration) -> bool {
        let now = Instant::now();
        match self.held().get_mut(name) {
            Some(h) if h.expires > now && &*h.token == token => {
                h.expires = now + lease;
                true
            }
            _ => false,
        }
    }

    fn force_release(&self, name: &Name) -> bool {
        let now = Instant::now();
        let removed = self.held().remove(name).is_some_and(|h| h.expires > now);
        if removed {
            self.waiters.wake(name.as_str());
        }
        removed
    }

    /// Live (unexpired) locks, for tests of eviction.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        let now = Instant::now();
        self.held().values().filter(|h| h.expires > now).count()
    }
}

impl LockBackend for MemoryBackend {
    type Waiter = MemoryWaiter;

    async fn acquire(
        &self,
        name: &Name,
        token: &str,
        lease: Duration,
        fencing: bool,
    ) -> Result<Attempt> {
        Ok(self.inner.locks.acquire(name, token, lease, fencing))
    }

    async fn release(&self, name: &Name, token: &str) -> Result<bool> {
        Ok(self.inner.locks.release(name, token))
    }

    async fn extend(&self, name: &Name, token: &str, lease: Duration) -> Result<bool> {
        Ok(self.inner.locks.extend(name, token, lease))
    }

    async fn force_release(&self, name: &Name) -> Result<bool> {
        Ok(self.inner.locks.force_release(name))
    }

    fn waiter(&self, name: &Name) -> MemoryWaiter {
        MemoryWaiter {
            handle: self.inner.locks.waiters.register(name.as_str()),
        }
    }
}

/// Waits for a release of one name in a [`MemoryBackend`].
pub struct MemoryWaiter {
    handle: WaitHandle,
}

impl std::fmt::Debug for MemoryWaiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryWaiter").finish_non_exhaustive()
    }
}

impl ReleaseWaiter for MemoryWaiter {
    async fn arm(&mut self) {
        self.handle.mark_seen();
    }

    async fn wait(&mut self, max: Duration) {
        let _ = tokio::time::timeout(max, self.handle.changed()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn expired_locks_are_swept() {
        let table = LockTable::default();
        for i in 0..(2 * SWEEP_EVERY) {
            let name = Name::new(format!("n{i}")).unwrap();
            table.acquire(&name, "t", Duration::from_millis(1), false);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
        let name = Name::new("last").unwrap();
        for _ in 0..SWEEP_EVERY {
            table.acquire(&name, "t", Duration::from_secs(10), false);
        }
        assert!(
            table.held().len() <= 2,
            "held {} entries",
            table.held().len()
        );
        assert_eq!(table.len(), 1);
    }
}
