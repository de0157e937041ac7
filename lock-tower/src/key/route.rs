//! Keys from the route a request matched: one of its path parameters, or
//! its pattern.
//!
//! Routers know both only once they have matched, so these extractors work
//! in layers the router applies to its routes (axum's `Router::layer` and
//! `Router::route_layer`, actix-web's `web::resource(..).wrap` and
//! `web::scope(..).wrap`) and in extractors, not in middleware around the
//! whole router. Where no route was matched yet, the request has no key
//! and the layer logs the fix once (see [`Missing::configuration`]).

use std::sync::Arc;

use super::{HeadersRead, KeyExtractor, Missing, RequestParts};

/// The route a request matched and its path parameters, as an adapter
/// records them in the request's extensions: lock-actix does, from
/// actix-web's `match_info`. (axum's router keeps its own, which
/// [`PathParam`] and [`MatchedRoute`] read with the `axum` feature.)
///
/// ```
/// use lock_tower::key::{KeyExtractor, PathParam, RequestParts, RouteParams};
///
/// let mut request = http::Request::get("/orders/42/pay").body(()).unwrap();
/// request.extensions_mut().insert(RouteParams::new(
///     Some("/orders/{id}/pay".to_owned()),
///     [("id".to_owned(), "42".to_owned())],
/// ));
/// let key = PathParam::new("id").extract(RequestParts::new(&request));
/// assert_eq!(key.as_deref(), Some("42"));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RouteParams {
    pattern: Option<String>,
    params: Vec<(String, String)>,
}

impl RouteParams {
    /// The route's `pattern` and its parameters, by name.
    pub fn new(
        pattern: Option<String>,
        params: impl IntoIterator<Item = (String, String)>,
    ) -> Self {
        RouteParams {
            pattern,
            params: params.into_iter().collect(),
        }
    }

    /// The value of the parameter `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(param, _)| param == name)
            .map(|(_, value)| value.as_str())
    }

    /// The route's pattern (`/orders/{id}/pay`).
    pub fn pattern(&self) -> Option<&str> {
        self.pattern.as_deref()
    }
}

/// One path parameter of the matched route, by name: with a route
/// `/orders/{id}/pay`, `PathParam::new("id")` keys every request by its
/// order id. Under axum's `Router::nest` the parameter is read as axum's
/// own `Path` extractor reads it, so nesting changes nothing.
#[derive(Debug, Clone)]
pub struct PathParam(Arc<str>);

impl PathParam {
    /// The parameter `name` (without braces).
    pub fn new(name: &str) -> Self {
        PathParam(Arc::from(name))
    }
}

impl KeyExtractor for PathParam {
    fn extract(&self, request: RequestParts<'_>) -> Option<String> {
        if let Some(route) = request.extensions.get::<RouteParams>() {
            return route.get(&self.0).map(str::to_owned);
        }
        #[cfg(feature = "axum")]
        if let Some(params) = axum_params(request) {
            return params
                .iter()
                .find(|(name, _)| name.as_str() == &*self.0)
                .map(|(_, value)| value.to_owned());
        }
        None
    }

    fn missing(&self, request: RequestParts<'_>) -> Missing {
        #[cfg(feature = "axum")]
        if axum_invalid_utf8(request) {
            return Missing::request(format!(
                "the path parameter `{}` is not valid UTF-8 once decoded",
                self.0
            ));
        }
        if matched(request) {
            Missing::configuration(format!(
                "the matched route has no `{{{}}}` path parameter: put this layer on the \
                 routes that have it (axum: `Router::route_layer` on them)",
                self.0
            ))
        } else {
            no_route()
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
        if let Some(pattern) = request
            .extensions
            .get::<RouteParams>()
            .and_then(RouteParams::pattern)
        {
            return Some(without_braces(pattern));
        }
        #[cfg(feature = "axum")]
        if let Some(matched) = request.extensions.get::<axum::extract::MatchedPath>() {
            return Some(without_braces(matched.as_str()));
        }
        None
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

/// Whether the router recorded a matched route.
fn matched(request: RequestParts<'_>) -> bool {
    #[cfg(feature = "axum")]
    if request
        .extensions
        .get::<axum::extract::MatchedPath>()
        .is_some()
    {
        return true;
    }
    request.extensions.get::<RouteParams>().is_some()
}

fn no_route() -> Missing {
    Missing::configuration(
        "no matched route in the request: the layer runs before routing. Apply it with \
         axum's `Router::layer` or `Router::route_layer` (not around the whole router), or \
         with actix-web's `web::resource(..).wrap` or `web::scope(..).wrap` (not `App::wrap`)",
    )
}

/// axum's path parameters of `request` (as its `RawPathParams` extractor
/// reads them: axum keeps them in a private extension).
#[cfg(feature = "axum")]
fn axum_params(request: RequestParts<'_>) -> Option<Vec<(String, String)>> {
    use axum::extract::{FromRequestParts, RawPathParams};
    use futures_util::FutureExt;
    // Only a matched route has parameters.
    request.extensions.get::<axum::extract::MatchedPath>()?;
    let (mut parts, ()) = http::Request::new(()).into_parts();
    parts.extensions = request.extensions.clone();
    // It reads an extension and never waits.
    let params = RawPathParams::from_request_parts(&mut parts, &())
        .now_or_never()?
        .ok()?;
    Some(
        params
            .iter()
            .map(|(name, value)| (name.to_owned(), value.to_owned()))
            .collect(),
    )
}

/// Whether axum matched a route whose parameters are not valid UTF-8.
#[cfg(feature = "axum")]
fn axum_invalid_utf8(request: RequestParts<'_>) -> bool {
    use axum::extract::rejection::RawPathParamsRejection;
    use axum::extract::{FromRequestParts, RawPathParams};
    use futures_util::FutureExt;
    let (mut parts, ()) = http::Request::new(()).into_parts();
    parts.extensions = request.extensions.clone();
    matches!(
        RawPathParams::from_request_parts(&mut parts, &()).now_or_never(),
        Some(Err(RawPathParamsRejection::InvalidUtf8InPathParam(_)))
    )
}
