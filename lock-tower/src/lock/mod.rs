//! Per-key distributed locks and concurrency limits as tower layers.
//!
//! [`LockLayer`] serializes requests that share a key across every instance:
//! a request takes the lock for its key, runs, and releases it once the
//! response is produced (or, with [`LockLayer::hold_until_body_sent`], once its
//! body has been sent). A client that goes away drops the future, which
//! releases the lock at once. A request that finds the key busy either waits
//! (bounded; then 503 with `Retry-After`) or is refused at once (423 Locked by
//! default, or 409).
//!
//! [`ConcurrencyLimitLayer`] admits at most N requests per key at once (a
//! distributed semaphore per key), with the same options.
//!
//! ```
//! use std::time::Duration;
//! use lock_core::backend::MemoryBackend;
//! use lock_tower::key::PathKey;
//! use lock_tower::{ConcurrencyLimitLayer, LockLayer};
//!
//! // One request at a time per path, waiting up to 2 s for the lock.
//! let serialize = LockLayer::new(MemoryBackend::new(), PathKey).wait(Duration::from_secs(2));
//! // At most 4 requests per path at once, refusing the 5th.
//! let limit = ConcurrencyLimitLayer::new(MemoryBackend::new(), PathKey, 4.try_into().unwrap());
//! # let _ = (serialize, limit);
//! ```

use bytes::Bytes;
use futures_util::future::BoxFuture;
use http::Response;

use crate::body::Held;

mod acquire;
mod future;
mod layer;
mod service;

pub use self::future::ResponseFuture;
pub use self::layer::{ConcurrencyLimitLayer, DEFAULT_LOCK_TIMEOUT, LockLayer};
pub use self::service::LockService;

/// A lock (or permit) taken for a request. Dropping it releases the lock in
/// the background.
pub struct HeldLock {
    pub(crate) guard: Held,
    pub(crate) lost: BoxFuture<'static, ()>,
    /// Releases `guard` in the foreground.
    pub(crate) release: fn(Held) -> BoxFuture<'static, ()>,
}

impl HeldLock {
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
        f.debug_struct("HeldLock").finish_non_exhaustive()
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
