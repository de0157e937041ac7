//! Per-key lock and concurrency-limit middleware.

use std::future::{Ready, ready};
use std::rc::Rc;

use actix_web::HttpResponse;
use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{Service, ServiceRequest, ServiceResponse, Transform, forward_ready};
use futures_util::future::LocalBoxFuture;
use lock_core::lock::LockBackend;
use lock_tower::adapter::RequestInfo;
use lock_tower::adapter::{LockVerdict, SharedLock};
use lock_tower::key::KeyExtractor;
use lock_tower::lock::{ConcurrencyLimitLayerWith, LockLayerWith};
#[cfg(doc)]
use lock_tower::{ConcurrencyLimitLayer, LockLayer};
use lock_tower::{HeldLock, Refusal};

use crate::body::HeldBody;
use crate::convert::{View, to_actix};
use crate::rejection::Rejection;

/// Per-key lock (or concurrency limit) middleware, configured as a
/// [`LockLayer`] (or [`ConcurrencyLimitLayer`]):
/// `web::resource("/orders/{id}/pay").wrap(LockMiddleware::new(layer))`.
/// The lock is held until the response is produced (and released before it
/// goes out), or until its body has been sent with
/// [`LockLayer::hold_until_body_sent`]. actix-web serves a request whose
/// client went away to its end (it does not drop the service's future), so
/// a request waiting for the lock still takes it and runs its handler, and
/// one holding it keeps it until its handler is done.
///
/// A key from a path parameter ([`PathParam`](lock_tower::key::PathParam))
/// needs the middleware on the resource or scope (`web::resource(..).wrap`,
/// `web::scope(..).wrap`): `App::wrap` runs before routing, where the
/// parameters are not known yet, and answers every request 500 with the
/// fix.
#[derive(Clone, Debug)]
pub struct LockMiddleware(SharedLock);

impl LockMiddleware {
    /// Locks as `layer` would. The middleware records what actix-web
    /// knows of the request in lock-tower's neutral types, so a layer of
    /// any [`RequestInfo`] will do (lock-tower's, as re-exported here).
    pub fn new<B: LockBackend, K: KeyExtractor, R: RequestInfo>(
        layer: LockLayerWith<B, K, R>,
    ) -> Self {
        LockMiddleware(SharedLock::new(layer))
    }

    /// Admits at most N requests per key, as `layer` would.
    pub fn concurrency<B: LockBackend, K: KeyExtractor, R: RequestInfo>(
        layer: ConcurrencyLimitLayerWith<B, K, R>,
    ) -> Self {
        LockMiddleware(SharedLock::concurrency(layer))
    }
}

impl<S, Bd> Transform<S, ServiceRequest> for LockMiddleware
where
    S: Service<ServiceRequest, Response = ServiceResponse<Bd>, Error = actix_web::Error> + 'static,
    Bd: MessageBody + 'static,
{
    type Response = ServiceResponse<EitherBody<HeldBody<Bd>>>;
    type Error = actix_web::Error;
    type Transform = LockService<S>;
    type InitError = ();
    type Future = Ready<Result<Self::Transform, Self::InitError>>;

    fn new_transform(&self, service: S) -> Self::Future {
        ready(Ok(LockService {
            service: Rc::new(service),
            locker: self.0.clone(),
        }))
    }
}

/// The service of [`LockMiddleware`].
pub struct LockService<S> {
    service: Rc<S>,
    locker: SharedLock,
}

/// The middleware's own answer, marked as the layer marks its own.
fn refusal<B>(request: ServiceRequest, response: HttpResponse) -> ServiceResponse<EitherBody<B>> {
    let mut response = request.into_response(response);
    response.response_mut().extensions_mut().insert(Refusal);
    response.map_into_right_body()
}

impl<S, Bd> Service<ServiceRequest> for LockService<S>
where
    S: Service<ServiceRequest, Response = ServiceResponse<Bd>, Error = actix_web::Error> + 'static,
    Bd: MessageBody + 'static,
{
    type Response = ServiceResponse<EitherBody<HeldBody<Bd>>>;
    type Error = actix_web::Error;
    type Future = LocalBoxFuture<'static, Result<Self::Response, Self::Error>>;

    forward_ready!(service);

    fn call(&self, request: ServiceRequest) -> Self::Future {
        let (service, locker) = (self.service.clone(), self.locker.clone());
        Box::pin(async move {
            let view = View::of(request.request(), locker.headers_read());
            let mut held = match locker.acquire(view.parts()).await {
                LockVerdict::Proceed(held) => held,
                LockVerdict::Respond(response) => return Ok(refusal(request, to_actix(response))),
                _ => {
                    let unavailable = HttpResponse::ServiceUnavailable().finish();
                    return Ok(refusal(request, unavailable));
                }
            };
            let response = match held.as_mut() {
                // The request is not cloned for the 503: a clone held while
                // the service runs keeps actix-web from changing it.
                Some(lock) if locker.cancels_on_lease_loss() => {
                    match unless_lease_lost(service.call(request), lock).await {
                        Some(response) => response?,
                        None => return Err(lease_lost()),
                    }
                }
                _ => service.call(request).await?,
            };
            // Released before the response goes out (as the tower layer
            // does), so that a client that sends its next request at once
            // finds the key free; or once the body has been sent.
            let held = match held {
                Some(held) if !locker.holds_until_body_sent() => {
                    locker.release(held).await;
                    None
                }
                held => held,
            };
            Ok(response.map_body(|_, body| EitherBody::left(HeldBody::new(body, held))))
        })
    }
}

/// Runs `call` unless the lease is lost first (then `None`).
async fn unless_lease_lost<F: Future>(call: F, held: &mut HeldLock) -> Option<F::Output> {
    use futures_util::future::{Either, select};
    let call = std::pin::pin!(call);
    match select(call, std::pin::pin!(held.lost())).await {
        Either::Left((response, _)) => Some(response),
        Either::Right(((), _)) => None,
    }
}

/// 503: the handler was cancelled when the lock's lease was lost.
fn lease_lost() -> actix_web::Error {
    let mut response = http::Response::new(bytes::Bytes::from_static(b"Lock lease lost\n"));
    *response.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    Rejection(response).into()
}
