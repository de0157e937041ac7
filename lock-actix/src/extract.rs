//! Extractors: a per-route lock and the rate-limit decision, configured in
//! app data.

use std::future::ready;
use std::marker::PhantomData;

use actix_web::dev::Payload;
use actix_web::{FromRequest, HttpRequest, HttpResponse};
use bytes::Bytes;
use futures_util::future::LocalBoxFuture;
use lock_core::rate::Decision;
use lock_tower::HeldLock;
use lock_tower::adapter::{HandlerDecision, HandlerLock, RouteLock, RouteRateLimit};

use crate::Rejection;
use crate::convert::{View, insert_header};

fn not_configured(what: &str) -> Rejection {
    tracing::warn!("{what} is not in the app data: add it with `App::app_data`");
    let mut response = http::Response::new(Bytes::from(format!("{what} is not configured\n")));
    *response.status_mut() = http::StatusCode::INTERNAL_SERVER_ERROR;
    Rejection(response)
}

/// Holds the lock of this request's key (see [`RouteLock`]) for the
/// handler's lifetime; what it holds, a [`HandlerLock`], is shared with
/// lock-axum's, and its methods ([`held`](HandlerLock::held),
/// [`fencing_token`](HandlerLock::fencing_token)) are reached through
/// `Deref`. Dropping it releases the lock in the background; a handler
/// that wants the key free before its response leaves calls
/// [`release`](Self::release). Path parameters are known here, so
/// [`PathParam`](lock_tower::key::PathParam) keys work whatever the app's
/// middleware.
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

impl<M: 'static> FromRequest for Locked<M> {
    type Error = Rejection;
    type Future = LocalBoxFuture<'static, Result<Self, Self::Error>>;

    fn from_request(request: &HttpRequest, _payload: &mut Payload) -> Self::Future {
        let Some(locker) = request.app_data::<RouteLock<M>>().cloned() else {
            return Box::pin(ready(Err(not_configured("RouteLock"))));
        };
        let view = View::of(request, locker.lock().headers_read());
        Box::pin(async move {
            let lock = locker.lock().acquire_for_handler(view.parts()).await;
            Ok(Locked {
                lock: lock.map_err(Rejection)?,
                _config: PhantomData,
            })
        })
    }
}

/// The rate-limit decision, handed to the handler whatever it is (backend
/// failures and missing keys are still answered per the layer's policies).
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
    pub fn with_headers(&self, mut response: HttpResponse) -> HttpResponse {
        let headers = response.headers_mut();
        self.decision
            .for_each_field(|name, value| insert_header(headers, name, &value));
        response
    }
}

/// The decision for `request` by the `RouteRateLimit<M>` in its app data;
/// `refuse_limited` answers a refusal with the layer's 429.
fn decide<M: 'static>(
    request: &HttpRequest,
    refuse_limited: bool,
) -> LocalBoxFuture<'static, Result<RateDecision<M>, Rejection>> {
    let Some(limit) = request.app_data::<RouteRateLimit<M>>().cloned() else {
        return Box::pin(ready(Err(not_configured("RouteRateLimit"))));
    };
    let view = View::of(request, limit.limit().headers_read());
    Box::pin(async move {
        let decision = limit
            .limit()
            .decide_for_handler(view.parts(), refuse_limited)
            .await
            .map_err(Rejection)?;
        Ok(RateDecision {
            decision,
            _config: PhantomData,
        })
    })
}

impl<M: 'static> FromRequest for RateDecision<M> {
    type Error = Rejection;
    type Future = LocalBoxFuture<'static, Result<Self, Self::Error>>;

    fn from_request(request: &HttpRequest, _payload: &mut Payload) -> Self::Future {
        decide(request, false)
    }
}

/// Lets the request through only if the rate limit allows it; refuses it
/// with the layer's 429 (and headers) otherwise. Holds the decision.
#[derive(Debug, Clone)]
pub struct RateLimited<M = ()>(pub RateDecision<M>);

impl<M: 'static> FromRequest for RateLimited<M> {
    type Error = Rejection;
    type Future = LocalBoxFuture<'static, Result<Self, Self::Error>>;

    fn from_request(request: &HttpRequest, _payload: &mut Payload) -> Self::Future {
        let decision = decide(request, true);
        Box::pin(async move { decision.await.map(RateLimited) })
    }
}
