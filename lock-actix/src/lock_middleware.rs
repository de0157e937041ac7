//! Per-key lock and concurrency-limit middleware.

use std::future::{Ready, ready};
use std::rc::Rc;

use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{Service, ServiceRequest, ServiceResponse, Transform, forward_ready};
use actix_web::{HttpRequest, HttpResponse};
use futures_util::future::LocalBoxFuture;
use lock_core::lock::LockBackend;
use lock_tower::key::KeyExtractor;
use lock_tower::{ConcurrencyLimitLayer, HeldLock, LockLayer, LockVerdict, SharedLock};

use crate::convert::{View, to_actix};

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
