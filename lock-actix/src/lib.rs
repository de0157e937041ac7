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
//! * middleware in actix-web's own shape (a
//!   [`Transform`](https://docs.rs/actix-web/4/actix_web/dev/trait.Transform.html),
//!   a [`Service`](https://docs.rs/actix-web/4/actix_web/dev/trait.Service.html),
//!   a boxed future), made from
//!   those layers: [`RateLimitMiddleware`] and [`LockMiddleware`] (which
//!   can hold its lock until the body has been sent);
//! * extractors
//!   ([`FromRequest`](https://docs.rs/actix-web/4/actix_web/trait.FromRequest.html)): [`Locked`]
//!   holds a per-route lock for the handler's lifetime, [`RateLimited`]
//!   refuses over-limit requests with the layer's 429, [`RateDecision`]
//!   hands the decision to the handler. They read their configuration from
//!   app data ([`RouteLock`], [`RouteRateLimit`]); a marker type tells
//!   several configurations apart.
//!
//! Statuses, headers, key extractors and failure policies match the
//! tower/axum side. Refusals are [`Rejection`]s, which implement
//! [`ResponseError`](https://docs.rs/actix-web/4/actix_web/trait.ResponseError.html).
//! Locks are released on the
//! actix worker's own runtime when their guard drops. actix-web serves a
//! request whose client went away to its end (it does not drop the
//! handler), so its lock is held until its handler is done.
//!
//! Path parameters ([`key::PathParam`]) are known in extractors and in
//! middleware on a resource or scope (`web::resource(..).wrap`), not in
//! `App::wrap` middleware, which runs before routing: there it answers 500
//! with the fix in the body, and logs the fix once at `warn`. Each value
//! is percent-decoded as actix-web's `web::Path` decodes it; one that is
//! empty or not UTF-8 is refused with 400, never keyed by a lossy copy.
//! [`key::MatchedRoute`] works in both places.
//!
//! The examples on the re-exported items are written with lock-axum's
//! paths (`lock_axum::rate::Quota`), but for those of the locks and the
//! backends, written for lock-core (`lock_core::lock::Lock`): this crate
//! has every one of them at the same path, `lock_actix::rate::Quota`,
//! `lock_actix::lock::Lock`.

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
pub use lock_tower::adapter::{HandlerLock, RouteLock, RouteRateLimit};

/// The names most applications use, in one `use lock_actix::prelude::*`.
pub mod prelude {
    pub use crate::backend::{AnyBackend, MemoryBackend};
    #[cfg(feature = "redis")]
    pub use crate::backend::{ClusterBackend, RedisBackend, SentinelBackend};
    pub use crate::counter::{Purchase, Stock};
    pub use crate::key::{
        ClientIp, GlobalKey, HeaderKey, MatchedRoute, PathKey, PathParam, PeerIp,
    };
    pub use crate::lock::{Lock, LockOptions, Semaphore};
    pub use crate::rate::{Algorithm, Policy, Quota, RateLimiter};
    pub use crate::{
        ConcurrencyLimitLayer, LockLayer, LockMiddleware, Locked, MissingKey, OnBackendFailure,
        RateDecision, RateLimitLayer, RateLimitMiddleware, RateLimited, RouteLock, RouteRateLimit,
    };
}
