//! tower layers over [`lock_core`]: distributed rate limits, per-key locks and
//! per-key concurrency limits for any tower/HTTP stack (axum, tonic, hyper).
//!
//! * [`RateLimitLayer`]: one decision per request; 429 with `RateLimit`,
//!   `RateLimit-Policy` and `Retry-After` when refused.
//! * [`LockLayer`]: serializes requests that share a key across instances.
//! * [`ConcurrencyLimitLayer`]: at most N requests in flight per key.
//! * [`key`]: which key a request has (peer IP, client IP behind trusted
//!   proxies, a header, the path, a constant, a closure).
//!
//! The layers are generic over the lock-core backend traits, so they run on
//! Redis (shared by every instance) and in memory alike. Refusals are
//! responses, not errors, and a backend failure is handled by the
//! [`OnBackendFailure`] policy within a decision timeout.
//!
//! The layers compose with tower-http layers, and with axum's
//! `Router::layer` (every route) and `Router::route_layer` (matched routes
//! only, so unmatched paths still answer 404):
//!
//! ```
//! use std::num::NonZeroU32;
//! use std::time::Duration;
//!
//! use axum::Router;
//! use axum::routing::{get, post};
//! use http::HeaderValue;
//! use http::header::SERVER;
//! use lock_core::backend::MemoryBackend;
//! use lock_core::rate::{Algorithm, Policy, Quota, RateLimiter};
//! use lock_tower::key::{PathKey, PeerIp};
//! use lock_tower::{LockLayer, RateLimitLayer};
//! use tower::ServiceBuilder;
//! use tower_http::set_header::SetResponseHeaderLayer;
//!
//! let backend = MemoryBackend::new(); // or a RedisBackend shared by every instance
//! let policy = Policy::new(Algorithm::Gcra)
//!     .quota(Quota::per_second(NonZeroU32::new(20).unwrap()));
//! let limiter = RateLimiter::new(backend.clone(), "api", policy).unwrap();
//!
//! let app: Router = Router::new()
//!     .route("/orders/{id}/pay", post(|| async { "paid" }))
//!     // One payment at a time per order, across instances, on this route only.
//!     .route_layer(LockLayer::new(backend, PathKey).wait(Duration::from_secs(2)))
//!     .route("/health", get(|| async { "ok" }))
//!     .layer(
//!         ServiceBuilder::new()
//!             .layer(SetResponseHeaderLayer::overriding(SERVER, HeaderValue::from_static("shop")))
//!             .layer(RateLimitLayer::new(limiter, PeerIp::new())),
//!     );
//! ```

pub mod adapter;
pub mod body;
mod failure;
pub mod headers;
pub mod key;
pub mod lock;
mod metrics;
pub mod rate_limit;
mod response;

pub use failure::{BREAKER_OPEN, MissingKey, OnBackendFailure};
pub use lock::{
    ConcurrencyLimitLayer, DEFAULT_LOCK_TIMEOUT, DEFAULT_LOCK_WAIT, HeldLock, LockLayer,
    LockRefusal,
};
pub use metrics::Metrics;
pub use rate_limit::{DEFAULT_DECISION_TIMEOUT, RateLimitLayer};
