//! Rate-limit middleware.

use std::future::{Ready, ready};
use std::rc::Rc;

use actix_web::HttpResponse;
use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{Service, ServiceRequest, ServiceResponse, Transform, forward_ready};
use actix_web::http::header::{HeaderName as ActixName, HeaderValue as ActixValue};
use futures_util::future::LocalBoxFuture;
use lock_core::rate::RateBackend;
#[cfg(doc)]
use lock_tower::RateLimitLayer;
use lock_tower::Refusal;
use lock_tower::adapter::RequestInfo;
use lock_tower::adapter::{RateVerdict, SharedRateLimit};
use lock_tower::key::KeyExtractor;
use lock_tower::rate_limit::RateLimitLayerWith;

use crate::convert::{View, insert_header, to_actix};

/// Rate-limit middleware, configured as a [`RateLimitLayer`]:
/// `App::new().wrap(RateLimitMiddleware::new(layer))`.
#[derive(Clone, Debug)]
pub struct RateLimitMiddleware(SharedRateLimit);

impl RateLimitMiddleware {
    /// Limits as `layer` would (a layer of any [`RequestInfo`], as for
    /// [`LockMiddleware::new`](crate::LockMiddleware::new)).
    pub fn new<B: RateBackend, K: KeyExtractor, R: RequestInfo>(
        layer: RateLimitLayerWith<B, K, R>,
    ) -> Self {
        RateLimitMiddleware(SharedRateLimit::new(layer))
    }
}

impl<S, Bd> Transform<S, ServiceRequest> for RateLimitMiddleware
where
    S: Service<ServiceRequest, Response = ServiceResponse<Bd>, Error = actix_web::Error> + 'static,
    Bd: MessageBody + 'static,
{
    type Response = ServiceResponse<EitherBody<Bd>>;
    type Error = actix_web::Error;
    type Transform = RateLimitService<S>;
    type InitError = ();
    type Future = Ready<Result<Self::Transform, Self::InitError>>;

    fn new_transform(&self, service: S) -> Self::Future {
        ready(Ok(RateLimitService {
            service: Rc::new(service),
            limit: self.0.clone(),
            policy: Rc::default(),
        }))
    }
}

/// The service of [`RateLimitMiddleware`].
pub struct RateLimitService<S> {
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

impl<S, Bd> Service<ServiceRequest> for RateLimitService<S>
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
                    // A refusal an inner layer answered (a busy lock) is
                    // about something else than the rate.
                    let refused = response.response().extensions().contains::<Refusal>();
                    if let Some(decision) = decision.filter(|_| !refused) {
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
