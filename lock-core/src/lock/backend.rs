//! The interface for implementing a lock store: what a store must do to
//! keep locks ([`LockBackend`]), what it is asked ([`AcquireRequest`],
//! [`Kind`]) and answers ([`Attempt`], [`LockState`]), how a waiter learns
//! of a release or a handoff ([`ReleaseWaiter`], [`Handoff`]), this
//! crate's own waiters, and the protocol's durations that every store
//! must keep to.
//!
//! Code that only takes locks needs none of it but [`LockBackend`] (also
//! at [`lock_core::lock`](super), for generic bounds). A store of your own,
//! or a wrapper around one (to record or delay calls), implements
//! [`LockBackend`] with these types:
//!
//! ```
//! use std::time::Duration;
//! use lock_core::Result;
//! use lock_core::backend::MemoryBackend;
//! use lock_core::lock::backend::{AcquireRequest, Attempt, Kind, LockBackend, LockState};
//! use lock_core::name::Name;
//!
//! /// Counts acquisition attempts, and passes every call on.
//! #[derive(Clone, Default)]
//! struct Counted {
//!     inner: MemoryBackend,
//!     attempts: std::sync::Arc<std::sync::atomic::AtomicU64>,
//! }
//!
//! impl LockBackend for Counted {
//!     type Waiter = <MemoryBackend as LockBackend>::Waiter;
//!
//!     async fn acquire(&self, request: &AcquireRequest<'_>) -> Result<Attempt> {
//!         self.attempts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
//!         self.inner.acquire(request).await
//!     }
//!     async fn release(&self, kind: Kind, name: &Name, token: &str) -> Result<bool> {
//!         self.inner.release(kind, name, token).await
//!     }
//!     async fn extend(&self, kind: Kind, name: &Name, token: &str, lease: Duration) -> Result<bool> {
//!         self.inner.extend(kind, name, token, lease).await
//!     }
//!     async fn force_release(&self, kind: Kind, name: &Name) -> Result<bool> {
//!         self.inner.force_release(kind, name).await
//!     }
//!     async fn inspect(&self, kind: Kind, name: &Name) -> Result<Option<LockState>> {
//!         self.inner.inspect(kind, name).await
//!     }
//!     fn waiter(&self, kind: Kind, name: &Name, token: &str) -> Self::Waiter {
//!         self.inner.waiter(kind, name, token)
//!     }
//! }
//! ```

pub use super::interface::{
    AcquireRequest, Attempt, FAIR_SLOT, HANDOFF_CLAIM, Handoff, Kind, LockBackend, LockState,
    RELEASE_REMEMBERED, ReleaseWaiter,
};
