//! axum integration of the redis-lock primitives.
//!
//! * Layers: [`RateLimitLayer`], [`LockLayer`] and [`ConcurrencyLimitLayer`]
//!   (re-exported from lock-tower) go straight into `Router::layer` or
//!   `Router::route_layer`; refusals are responses, so no `HandleErrorLayer`.
//! * Extractors, for handlers that want the primitive themselves:
//!   [`Locked`] takes a per-route lock (key from the path, the matched route,
//!   or any [`KeyExtractor`]) and holds it for the handler's lifetime;
//!   [`RateLimited`] refuses over-limit requests with the same 429 as the
//!   layer; [`RateDecision`] hands the decision to the handler instead.
//! * Rejections answer with the same statuses and headers as the layers
//!   (423/409, 503 + `Retry-After`, 429 + `RateLimit*`).
//!
//! The extractors find their configuration in the router state through
//! [`FromRef`]: a [`RouteLock`] for [`Locked`], a
//! [`RouteRateLimit`] for [`RateLimited`] and [`RateDecision`].
//!
//! ```
//! use std::num::NonZeroU32;
//! use std::time::Duration;
//!
//! use axum::Router;
//! use axum::extract::FromRef;
//! use axum::routing::post;
//! use lock_axum::{Locked, RateDecision, RouteLock, RouteRateLimit};
//! use lock_axum::key::{HeaderKey, PathKey};
//! use lock_axum::{LockLayer, RateLimitLayer};
//! use lock_core::backend::MemoryBackend;
//! use lock_core::rate::{Algorithm, Policy, Quota, RateLimiter};
//!
//! #[derive(Clone)]
//! struct AppState {
//!     lock: RouteLock,
//!     limit: RouteRateLimit,
//! }
//!
//! impl FromRef<AppState> for RouteLock {
//!     fn from_ref(state: &AppState) -> Self {
//!         state.lock.clone()
//!     }
//! }
//!
//! impl FromRef<AppState> for RouteRateLimit {
//!     fn from_ref(state: &AppState) -> Self {
//!         state.limit.clone()
//!     }
//! }
//!
//! async fn pay(_lock: Locked, decision: RateDecision) -> String {
//!     match decision.decision() {
//!         Some(d) => format!("paid; {} payments left this minute", d.remaining),
//!         None => "paid".to_owned(),
//!     }
//! }
//!
//! let backend = MemoryBackend::new();
//! let policy = Policy::new(Algorithm::FixedWindow)
//!     .quota(Quota::per_minute(NonZeroU32::new(5).unwrap()));
//! let limiter = RateLimiter::new(backend.clone(), "pay", policy).unwrap();
//! let state = AppState {
//!     lock: RouteLock::new(LockLayer::new(backend, PathKey).wait(Duration::from_secs(1))),
//!     limit: RouteRateLimit::new(RateLimitLayer::new(
//!         limiter,
//!         HeaderKey::new(http::HeaderName::from_static("x-user-id")),
//!     )),
//! };
//! let app: Router = Router::new()
//!     .route("/orders/{id}/pay", post(pay))
//!     .with_state(state);
//! ```

use axum::extract::{FromRef, FromRequestParts};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::StatusCode;
use http::request::Parts;
use lock_core::lock::LockBackend;
use lock_core::rate::RateBackend;
use lock_tower::key::{KeyExtractor, RequestParts};
use lock_tower::{HandlerDecision, HeldLock, LockVerdict, SharedLock, SharedRateLimit};

pub use lock_tower::{
    ConcurrencyLimitLayer, LockLayer, Metrics, MissingKey, OnBackendFailure, RateLimitLayer, key,
};

fn parts_view(parts: &Parts) -> RequestParts<'_> {
    RequestParts::from_parts(parts)
}

/// Router state for [`Locked`]: which lock a request takes, and how (wait,
/// statuses, failure policy), as configured on a [`LockLayer`].
#[derive(Clone, Debug)]
pub struct RouteLock(SharedLock);

impl RouteLock {
    /// Locks as `layer` would.
    pub fn new<B: LockBackend, K: KeyExtractor>(layer: LockLayer<B, K>) -> Self {
        RouteLock(SharedLock::new(layer))
    }

    /// Takes permits as `layer` would (at most N handlers per key).
    pub fn concurrency<B: LockBackend, K: KeyExtractor>(
        layer: ConcurrencyLimitLayer<B, K>,
    ) -> Self {
        RouteLock(SharedLock::concurrency(layer))
    }
}

/// A rejection: the response the layers would have answered with.
#[derive(Debug)]
pub struct Rejection(http::Response<Bytes>);

impl Rejection {
    /// The status (423/409/503/500, or 429 for a rate limit).
    pub fn status(&self) -> StatusCode {
        self.0.status()
    }
}

impl IntoResponse for Rejection {
    fn into_response(self) -> Response {
        self.0.map(axum::body::Body::from)
    }
}

/// Holds the lock of this request's key for the handler's lifetime. Dropping
/// it (the handler returns, or the client goes away) releases the lock in the
/// background; a handler that wants the key free before its response leaves
/// calls [`HeldLock::release`] at its end.
#[derive(Debug)]
pub struct Locked(pub Option<HeldLock>);

impl<S> FromRequestParts<S> for Locked
where
    S: Send + Sync,
    RouteLock: FromRef<S>,
{
    type Rejection = Rejection;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let locker = RouteLock::from_ref(state);
        match locker.0.acquire(parts_view(parts)).await {
            LockVerdict::Proceed(held) => Ok(Locked(held)),
            LockVerdict::Respond(response) => Err(Rejection(response)),
            _ => Err(Rejection(lock_unavailable())),
        }
    }
}

fn lock_unavailable() -> http::Response<Bytes> {
    let mut response = http::Response::new(Bytes::from_static(b"Service Unavailable\n"));
    *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    response
}

/// Router state for [`RateLimited`] and [`RateDecision`]: a rate limit
/// configured as a [`RateLimitLayer`].
#[derive(Clone, Debug)]
pub struct RouteRateLimit(SharedRateLimit);

impl RouteRateLimit {
    /// Decides as `layer` would.
    pub fn new<B: RateBackend, K: KeyExtractor>(layer: RateLimitLayer<B, K>) -> Self {
        RouteRateLimit(SharedRateLimit::new(layer))
    }
}

/// The rate-limit decision, handed to the handler whatever it is: the handler
/// decides what to do with a refused request. (Backend failures and missing
/// keys are still answered per the layer's policies.) Dereferences to
/// [`HandlerDecision`] for `decision()` and `allowed()`.
#[derive(Clone, Debug)]
pub struct RateDecision(HandlerDecision);

impl std::ops::Deref for RateDecision {
    type Target = HandlerDecision;
    fn deref(&self) -> &HandlerDecision {
        &self.0
    }
}

impl RateDecision {
    /// Adds the `RateLimit*` (and, when refused, `Retry-After`) fields to a
    /// response of the handler's.
    pub fn with_headers(&self, response: impl IntoResponse) -> Response {
        let mut response = response.into_response();
        self.0.apply_headers(response.headers_mut());
        response
    }
}

async fn decide(
    parts: &Parts,
    limit: RouteRateLimit,
    refuse_limited: bool,
) -> Result<HandlerDecision, Rejection> {
    limit
        .0
        .decide_for_handler(RequestParts::from_parts(parts), refuse_limited)
        .await
        .map_err(Rejection)
}

impl<S> FromRequestParts<S> for RateDecision
where
    S: Send + Sync,
    RouteRateLimit: FromRef<S>,
{
    type Rejection = Rejection;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        decide(parts, RouteRateLimit::from_ref(state), false)
            .await
            .map(RateDecision)
    }
}

/// Lets the request through only if the rate limit allows it; refuses it
/// with the layer's 429 (and headers) otherwise.
#[derive(Debug, Clone)]
pub struct RateLimited(pub RateDecision);

impl<S> FromRequestParts<S> for RateLimited
where
    S: Send + Sync,
    RouteRateLimit: FromRef<S>,
{
    type Rejection = Rejection;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        decide(parts, RouteRateLimit::from_ref(state), true)
            .await
            .map(|d| RateLimited(RateDecision(d)))
    }
}
