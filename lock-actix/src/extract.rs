//! Extractors: a per-route lock and the rate-limit decision.

use std::future::ready;

use actix_web::dev::Payload;
use actix_web::{FromRequest, HttpRequest, HttpResponse};
use bytes::Bytes;
use futures_util::future::LocalBoxFuture;
use lock_core::lock::LockBackend;
use lock_core::rate::RateBackend;
use lock_tower::key::KeyExtractor;
use lock_tower::{
    HandlerDecision, HeldLock, LockLayer, LockVerdict, RateLimitLayer, SharedLock, SharedRateLimit,
};

use crate::Rejection;
use crate::convert::{View, insert_header};

/// App data for [`Locked`]: `App::new().app_data(RouteLock::new(layer))`.
#[derive(Clone, Debug)]
pub struct RouteLock(SharedLock);

impl RouteLock {
    /// Locks as `layer` would.
    pub fn new<B: LockBackend, K: KeyExtractor>(layer: LockLayer<B, K>) -> Self {
        RouteLock(SharedLock::new(layer))
    }
}

fn not_configured(what: &str) -> Rejection {
    let mut response = http::Response::new(Bytes::from(format!("{what} is not configured\n")));
    *response.status_mut() = http::StatusCode::INTERNAL_SERVER_ERROR;
    Rejection(response)
}

/// Holds the lock of this request's key for the handler's lifetime. Dropping
/// it releases the lock in the background; a handler that wants the key free
/// before its response leaves calls [`HeldLock::release`] at its end.
#[derive(Debug)]
pub struct Locked(pub Option<HeldLock>);

impl FromRequest for Locked {
    type Error = Rejection;
    type Future = LocalBoxFuture<'static, Result<Self, Self::Error>>;

    fn from_request(request: &HttpRequest, _payload: &mut Payload) -> Self::Future {
        let Some(locker) = request.app_data::<RouteLock>().cloned() else {
            return Box::pin(ready(Err(not_configured("RouteLock app data"))));
        };
        let view = View::of(request, locker.0.headers_read());
        Box::pin(async move {
            match locker.0.acquire(view.parts()).await {
                LockVerdict::Proceed(held) => Ok(Locked(held)),
                LockVerdict::Respond(response) => Err(Rejection(response)),
                _ => Err(not_configured("this lock verdict")),
            }
        })
    }
}

/// App data for [`RateDecision`]: `App::new().app_data(RouteRateLimit::new(layer))`.
#[derive(Clone, Debug)]
pub struct RouteRateLimit(SharedRateLimit);

impl RouteRateLimit {
    /// Decides as `layer` would.
    pub fn new<B: RateBackend, K: KeyExtractor>(layer: RateLimitLayer<B, K>) -> Self {
        RouteRateLimit(SharedRateLimit::new(layer))
    }
}

/// The rate-limit decision, handed to the handler whatever it is (backend
/// failures and missing keys are still answered per the layer's policies).
/// Dereferences to [`HandlerDecision`] for `decision()` and `allowed()`.
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
    pub fn with_headers(&self, mut response: HttpResponse) -> HttpResponse {
        let headers = response.headers_mut();
        self.0
            .for_each_field(|name, value| insert_header(headers, name, &value));
        response
    }
}

impl FromRequest for RateDecision {
    type Error = Rejection;
    type Future = LocalBoxFuture<'static, Result<Self, Self::Error>>;

    fn from_request(request: &HttpRequest, _payload: &mut Payload) -> Self::Future {
        let Some(limit) = request.app_data::<RouteRateLimit>().cloned() else {
            return Box::pin(ready(Err(not_configured("RouteRateLimit app data"))));
        };
        let view = View::of(request, limit.0.headers_read());
        Box::pin(async move {
            limit
                .0
                .decide_for_handler(view.parts(), false)
                .await
                .map(RateDecision)
                .map_err(Rejection)
        })
    }
}
