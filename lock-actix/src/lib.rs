//! actix-web integration of the redis-lock primitives.
//!
//! * Middleware in actix-web's own shape (a [`Transform`](actix_web::dev::Transform) builder, a
//!   [`Service`](actix_web::dev::Service), a boxed future): [`RateLimit`] and [`KeyLock`], configured
//!   with the very same lock-tower layers, so statuses, headers, key
//!   extractors and failure policies match the tower/axum side.
//! * Extractors ([`FromRequest`](actix_web::FromRequest)): [`Locked`] holds a per-route lock for the
//!   handler's lifetime; [`RateDecision`] hands the rate-limit decision to the
//!   handler. They find their configuration in app data ([`RouteLock`],
//!   [`RouteRateLimit`]).
//! * Refusals are [`Rejection`]s, which implement [`ResponseError`](actix_web::ResponseError).
//!
//! Locks are released on the actix worker's own runtime when the guard drops,
//! also when a client disconnects and actix drops the handler.
//!
//! ```no_run
//! use std::num::NonZeroU32;
//! use actix_web::{App, HttpServer, web};
//! use lock_actix::{KeyLock, Locked, RateLimit, RouteLock};
//! use lock_core::backend::MemoryBackend;
//! use lock_core::rate::{Algorithm, Policy, Quota, RateLimiter};
//! use lock_tower::key::{PathKey, PeerIp};
//! use lock_tower::{LockLayer, RateLimitLayer};
//!
//! async fn pay(_lock: Locked) -> &'static str {
//!     "paid"
//! }
//!
//! # async fn run() -> std::io::Result<()> {
//! let backend = MemoryBackend::new();
//! let policy = Policy::new(Algorithm::Gcra)
//!     .quota(Quota::per_second(NonZeroU32::new(10).unwrap()));
//! let limiter = RateLimiter::new(backend.clone(), "api", policy).unwrap();
//! let limit = RateLimit::new(RateLimitLayer::new(limiter, PeerIp::new()));
//! let route_lock = RouteLock::new(LockLayer::new(backend, PathKey));
//! HttpServer::new(move || {
//!     App::new()
//!         .wrap(limit.clone())
//!         .app_data(route_lock.clone())
//!         .route("/orders/{id}/pay", web::post().to(pay))
//! })
//! .bind(("127.0.0.1", 8080))?
//! .run()
//! .await
//! # }
//! ```

mod convert;
mod extract;
mod key_lock;
mod rate_limit;
mod rejection;

pub use self::extract::{Locked, RateDecision, RouteLock, RouteRateLimit};
pub use self::key_lock::{KeyLock, KeyLockMiddleware};
pub use self::rate_limit::{RateLimit, RateLimitMiddleware};
pub use self::rejection::Rejection;
