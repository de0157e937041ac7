//! Keys from the route a request matched: one of its path parameters, or
//! its pattern.
//!
//! They read the [`RouteParams`] an adapter records in the request's
//! extensions (see [`adapter`](crate::adapter)), never a framework's own
//! records. Routers know both only once they have matched, so these
//! extractors work in layers the router applies to its routes (axum's
//! `Router::layer` and `Router::route_layer`, with lock-axum's layers,
//! which have axum record the route; actix-web's `web::resource(..).wrap`
//! and `web::scope(..).wrap`) and in the adapters' extractors, not in
//! middleware around the whole router. Where no route was matched yet, the
//! request has no key and the layer logs the fix once (see
//! [`Missing::configuration`]).

use std::sync::Arc;

use super::{HeadersRead, KeyExtractor, Missing, RequestParts};
use crate::adapter::RouteParams;

/// One path parameter of the matched route, by name: with a route
/// `/orders/{id}/pay`, `PathParam::new("id")` keys every request by its
/// order id, percent-decoded, as the framework's own path extractor hands
/// it to the handler. Under axum's `Router::nest`, lock-axum records the
/// parameter as axum's own `Path` extractor reads it, so nesting changes
/// nothing.
///
/// A value that is empty, or not UTF-8 once decoded, is no key: the
/// request is refused with 400 and the reason (see
/// [`MissingKey`](crate::MissingKey)), never keyed by a value another
/// request could share.
#[derive(Debug, Clone)]
pub struct PathParam(Arc<str>);

impl PathParam {
    /// The parameter `name` (without braces).
    pub fn new(name: &str) -> Self {
        PathParam(Arc::from(name))
    }

    /// The value of the parameter, as the adapter recorded it; `None` as
    /// well when it is not UTF-8 once decoded.
    fn value<'r>(&self, request: RequestParts<'r>) -> Option<&'r str> {
        let route = request.extensions.get::<RouteParams>()?;
        if !route.is_utf8(&self.0) {
            return None;
        }
        route.get(&self.0)
    }
}

impl KeyExtractor for PathParam {
    fn extract(&self, request: RequestParts<'_>) -> Option<String> {
        self.with_key(request, |key| key.map(str::to_owned))
    }

    fn with_key<R>(&self, request: RequestParts<'_>, f: impl FnOnce(Option<&str>) -> R) -> R {
        f(self.value(request).filter(|value| !value.is_empty()))
    }

    fn missing(&self, request: RequestParts<'_>) -> Missing {
        let name = &*self.0;
        let route = request.extensions.get::<RouteParams>();
        if route.is_some_and(|route| !route.routed()) {
            return no_route();
        }
        if route.is_some_and(|route| !route.is_utf8(name)) {
            return Missing::request(format!(
                "the path parameter `{name}` is not valid UTF-8 once decoded"
            ));
        }
        match self.value(request) {
            Some("") => Missing::request(format!("the path parameter `{name}` is empty")),
            Some(_) => Missing::request("the request has no key"),
            None if route.is_some() => {
                let route = route.and_then(RouteParams::pattern).unwrap_or_default();
                Missing::configuration(format!(
                    "the route `{route}` has no `{{{name}}}` path parameter, yet this layer is on \
                     it: put the layer on the routes that have `{{{name}}}` only. On axum, \
                     `.route(\"/orders/{{{name}}}\", post(handler).layer(layer))` for each \
                     (`Router::route_layer` covers every route added before it); on actix-web, \
                     `web::resource(\"/orders/{{{name}}}\").wrap(..)`"
                ))
            }
            None => no_route(),
        }
    }

    fn headers_read(&self) -> HeadersRead<'_> {
        HeadersRead::None
    }
}

/// The pattern of the matched route: one key per route, whatever its
/// parameters, e.g. one lock for all payments. The key writes parameters
/// as `:name` (`/orders/{id}/pay` is `/orders/:id/pay`), as names may not
/// hold braces.
#[derive(Debug, Clone, Copy, Default)]
pub struct MatchedRoute;

impl KeyExtractor for MatchedRoute {
    fn extract(&self, request: RequestParts<'_>) -> Option<String> {
        let route = request.extensions.get::<RouteParams>()?;
        route.pattern().map(without_braces)
    }

    fn missing(&self, _request: RequestParts<'_>) -> Missing {
        no_route()
    }

    fn headers_read(&self) -> HeadersRead<'_> {
        HeadersRead::None
    }
}

/// `pattern` with each `{name}` written `:name`.
fn without_braces(pattern: &str) -> String {
    pattern.replace('{', ":").replace('}', "")
}

fn no_route() -> Missing {
    Missing::configuration(
        "no matched route in the request: the layer runs before routing, where path \
         parameters are not known yet, or no adapter recorded them. On actix-web, wrap the \
         resource, not the app: `web::resource(\"/orders/{id}\").wrap(..)` or \
         `web::scope(..).wrap(..)` instead of `App::wrap`; on axum, use `Router::layer` or \
         `Router::route_layer`, not a layer around the whole router, with the layers of \
         lock-axum (`lock_axum::LockLayer`, not lock-tower's, which reads no framework's \
         records)",
    )
}

/// Has `R` record the route of `request` if `key` reads it: what a layer's
/// service does before it takes the key.
#[inline]
pub(crate) fn record_route<R: crate::request::RequestInfo, B>(
    key: &impl KeyExtractor,
    request: http::Request<B>,
) -> http::Request<B> {
    if key.reads_route() {
        R::record_route(request)
    } else {
        request
    }
}
