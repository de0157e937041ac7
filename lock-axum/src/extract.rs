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
    HandlerDecision, LockVerdict, RouteLock, RouteRateLimit, SharedRateLimit,
};
use lock_tower::key::RequestParts;

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
/// handler's lifetime. Dropping it (the handler returns, or the client goes
/// away) releases the lock in the background; a handler that wants the key
/// free before its response leaves calls [`release`](Self::release).
#[derive(Debug)]
pub struct Locked<M = ()> {
    held: Option<HeldLock>,
    _config: PhantomData<fn() -> M>,
}

impl<M> Locked<M> {
    /// The lock held; `None` when the request went ahead without one (the
    /// backend failed and the policy let it through, or it had no key and
    /// [`MissingKey::PassThrough`](lock_tower::MissingKey::PassThrough)).
    pub fn held(&self) -> Option<&HeldLock> {
        self.held.as_ref()
    }

    /// The lock's fencing token, when its options ask for fencing (see
    /// [`HeldLock::fencing_token`]).
    pub fn fencing_token(&self) -> Option<u64> {
        self.held.as_ref().and_then(HeldLock::fencing_token)
    }

    /// Releases the lock now.
    pub async fn release(self) {
        if let Some(held) = self.held {
            held.release().await;
        }
    }

    /// The held lock, to keep past the handler.
    pub fn into_inner(self) -> Option<HeldLock> {
        self.held
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
        match locker.lock().acquire(RequestParts::from_parts(parts)).await {
            LockVerdict::Proceed(held) => Ok(Locked {
                held,
                _config: PhantomData,
            }),
            LockVerdict::Respond(response) => Err(Rejection(response)),
            _ => Err(Rejection(unavailable())),
        }
    }
}

fn unavailable() -> http::Response<Bytes> {
    let mut response = http::Response::new(Bytes::from_static(b"Service Unavailable\n"));
    *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    response
}

/// The rate-limit decision, handed to the handler whatever it is: the
/// handler decides what to do with a refused request. (Backend failures and
/// missing keys are still answered per the layer's policies.)
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
    parts: &Parts,
    limit: SharedRateLimit,
    refuse_limited: bool,
) -> Result<HandlerDecision, Rejection> {
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
