//! The memory backend as a [`LockBackend`], and its waiter.

use std::time::Duration;

use super::LockTable;
use crate::backend::MemoryBackend;
use crate::backend::notify::WaitHandle;
use crate::error::Result;
use crate::lock::interface::{
    AcquireRequest, Attempt, Kind, LockBackend, LockState, ReleaseWaiter,
};
use crate::name::Name;

impl LockBackend for MemoryBackend {
    type Waiter = MemoryWaiter;

    async fn acquire(&self, request: &AcquireRequest<'_>) -> Result<Attempt> {
        Ok(self.state::<LockTable>().acquire(request))
    }

    async fn release(&self, kind: Kind, name: &Name, token: &str) -> Result<bool> {
        Ok(self.state::<LockTable>().release(kind, name, token))
    }

    async fn extend(&self, kind: Kind, name: &Name, token: &str, lease: Duration) -> Result<bool> {
        Ok(self.state::<LockTable>().extend(kind, name, token, lease))
    }

    async fn force_release(&self, kind: Kind, name: &Name) -> Result<bool> {
        Ok(self.state::<LockTable>().force_release(kind, name))
    }

    async fn inspect(&self, kind: Kind, name: &Name) -> Result<Option<LockState>> {
        Ok(self.state::<LockTable>().inspect(kind, name))
    }

    fn waiter(&self, kind: Kind, name: &Name, token: &str) -> MemoryWaiter {
        let key = kind.module(|k| k.memory_channel(name, Some(token)));
        MemoryWaiter {
            handle: self.state::<LockTable>().waiters.register(&key, None),
        }
    }
}

/// Waits for a release in a [`MemoryBackend`].
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
