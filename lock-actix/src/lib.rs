#![doc = include_str!("../README.md")]
//!
//! # What is here
//!
//! Everything an actix-web application needs, from this one crate:
//!
//! * the primitives and backends of lock-core: [`backend`], [`lock`],
//!   [`rate`], [`counter`], [`Error`];
//! * the layers of lock-tower, which configure everything:
//!   [`RateLimitLayer`], [`LockLayer`], [`ConcurrencyLimitLayer`], and
//!   the key extractors in [`key`];
//! * middleware in actix-web's own shape (a [`Transform`](actix_web::dev::Transform),
//!   a [`Service`](actix_web::dev::Service), a boxed future), made from
//!   those layers: [`RateLimitMiddleware`] and [`LockMiddleware`] (which
//!   can hold its lock until the body has been sent);
//! * extractors ([`FromRequest`](actix_web::FromRequest)): [`Locked`]
//!   holds a per-route lock for the handler's lifetime, [`RateLimited`]
//!   refuses over-limit requests with the layer's 429, [`RateDecision`]
//!   hands the decision to the handler. They read their configuration from
//!   app data ([`RouteLock`], [`RouteRateLimit`]); a marker type tells
//!   several configurations apart.
//!
//! Statuses, headers, key extractors and failure policies match the
//! tower/axum side. Refusals are [`Rejection`]s, which implement
//! [`ResponseError`](actix_web::ResponseError). Locks are released on the
//! actix worker's own runtime when their guard drops, also when a client
//! disconnects and actix drops the handler.
//!
//! Keys from the matched route ([`key::PathParam`],
//! [`key::MatchedRoute`]) are known in extractors and in middleware on a
//! resource or scope (`web::resource(..).wrap`), not in `App::wrap`
//! middleware, which runs before routing (it answers 500 and logs the fix
//! once).

mod body;
mod convert;
mod extract;
mod lock_middleware;
mod rate_limit;
mod rejection;

pub use lock_core::{BackendError, Error, Result, backend, counter, lock, name, rate};
pub use lock_tower::{
    BREAKER_OPEN, ConcurrencyLimitLayer, DEFAULT_DECISION_TIMEOUT, DEFAULT_LOCK_TIMEOUT,
    DEFAULT_LOCK_WAIT, HeldLock, LockLayer, Metrics, MissingKey, OnBackendFailure, RateLimitLayer,
    key,
};

pub use self::body::HeldBody;
pub use self::extract::{Locked, RateDecision, RateLimited};
pub use self::lock_middleware::{LockMiddleware, LockService};
pub use self::rate_limit::{RateLimitMiddleware, RateLimitService};
pub use self::rejection::Rejection;
pub use lock_tower::adapter::{RouteLock, RouteRateLimit};

/// The names most applications use, in one `use lock_actix::prelude::*`.
pub mod prelude {
    pub use crate::backend::{AnyBackend, MemoryBackend};
    #[cfg(feature = "redis")]
    pub use crate::backend::{ClusterBackend, RedisBackend, SentinelBackend};
    pub use crate::counter::{Purchase, Stock};
    pub use crate::key::{ClientIp, GlobalKey, HeaderKey, MatchedRoute, PathParam, PeerIp};
    pub use crate::lock::{Lock, LockOptions, Semaphore};
    pub use crate::rate::{Algorithm, Policy, Quota, RateLimiter};
    pub use crate::{
        ConcurrencyLimitLayer, LockLayer, LockMiddleware, Locked, OnBackendFailure, RateDecision,
        RateLimitLayer, RateLimitMiddleware, RateLimited, RouteLock, RouteRateLimit,
    };
}
