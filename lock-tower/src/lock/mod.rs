//! Per-key distributed locks and concurrency limits as tower layers:
//! [`LockLayer`] (one request at a time per key, or a read-write lock per
//! key) and [`ConcurrencyLimitLayer`] (at most N at once per key). Each
//! layer's own docs say what it does, with an example.

use bytes::Bytes;
use futures_util::future::BoxFuture;
use http::Response;

use crate::body::Held;

mod acquire;
mod future;
mod layer;
mod service;

pub use self::future::ResponseFuture;
pub use self::layer::{
    ConcurrencyLimitLayer, ConcurrencyLimitLayerWith, DEFAULT_LOCK_TIMEOUT, DEFAULT_LOCK_WAIT,
    LockLayer, LockLayerWith,
};
pub use self::service::LockService;

/// A lock (or permit) taken for a request. Dropping it releases the lock in
/// the background.
pub struct HeldLock {
    pub(crate) guard: Held,
    pub(crate) lost: BoxFuture<'static, ()>,
    /// Releases `guard` in the foreground.
    pub(crate) release: fn(Held) -> BoxFuture<'static, ()>,
    pub(crate) fence: Option<u64>,
    /// Records how long it was held, when it goes.
    pub(crate) _timer: HoldTimer,
}

/// Records a hold's length in the layer's metrics when dropped.
pub(crate) struct HoldTimer {
    pub(crate) metrics: std::sync::Arc<crate::Metrics>,
    pub(crate) since: std::time::Instant,
}

impl Drop for HoldTimer {
    fn drop(&mut self) {
        self.metrics.record_hold(self.since.elapsed());
    }
}

impl HeldLock {
    /// The lock's fencing token, when the layer's
    /// [`LockOptions`](lock_core::lock::LockOptions) ask for fencing: pass
    /// it to the resource the handler writes to, so that a write from a
    /// holder whose lease ran out is refused
    /// ([`Fence::admit`](lock_core::lock::Fence::admit)).
    pub fn fencing_token(&self) -> Option<u64> {
        self.fence
    }

    /// Releases the lock now, in the foreground (dropping it releases in the
    /// background instead).
    pub async fn release(self) {
        (self.release)(self.guard).await;
    }

    /// Completes when the lock's lease is lost (renewal failed, or it was
    /// taken over): work that needs the lock should stop.
    pub async fn lost(&mut self) {
        (&mut self.lost).await;
    }
}

impl std::fmt::Debug for HeldLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeldLock")
            .field("fencing_token", &self.fence)
            .finish_non_exhaustive()
    }
}

/// What a [`LockLayer`] decided for one request.
#[derive(Debug)]
#[non_exhaustive]
pub enum LockVerdict {
    /// Go ahead, holding this lock (none when the backend failed open or the
    /// request had no key and passes through).
    Proceed(Option<HeldLock>),
    /// Busy, failed closed, or no key: answer with this.
    Respond(Response<Bytes>),
}
