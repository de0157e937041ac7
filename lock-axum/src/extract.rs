//! The extractors and the router state they read.

use std::marker::PhantomData;

use axum::extract::{FromRef, FromRequestParts};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::StatusCode;
use http::request::Parts;
use lock_core::rate::Decision;
use lock_tower::HeldLock;
use lock_tower::adapter::{
    HandlerDecision, HandlerLock, RouteLock, RouteRateLimit, SharedRateLimit,
};
use lock_tower::key::RequestParts;

use crate::request_info::record;

/// A rejection: the response the layers would have answered with.
#[derive(Debug)]
pub struct Rejection(http::Response<Bytes>);

impl Rejection {
    /// The status (400, 423/409, 503, 500, or 429 for a rate limit).
    pub fn status(&self) -> StatusCode {
        self.0.status()
    }
}

impl IntoResponse for Rejection {
    fn into_response(self) -> Response {
        self.0.map(axum::body::Body::from)
    }
}

/// Holds the lock of this request's key (see [`RouteLock`]) for the
/// handler's lifetime; what it holds, a [`HandlerLock`], is shared with
/// lock-actix's, and its methods ([`held`](HandlerLock::held),
/// [`fencing_token`](HandlerLock::fencing_token)) are reached through
/// `Deref`. Dropping it (the handler returns, or the client goes away)
/// releases the lock in the background; a handler that wants the key free
/// before its response leaves calls [`release`](Self::release). It records
/// the route and the client's address for the key itself.
#[derive(Debug)]
pub struct Locked<M = ()> {
    lock: HandlerLock,
    _config: PhantomData<fn() -> M>,
}

impl<M> std::ops::Deref for Locked<M> {
    type Target = HandlerLock;

    fn deref(&self) -> &HandlerLock {
        &self.lock
    }
}

impl<M> Locked<M> {
    /// Releases the lock now (see [`HandlerLock::release`]).
    pub async fn release(self) {
        self.lock.release().await;
    }

    /// The held lock, to keep past the handler (see
    /// [`HandlerLock::into_inner`]).
    pub fn into_inner(self) -> Option<HeldLock> {
        self.lock.into_inner()
    }
}

impl<S, M> FromRequestParts<S> for Locked<M>
where
    S: Send + Sync,
    RouteLock<M>: FromRef<S>,
{
    type Rejection = Rejection;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let locker = RouteLock::<M>::from_ref(state);
        record(parts);
        let lock = locker
            .lock()
            .acquire_for_handler(RequestParts::from_parts(parts));
        Ok(Locked {
            lock: lock.await.map_err(Rejection)?,
            _config: PhantomData,
        })
    }
}

/// The rate-limit decision, handed to the handler whatever it is: the
/// handler decides what to do with a refused request. (Backend failures and
/// missing keys are still answered per the layer's policies.) Like
/// [`Locked`], it records the route and the client's address itself.
#[derive(Clone, Debug)]
pub struct RateDecision<M = ()> {
    decision: HandlerDecision,
    _config: PhantomData<fn() -> M>,
}

impl<M> RateDecision<M> {
    /// The decision; `None` when the backend failed open or the request had
    /// no key and passes through.
    pub fn decision(&self) -> Option<&Decision> {
        self.decision.decision()
    }

    /// Whether the request may go ahead.
    pub fn allowed(&self) -> bool {
        self.decision.allowed()
    }

    /// Adds the `RateLimit*` (and, when refused, `Retry-After`) fields to a
    /// response of the handler's.
    pub fn with_headers(&self, response: impl IntoResponse) -> Response {
        let mut response = response.into_response();
        self.decision.apply_headers(response.headers_mut());
        response
    }
}

async fn decide(
    parts: &mut Parts,
    limit: SharedRateLimit,
    refuse_limited: bool,
) -> Result<HandlerDecision, Rejection> {
    record(parts);
    limit
        .decide_for_handler(RequestParts::from_parts(parts), refuse_limited)
        .await
        .map_err(Rejection)
}

impl<S, M> FromRequestParts<S> for RateDecision<M>
where
    S: Send + Sync,
    RouteRateLimit<M>: FromRef<S>,
{
    type Rejection = Rejection;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let limit = RouteRateLimit::<M>::from_ref(state).limit().clone();
        let decision = decide(parts, limit, false).await?;
        Ok(RateDecision {
            decision,
            _config: PhantomData,
        })
    }
}

/// Lets the request through only if the rate limit allows it; refuses it
/// with the layer's 429 (and headers) otherwise. Holds the decision.
#[derive(Debug, Clone)]
pub struct RateLimited<M = ()>(pub RateDecision<M>);

impl<S, M> FromRequestParts<S> for RateLimited<M>
where
    S: Send + Sync,
    RouteRateLimit<M>: FromRef<S>,
{
    type Rejection = Rejection;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let limit = RouteRateLimit::<M>::from_ref(state).limit().clone();
        let decision = decide(parts, limit, true).await?;
        Ok(RateLimited(RateDecision {
            decision,
            _config: PhantomData,
        }))
    }
}
