#![doc = include_str!("../README.md")]
//!
//! # What is here
//!
//! Everything an axum application needs, from this one crate:
//!
//! * the primitives and backends of lock-core: [`backend`], [`lock`],
//!   [`rate`], [`counter`], [`Error`];
//! * the tower layers of lock-tower, as axum's: [`RateLimitLayer`],
//!   [`LockLayer`], [`ConcurrencyLimitLayer`] read what axum knows of a
//!   request (the client's address, the matched route and its path
//!   parameters) through [`AxumInfo`], so that they need no other layer;
//!   and the key extractors in [`key`];
//! * extractors for handlers that want the primitive themselves:
//!   [`Locked`] holds a per-route lock for the handler's lifetime,
//!   [`RateLimited`] refuses over-limit requests with the layer's 429,
//!   [`RateDecision`] hands the decision to the handler. They read their
//!   configuration from the router state through axum's
//!   [`FromRef`](https://docs.rs/axum/0.8/axum/extract/trait.FromRef.html):
//!   a [`RouteLock`] for [`Locked`], a [`RouteRateLimit`] for the other
//!   two; a marker type tells several configurations of one router apart.
//!
//! Rejections answer with the same statuses and headers as the layers.
//!
//! The examples on the re-exported items are written with this crate's
//! paths (`lock_axum::rate::Quota`), but for those of the locks and the
//! backends, written for lock-core: what they call `lock_core::lock::Lock`
//! is `lock_axum::lock::Lock` here, every other path the same way.
//!
//! # Serve with connect info
//!
//! [`key::PeerIp`] (and [`key::ClientIp`]) read the client's address from
//! axum's `ConnectInfo`, and [`key::PathParam`] and [`key::MatchedRoute`]
//! the route axum matched ([`AxumInfo`] says how). The address is only
//! there when the app is served with
//! `into_make_service_with_connect_info::<SocketAddr>()`; the route only
//! inside routing (`Router::layer`, `Router::route_layer`, a method's
//! `.layer(..)`). Without them such a key finds nothing: the layers answer
//! 500 with the fix in the body, and log the fix once at `warn`. The
//! layers of lock-tower itself (`lock_tower::LockLayer`) read no
//! framework's records: in an axum app, use these.
//!
//! # Several configurations per router
//!
//! ```
//! use std::time::Duration;
//! use axum::Router;
//! use axum::extract::FromRef;
//! use axum::routing::post;
//! use lock_axum::backend::MemoryBackend;
//! use lock_axum::key::{HeaderKey, PathParam};
//! use lock_axum::{LockLayer, Locked, RouteLock};
//!
//! struct Orders; // markers: never built
//! struct Users;
//!
//! #[derive(Clone)]
//! struct AppState {
//!     orders: RouteLock<Orders>,
//!     users: RouteLock<Users>,
//! }
//! impl FromRef<AppState> for RouteLock<Orders> {
//!     fn from_ref(state: &AppState) -> Self { state.orders.clone() }
//! }
//! impl FromRef<AppState> for RouteLock<Users> {
//!     fn from_ref(state: &AppState) -> Self { state.users.clone() }
//! }
//!
//! async fn pay(order: Locked<Orders>, user: Locked<Users>) -> String {
//!     format!("paid (fencing token {:?})", order.fencing_token())
//! }
//!
//! let backend = MemoryBackend::new();
//! let user = axum::http::HeaderName::from_static("x-user-id");
//! let state = AppState {
//!     orders: RouteLock::new(LockLayer::new(backend.clone(), PathParam::new("id")).scope("order"))
//!         .marked(),
//!     users: RouteLock::new(LockLayer::new(backend, HeaderKey::new(user)).scope("user")).marked(),
//! };
//! let app: Router = Router::new()
//!     .route("/orders/{id}/pay", post(pay))
//!     .with_state(state);
//! ```

mod extract;
mod request_info;

pub use lock_core::{BackendError, Error, Result, backend, counter, lock, name, rate};
pub use lock_tower::{
    BREAKER_OPEN, DEFAULT_DECISION_TIMEOUT, DEFAULT_LOCK_TIMEOUT, DEFAULT_LOCK_WAIT, HeldLock,
    Metrics, MissingKey, OnBackendFailure, key,
};

pub use self::extract::{Locked, RateDecision, RateLimited, Rejection};
pub use self::request_info::AxumInfo;
pub use lock_tower::adapter::{HandlerLock, RouteLock, RouteRateLimit};

/// lock-tower's [`LockLayer`](lock_tower::LockLayer), reading what axum
/// knows of each request ([`AxumInfo`]): a [`PathParam`](key::PathParam)
/// or [`PeerIp`](key::PeerIp) key needs no other layer. Its docs and
/// methods are [`LockLayerWith`](lock_tower::lock::LockLayerWith)'s.
pub type LockLayer<B, K> = lock_tower::lock::LockLayerWith<B, K, AxumInfo>;

/// lock-tower's [`ConcurrencyLimitLayer`](lock_tower::ConcurrencyLimitLayer),
/// reading what axum knows of each request ([`AxumInfo`]), as
/// [`LockLayer`] does.
pub type ConcurrencyLimitLayer<B, K> = lock_tower::lock::ConcurrencyLimitLayerWith<B, K, AxumInfo>;

/// lock-tower's [`RateLimitLayer`](lock_tower::RateLimitLayer), reading
/// what axum knows of each request ([`AxumInfo`]): a
/// [`PeerIp`](key::PeerIp) key reads axum's `ConnectInfo` itself.
pub type RateLimitLayer<B, K> = lock_tower::rate_limit::RateLimitLayerWith<B, K, AxumInfo>;

/// The names most applications use, in one `use lock_axum::prelude::*`.
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
        ConcurrencyLimitLayer, LockLayer, Locked, MissingKey, OnBackendFailure, RateDecision,
        RateLimitLayer, RateLimited, RouteLock, RouteRateLimit,
    };
}
