//! actix-web integration of the redis-lock primitives.
//!
//! * Middleware in actix-web's own shape (a [`Transform`] builder, a
//!   [`Service`], a boxed future): [`RateLimit`] and [`KeyLock`], configured
//!   with the very same lock-tower layers, so statuses, headers, key
//!   extractors and failure policies match the tower/axum side.
//! * Extractors ([`FromRequest`]): [`Locked`] holds a per-route lock for the
//!   handler's lifetime; [`RateDecision`] hands the rate-limit decision to the
//!   handler. They find their configuration in app data ([`RouteLock`],
//!   [`RouteRateLimit`]).
//! * Refusals are [`Rejection`]s, which implement [`ResponseError`].
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

use std::future::{Ready, ready};
use std::rc::Rc;

use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{Payload, Service, ServiceRequest, ServiceResponse, Transform, forward_ready};
use actix_web::http::StatusCode as ActixStatus;
use actix_web::http::header::{HeaderName as ActixName, HeaderValue as ActixValue};
use actix_web::{FromRequest, HttpRequest, HttpResponse, ResponseError};
use bytes::Bytes;
use futures_util::future::LocalBoxFuture;
use lock_core::lock::LockBackend;
use lock_core::rate::RateBackend;
use lock_tower::key::{HeadersRead, KeyExtractor, RequestParts};
use lock_tower::{
    ConcurrencyLimitLayer, HandlerDecision, HeldLock, LockLayer, LockVerdict, RateLimitLayer,
    RateVerdict, SharedLock, SharedRateLimit,
};

/// The parts of an actix request, in the `http` 1 types the key extractors
/// read (actix-web 4 uses `http` 0.2).
struct View {
    method: http::Method,
    uri: http::Uri,
    headers: http::HeaderMap,
    extensions: http::Extensions,
}

impl View {
    /// The view of `request`, with the header fields the key extractor or
    /// a cost function reads (`read`), and no others.
    fn of(request: &HttpRequest, read: HeadersRead<'_>) -> Self {
        let mut headers = http::HeaderMap::new();
        match read {
            HeadersRead::None => {}
            HeadersRead::Only(names) => {
                for name in names {
                    for value in request.headers().get_all(name.as_str()) {
                        if let Ok(value) = http::HeaderValue::from_bytes(value.as_bytes()) {
                            headers.append(name.clone(), value);
                        }
                    }
                }
            }
            _ => {
                headers.reserve(request.headers().len());
                for (name, value) in request.headers() {
                    if let (Ok(name), Ok(value)) = (
                        http::HeaderName::from_bytes(name.as_str().as_bytes()),
                        http::HeaderValue::from_bytes(value.as_bytes()),
                    ) {
                        headers.append(name, value);
                    }
                }
            }
        }
        let mut extensions = http::Extensions::new();
        if let Some(peer) = request.peer_addr() {
            extensions.insert(peer);
        }
        // A server-side request is almost always in origin form: the path
        // and query are the whole URI, and parse without formatting.
        let uri = request.uri();
        let uri = match (uri.scheme(), uri.path_and_query()) {
            (None, Some(path)) => path.as_str().parse(),
            _ => uri.to_string().parse(),
        };
        View {
            method: http::Method::from_bytes(request.method().as_str().as_bytes())
                .unwrap_or_default(),
            uri: uri.unwrap_or_default(),
            headers,
            extensions,
        }
    }

    fn parts(&self) -> RequestParts<'_> {
        RequestParts::from_pieces(&self.method, &self.uri, &self.headers, &self.extensions)
    }
}

fn copy_headers(from: &http::HeaderMap, to: &mut actix_web::http::header::HeaderMap) {
    for (name, value) in from {
        insert_header(to, name, value);
    }
}

/// Sets one field, converted to actix-web's types, on `to`.
fn insert_header(
    to: &mut actix_web::http::header::HeaderMap,
    name: &http::HeaderName,
    value: &http::HeaderValue,
) {
    if let (Some(name), Ok(value)) = (actix_name(name), ActixValue::from_bytes(value.as_bytes())) {
        to.insert(name, value);
    }
}

/// The actix-web name of a header: the rate-limit fields (on every limited
/// response) without parsing, others parsed.
fn actix_name(name: &http::HeaderName) -> Option<ActixName> {
    use lock_tower::headers::{RATELIMIT, RATELIMIT_POLICY};
    if name == RATELIMIT {
        Some(ActixName::from_static("ratelimit"))
    } else if name == RATELIMIT_POLICY {
        Some(ActixName::from_static("ratelimit-policy"))
    } else {
        ActixName::from_bytes(name.as_str().as_bytes()).ok()
    }
}

fn to_actix(response: http::Response<Bytes>) -> HttpResponse {
    let status = ActixStatus::from_u16(response.status().as_u16())
        .unwrap_or(ActixStatus::INTERNAL_SERVER_ERROR);
    let (parts, body) = response.into_parts();
    let mut out = HttpResponse::build(status).body(body);
    copy_headers(&parts.headers, out.headers_mut());
    out
}

/// A refusal: the response the lock-tower layers would answer with (429, 423,
/// 409, 503, 500), as an actix-web error.
#[derive(Debug)]
pub struct Rejection(http::Response<Bytes>);

impl Rejection {
    /// The status.
    pub fn status(&self) -> http::StatusCode {
        self.0.status()
    }
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "request refused with {}", self.0.status())
    }
}

impl ResponseError for Rejection {
    fn status_code(&self) -> ActixStatus {
        ActixStatus::from_u16(self.0.status().as_u16())
            .unwrap_or(ActixStatus::INTERNAL_SERVER_ERROR)
    }

    fn error_response(&self) -> HttpResponse {
        let mut response = http::Response::new(self.0.body().clone());
        *response.status_mut() = self.0.status();
        *response.headers_mut() = self.0.headers().clone();
        to_actix(response)
    }
}

/// Rate-limit middleware: `App::new().wrap(RateLimit::new(layer))`.
#[derive(Clone, Debug)]
pub struct RateLimit(SharedRateLimit);

impl RateLimit {
    /// Limits as `layer` would.
    pub fn new<B: RateBackend, K: KeyExtractor>(layer: RateLimitLayer<B, K>) -> Self {
        RateLimit(SharedRateLimit::new(layer))
    }
}

impl<S, Bd> Transform<S, ServiceRequest> for RateLimit
where
    S: Service<ServiceRequest, Response = ServiceResponse<Bd>, Error = actix_web::Error> + 'static,
    Bd: MessageBody + 'static,
{
    type Response = ServiceResponse<EitherBody<Bd>>;
    type Error = actix_web::Error;
    type Transform = RateLimitMiddleware<S>;
    type InitError = ();
    type Future = Ready<Result<Self::Transform, Self::InitError>>;

    fn new_transform(&self, service: S) -> Self::Future {
        ready(Ok(RateLimitMiddleware {
            service: Rc::new(service),
            limit: self.0.clone(),
            policy: Rc::default(),
        }))
    }
}

/// The service of [`RateLimit`].
pub struct RateLimitMiddleware<S> {
    service: Rc<S>,
    limit: SharedRateLimit,
    policy: Rc<PolicyCache>,
}

/// A layer sends the same `RateLimit-Policy` value on every response: each
/// middleware converts it once, then shares the converted value.
#[derive(Default)]
struct PolicyCache(std::cell::RefCell<Option<(http::HeaderValue, ActixValue)>>);

impl PolicyCache {
    fn insert(
        &self,
        to: &mut actix_web::http::header::HeaderMap,
        name: &http::HeaderName,
        value: &http::HeaderValue,
    ) {
        if name != lock_tower::headers::RATELIMIT_POLICY {
            return insert_header(to, name, value);
        }
        let mut cached = self.0.borrow_mut();
        let converted = match cached.as_ref() {
            Some((seen, converted)) if seen == value => converted.clone(),
            _ => match ActixValue::from_bytes(value.as_bytes()) {
                Ok(converted) => {
                    *cached = Some((value.clone(), converted.clone()));
                    converted
                }
                Err(_) => return,
            },
        };
        to.insert(ActixName::from_static("ratelimit-policy"), converted);
    }
}

impl<S, Bd> Service<ServiceRequest> for RateLimitMiddleware<S>
where
    S: Service<ServiceRequest, Response = ServiceResponse<Bd>, Error = actix_web::Error> + 'static,
    Bd: MessageBody + 'static,
{
    type Response = ServiceResponse<EitherBody<Bd>>;
    type Error = actix_web::Error;
    type Future = LocalBoxFuture<'static, Result<Self::Response, Self::Error>>;

    forward_ready!(service);

    fn call(&self, request: ServiceRequest) -> Self::Future {
        let (service, limit) = (self.service.clone(), self.limit.clone());
        let policy = self.policy.clone();
        Box::pin(async move {
            let view = View::of(request.request(), limit.headers_read());
            match limit.decide(view.parts()).await {
                RateVerdict::Allow(decision) => {
                    let mut response = service.call(request).await?;
                    if let Some(decision) = decision {
                        let headers = response.headers_mut();
                        limit.for_each_field(&decision, |name, value| {
                            policy.insert(headers, name, &value);
                        });
                    }
                    Ok(response.map_into_left_body())
                }
                RateVerdict::Limited { response, .. } | RateVerdict::Respond(response) => {
                    Ok(request
                        .into_response(to_actix(response))
                        .map_into_right_body())
                }
                _ => Ok(request
                    .into_response(HttpResponse::ServiceUnavailable().finish())
                    .map_into_right_body()),
            }
        })
    }
}

/// Per-key lock (or concurrency limit) middleware:
/// `App::new().wrap(KeyLock::new(layer))`. The lock is held until the
/// response is produced, and released at once if the client goes away.
#[derive(Clone, Debug)]
pub struct KeyLock(SharedLock);

impl KeyLock {
    /// Locks as `layer` would.
    pub fn new<B: LockBackend, K: KeyExtractor>(layer: LockLayer<B, K>) -> Self {
        KeyLock(SharedLock::new(layer))
    }

    /// Admits at most N requests per key, as `layer` would.
    pub fn concurrency<B: LockBackend, K: KeyExtractor>(
        layer: ConcurrencyLimitLayer<B, K>,
    ) -> Self {
        KeyLock(SharedLock::concurrency(layer))
    }
}

impl<S, Bd> Transform<S, ServiceRequest> for KeyLock
where
    S: Service<ServiceRequest, Response = ServiceResponse<Bd>, Error = actix_web::Error> + 'static,
    Bd: MessageBody + 'static,
{
    type Response = ServiceResponse<EitherBody<Bd>>;
    type Error = actix_web::Error;
    type Transform = KeyLockMiddleware<S>;
    type InitError = ();
    type Future = Ready<Result<Self::Transform, Self::InitError>>;

    fn new_transform(&self, service: S) -> Self::Future {
        ready(Ok(KeyLockMiddleware {
            service: Rc::new(service),
            locker: self.0.clone(),
        }))
    }
}

/// The service of [`KeyLock`].
pub struct KeyLockMiddleware<S> {
    service: Rc<S>,
    locker: SharedLock,
}

impl<S, Bd> Service<ServiceRequest> for KeyLockMiddleware<S>
where
    S: Service<ServiceRequest, Response = ServiceResponse<Bd>, Error = actix_web::Error> + 'static,
    Bd: MessageBody + 'static,
{
    type Response = ServiceResponse<EitherBody<Bd>>;
    type Error = actix_web::Error;
    type Future = LocalBoxFuture<'static, Result<Self::Response, Self::Error>>;

    forward_ready!(service);

    fn call(&self, request: ServiceRequest) -> Self::Future {
        let (service, locker) = (self.service.clone(), self.locker.clone());
        Box::pin(async move {
            let view = View::of(request.request(), locker.headers_read());
            let held = match locker.acquire(view.parts()).await {
                LockVerdict::Proceed(held) => held,
                LockVerdict::Respond(response) => {
                    return Ok(request
                        .into_response(to_actix(response))
                        .map_into_right_body());
                }
                _ => {
                    return Ok(request
                        .into_response(HttpResponse::ServiceUnavailable().finish())
                        .map_into_right_body());
                }
            };
            let response = match (held, locker.cancels_on_lease_loss()) {
                (Some(mut held), true) => {
                    let http_request = request.request().clone();
                    let call = service.call(request);
                    futures_util::pin_mut!(call);
                    unless_lease_lost(call, &mut held, http_request).await?
                }
                (held, _) => {
                    let response = service.call(request).await?.map_into_left_body();
                    drop(held);
                    response
                }
            };
            Ok(response)
        })
    }
}

/// Runs `call` unless the lease is lost first (then answers 503).
async fn unless_lease_lost<Bd, F>(
    call: std::pin::Pin<&mut F>,
    held: &mut HeldLock,
    request: HttpRequest,
) -> Result<ServiceResponse<EitherBody<Bd>>, actix_web::Error>
where
    F: std::future::Future<Output = Result<ServiceResponse<Bd>, actix_web::Error>>,
    Bd: MessageBody + 'static,
{
    use futures_util::future::{Either, select};
    match select(call, std::pin::pin!(held.lost())).await {
        Either::Left((response, _)) => Ok(response?.map_into_left_body()),
        Either::Right(((), _)) => {
            let response = HttpResponse::ServiceUnavailable().body("Lock lease lost\n");
            Ok(ServiceResponse::new(request, response).map_into_right_body())
        }
    }
}

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
