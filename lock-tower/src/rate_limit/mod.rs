//! Distributed rate limiting as a tower layer.
//!
//! [`RateLimitLayer`] extracts a key from each request, asks a
//! [`RateLimiter`](lock_core::rate::RateLimiter) for one decision (one round
//! trip on Redis), and either calls the inner service or answers 429 itself:
//! a refusal is a response, not a service error, so the layer drops into
//! `axum::Router::layer` without a `HandleErrorLayer`. Every response carries
//! `RateLimit` and `RateLimit-Policy`; a 429 also `Retry-After`.
//! [`headers_on_success(false)`](RateLimitLayer::headers_on_success) keeps
//! the fields to refusals.
//!
//! ```
//! use std::num::NonZeroU32;
//! use lock_core::backend::MemoryBackend;
//! use lock_core::rate::{Algorithm, Policy, Quota, RateLimiter};
//! use lock_tower::key::PeerIp;
//! use lock_tower::{OnBackendFailure, RateLimitLayer};
//!
//! let policy = Policy::new(Algorithm::Gcra)
//!     .quota(Quota::per_second(NonZeroU32::new(10).unwrap()));
//! let limiter = RateLimiter::new(MemoryBackend::new(), "api", policy).unwrap();
//! let layer = RateLimitLayer::new(limiter, PeerIp::new())
//!     .on_backend_failure(OnBackendFailure::Fallback)
//!     .legacy_headers(true);
//! // axum::Router::new().route(...).layer(layer)
//! # let _ = layer;
//! ```

mod decide;
mod future;
mod layer;
mod service;

use bytes::Bytes;
use http::Response;
use lock_core::rate::Decision;

pub(crate) use self::decide::ErasedDecision;
pub use self::future::ResponseFuture;
pub use self::layer::{DEFAULT_DECISION_TIMEOUT, RateLimitLayer};
pub use self::service::RateLimit;

/// What a [`RateLimitLayer`] decided for one request.
#[derive(Debug)]
#[non_exhaustive]
pub enum RateVerdict {
    /// Go ahead; the decision (for headers) unless the backend failed open or
    /// the request had no key and passes through.
    Allow(Option<Decision>),
    /// Refused by the limit: the decision, and the 429 to answer with.
    Limited {
        /// The decision.
        decision: Decision,
        /// The refusal, with `RateLimit*` and `Retry-After` fields.
        response: Response<Bytes>,
    },
    /// No decision could be made (backend failed closed, no key, bad
    /// configuration): answer with this.
    Respond(Response<Bytes>),
}
