//! For framework adapters (lock-axum, lock-actix, yours): what an adapter
//! records for the key extractors, type-erased handles on configured
//! layers, and what the extractors hand to handlers. Applications use the
//! layers and the adapters' extractors instead.
//!
//! The seam runs one way: lock-tower knows no framework, and an adapter
//! knows lock-tower. An adapter
//!
//! 1. hands the key extractors what its framework knows, before a layer
//!    or an extractor asks for a key: it records it in the request's
//!    extensions, in neutral types (below), or has the layers read its
//!    framework's own records through a [`RequestInfo`], exporting
//!    lock-tower's layers with it (`LockLayerWith<B, K, ItsInfo>`);
//! 2. builds its extractors on [`RouteLock`] and [`RouteRateLimit`]:
//!    [`SharedLock::acquire_for_handler`] hands a [`HandlerLock`] (what a
//!    `Locked` extractor holds) or the response to answer with, and
//!    [`SharedRateLimit::decide_for_handler`] a [`HandlerDecision`]; the
//!    framework's extractor type wraps them and adds its glue;
//! 3. marks a response it answers for a lock layer with
//!    [`Refusal`](crate::Refusal), as the layers do.
//!
//! # What an adapter records
//!
//! The key extractors read these extensions (and the layer's
//! [`RequestInfo`]), never a framework's own records by name, whose types
//! (or whose very existence) are each framework's business:
//!
//! | what | extension | lock-axum records it from | lock-actix records it from |
//! | --- | --- | --- | --- |
//! | the TCP peer's address | [`SocketAddr`](std::net::SocketAddr) | `ConnectInfo<SocketAddr>` | `HttpRequest::peer_addr` |
//! | the matched route and its parameters | [`RouteParams`] | `MatchedPath` and `RawPathParams` | `match_pattern` and `match_info` |
//!
//! lock-actix records them in its middleware and extractors. lock-axum
//! has its layers read axum's records through its `AxumInfo` (the peer in
//! place, the route recorded as a `RouteParams` once per request, for keys
//! that read it), so that axum apps add no layer, and its extractors
//! record them. A service with no framework (hyper, tonic) inserts them
//! itself, the peer's `SocketAddr` at least (see the crate's example).

use std::marker::PhantomData;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use http::{HeaderMap, HeaderName, HeaderValue};
use lock_core::lock::LockBackend;
use lock_core::rate::{Decision, RateBackend};

mod handler;

pub use self::handler::{HandlerDecision, HandlerLock};
use crate::key::{HeadersRead, KeyExtractor, RequestParts};
pub use crate::lock::LockVerdict;
use crate::lock::{ConcurrencyLimitLayerWith, HeldLock, LockLayerWith};
use crate::rate_limit::ErasedDecision;
use crate::rate_limit::RateLimitLayerWith;
pub use crate::rate_limit::RateVerdict;
pub use crate::request::{Neutral, RequestInfo, RouteParams};
#[cfg(doc)]
use crate::{ConcurrencyLimitLayer, LockLayer, RateLimitLayer};

trait DecideRate: Send + Sync {
    fn decide<'a>(&'a self, parts: RequestParts<'a>) -> ErasedDecision<'a>;
    fn for_each_field(&self, decision: &Decision, f: &mut dyn FnMut(&HeaderName, HeaderValue));
    fn headers_read(&self) -> HeadersRead<'_>;
}

impl<B: RateBackend, K: KeyExtractor, R: RequestInfo> DecideRate for RateLimitLayerWith<B, K, R> {
    fn decide<'a>(&'a self, parts: RequestParts<'a>) -> ErasedDecision<'a> {
        self.decide_erased(parts)
    }

    fn for_each_field(&self, decision: &Decision, f: &mut dyn FnMut(&HeaderName, HeaderValue)) {
        RateLimitLayerWith::for_each_field(self, decision, f);
    }

    fn headers_read(&self) -> HeadersRead<'_> {
        RateLimitLayerWith::headers_read(self)
    }
}

/// A [`RateLimitLayer`] of any backend and key extractor, cheap to clone.
#[derive(Clone)]
pub struct SharedRateLimit(Arc<dyn DecideRate>);

impl SharedRateLimit {
    /// Decides as `layer` would.
    pub fn new<B: RateBackend, K: KeyExtractor, R: RequestInfo>(
        layer: RateLimitLayerWith<B, K, R>,
    ) -> Self {
        SharedRateLimit(Arc::new(layer))
    }

    /// See [`RateLimitLayer::decide`]. A verdict reached at once (the
    /// in-memory backend) is ready without a boxed future.
    pub fn decide<'a>(
        &'a self,
        parts: RequestParts<'a>,
    ) -> impl Future<Output = RateVerdict> + Send + 'a {
        self.0.decide(parts)
    }

    /// See [`RateLimitLayer::apply_headers`].
    pub fn apply_headers(&self, headers: &mut HeaderMap, decision: &Decision) {
        self.for_each_field(decision, |name, value| {
            headers.insert(name.clone(), value);
        });
    }

    /// See [`RateLimitLayer::for_each_field`].
    pub fn for_each_field(&self, decision: &Decision, mut f: impl FnMut(&HeaderName, HeaderValue)) {
        self.0.for_each_field(decision, &mut f);
    }

    /// See [`RateLimitLayer::headers_read`].
    pub fn headers_read(&self) -> HeadersRead<'_> {
        self.0.headers_read()
    }
}

impl std::fmt::Debug for SharedRateLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedRateLimit").finish_non_exhaustive()
    }
}

trait AcquireLock: Send + Sync {
    fn acquire<'a>(&'a self, parts: RequestParts<'a>) -> BoxFuture<'a, LockVerdict>;
    fn cancels_on_lease_loss(&self) -> bool;
    fn holds_until_body_sent(&self) -> bool;
    fn headers_read(&self) -> HeadersRead<'_>;
    fn release_timeout(&self) -> std::time::Duration;
}

impl<B: LockBackend, K: KeyExtractor, R: RequestInfo> AcquireLock for LockLayerWith<B, K, R> {
    fn acquire<'a>(&'a self, parts: RequestParts<'a>) -> BoxFuture<'a, LockVerdict> {
        Box::pin(LockLayerWith::acquire(self, parts))
    }

    fn cancels_on_lease_loss(&self) -> bool {
        LockLayerWith::cancels_on_lease_loss(self)
    }

    fn holds_until_body_sent(&self) -> bool {
        LockLayerWith::holds_until_body_sent(self)
    }

    fn headers_read(&self) -> HeadersRead<'_> {
        LockLayerWith::headers_read(self)
    }

    fn release_timeout(&self) -> std::time::Duration {
        LockLayerWith::release_timeout(self)
    }
}

/// A [`LockLayer`] or [`ConcurrencyLimitLayer`] of any backend and key
/// extractor, cheap to clone.
#[derive(Clone)]
pub struct SharedLock(Arc<dyn AcquireLock>);

impl SharedLock {
    /// Locks as `layer` would.
    pub fn new<B: LockBackend, K: KeyExtractor, R: RequestInfo>(
        layer: LockLayerWith<B, K, R>,
    ) -> Self {
        SharedLock(Arc::new(layer))
    }

    /// Takes permits as `layer` would.
    pub fn concurrency<B: LockBackend, K: KeyExtractor, R: RequestInfo>(
        layer: ConcurrencyLimitLayerWith<B, K, R>,
    ) -> Self {
        SharedLock(Arc::new(layer.into_lock()))
    }

    /// See [`LockLayer::acquire`].
    pub fn acquire<'a>(&'a self, parts: RequestParts<'a>) -> BoxFuture<'a, LockVerdict> {
        self.0.acquire(parts)
    }

    /// See [`LockLayer::cancels_on_lease_loss`].
    pub fn cancels_on_lease_loss(&self) -> bool {
        self.0.cancels_on_lease_loss()
    }

    /// See [`LockLayer::hold_until_body_sent`].
    pub fn holds_until_body_sent(&self) -> bool {
        self.0.holds_until_body_sent()
    }

    /// See [`LockLayer::headers_read`].
    pub fn headers_read(&self) -> HeadersRead<'_> {
        self.0.headers_read()
    }

    /// Releases `held` as the layer's services do before a response goes
    /// out: in the foreground, so that the client's next request finds the
    /// key free, and for at most the layer's decision timeout (the lease
    /// covers a release that does not finish).
    pub async fn release(&self, held: HeldLock) {
        let _ = tokio::time::timeout(self.0.release_timeout(), held.release()).await;
    }
}

impl std::fmt::Debug for SharedLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedLock").finish_non_exhaustive()
    }
}

/// The configuration of the adapters' `Locked` extractors (router state in
/// axum, app data in actix-web): which lock a request takes, and how (wait,
/// statuses, failure policy), as configured on a [`LockLayer`] or a
/// [`ConcurrencyLimitLayer`].
///
/// `M` tells several configurations of one app apart: a
/// `RouteLock<Payments>` (made with [`marked`](Self::marked)) serves
/// `Locked<Payments>`, a `RouteLock` (`M = ()`) serves `Locked`. Any
/// `'static` type will do as `M`; it is never built.
pub struct RouteLock<M = ()>(SharedLock, PhantomData<fn() -> M>);

impl<M> Clone for RouteLock<M> {
    fn clone(&self) -> Self {
        RouteLock(self.0.clone(), PhantomData)
    }
}

impl<M> std::fmt::Debug for RouteLock<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("RouteLock").field(&self.0).finish()
    }
}

impl RouteLock {
    /// Locks as `layer` would.
    pub fn new<B: LockBackend, K: KeyExtractor, R: RequestInfo>(
        layer: LockLayerWith<B, K, R>,
    ) -> Self {
        RouteLock(SharedLock::new(layer), PhantomData)
    }

    /// Takes permits as `layer` would (at most N handlers per key).
    pub fn concurrency<B: LockBackend, K: KeyExtractor, R: RequestInfo>(
        layer: ConcurrencyLimitLayerWith<B, K, R>,
    ) -> Self {
        RouteLock(SharedLock::concurrency(layer), PhantomData)
    }
}

impl<M> RouteLock<M> {
    /// The same configuration, for `Locked<N>`:
    /// `RouteLock::new(layer).marked::<Payments>()`.
    pub fn marked<N>(self) -> RouteLock<N> {
        RouteLock(self.0, PhantomData)
    }

    /// The configured layer, type-erased.
    pub fn lock(&self) -> &SharedLock {
        &self.0
    }
}

/// The configuration of the adapters' `RateLimited` and `RateDecision`
/// extractors (router state in axum, app data in actix-web): a rate limit
/// configured as a [`RateLimitLayer`]. `M` tells several apart, as for
/// [`RouteLock`].
pub struct RouteRateLimit<M = ()>(SharedRateLimit, PhantomData<fn() -> M>);

impl<M> Clone for RouteRateLimit<M> {
    fn clone(&self) -> Self {
        RouteRateLimit(self.0.clone(), PhantomData)
    }
}

impl<M> std::fmt::Debug for RouteRateLimit<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("RouteRateLimit").field(&self.0).finish()
    }
}

impl RouteRateLimit {
    /// Decides as `layer` would.
    pub fn new<B: RateBackend, K: KeyExtractor, R: RequestInfo>(
        layer: RateLimitLayerWith<B, K, R>,
    ) -> Self {
        RouteRateLimit(SharedRateLimit::new(layer), PhantomData)
    }
}

impl<M> RouteRateLimit<M> {
    /// The same configuration, for `RateLimited<N>` and `RateDecision<N>`:
    /// `RouteRateLimit::new(layer).marked::<Search>()`.
    pub fn marked<N>(self) -> RouteRateLimit<N> {
        RouteRateLimit(self.0, PhantomData)
    }

    /// The configured layer, type-erased.
    pub fn limit(&self) -> &SharedRateLimit {
        &self.0
    }
}
