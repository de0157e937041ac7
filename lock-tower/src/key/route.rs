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
/// use lock_axum::key::{KeyExtractor, PathParam, RequestParts, RouteParams};
///
/// let mut request = axum::http::Request::get("/orders/42/pay").body(()).unwrap();
/// request.extensions_mut().insert(RouteParams::new(
///     Some("/orders/{id}/pay".to_owned()),
///     [("id".to_owned(), "42".to_owned())],
/// ));
/// let key = PathParam::new("id").extract(RequestParts::new(&request));
/// assert_eq!(key.as_deref(), Some("42"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteParams {
    pattern: Option<String>,
    params: Vec<(String, String)>,
    /// Whether routing has run: before it, the parameters are unknown.
    routed: bool,
    /// Parameters whose value is not UTF-8 once percent-decoded.
    not_utf8: Vec<String>,
}

impl RouteParams {
    /// The matched route's `pattern` and its parameters, by name, each
    /// value percent-decoded (as the framework's own path extractor hands
    /// it to handlers).
    pub fn new(
        pattern: Option<String>,
        params: impl IntoIterator<Item = (String, String)>,
    ) -> Self {
        RouteParams {
            pattern,
            params: params.into_iter().collect(),
            routed: true,
            not_utf8: Vec::new(),
        }
    }

    /// The route a request will match, seen before routing has run
    /// (actix-web's `App::wrap` middleware knows the pattern then, not yet
    /// the parameters): [`MatchedRoute`] keys by it, and a [`PathParam`]
    /// says that its layer must move to the route.
    pub fn before_routing(pattern: Option<String>) -> Self {
        RouteParams {
            routed: false,
            ..RouteParams::new(pattern, [])
        }
    }

    /// Marks the parameters `names` as not UTF-8 once percent-decoded: a
    /// [`PathParam`] of one of them refuses the request (400) rather than
    /// key it by a lossy copy, which every such value would share.
    ///
    /// ```
    /// use lock_axum::key::{KeyExtractor, PathParam, RequestParts, RouteParams};
    ///
    /// let mut request = axum::http::Request::get("/jobs/%FF/run").body(()).unwrap();
    /// let params = RouteParams::new(None, [("id".to_owned(), "\u{FFFD}".to_owned())]);
    /// request.extensions_mut().insert(params.not_utf8(["id".to_owned()]));
    /// let parts = RequestParts::new(&request);
    /// assert_eq!(PathParam::new("id").extract(parts), None);
    /// assert!(PathParam::new("id").missing(parts).reason().contains("not valid UTF-8"));
    /// ```
    pub fn not_utf8(mut self, names: impl IntoIterator<Item = String>) -> Self {
        self.not_utf8.extend(names);
        self
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

    fn is_utf8(&self, name: &str) -> bool {
        !self.not_utf8.iter().any(|param| param == name)
    }
}

impl Default for RouteParams {
    /// A matched route without a pattern or parameters.
    fn default() -> Self {
        RouteParams::new(None, [])
    }
}

/// One path parameter of the matched route, by name: with a route
/// `/orders/{id}/pay`, `PathParam::new("id")` keys every request by its
/// order id, percent-decoded, as the framework's own path extractor hands
/// it to the handler. Under axum's `Router::nest` the parameter is read as
/// axum's own `Path` extractor reads it, so nesting changes nothing.
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

    /// The raw value of the parameter, as the router recorded it.
    fn value(&self, request: RequestParts<'_>) -> Option<String> {
        if let Some(route) = request.extensions.get::<RouteParams>() {
            if !route.is_utf8(&self.0) {
                return None;
            }
            return route.get(&self.0).map(str::to_owned);
        }
        #[cfg(feature = "axum")]
        if let Some(params) = axum_params(request) {
            return params
                .into_iter()
                .find(|(name, _)| name.as_str() == &*self.0)
                .map(|(_, value)| value);
        }
        None
    }
}

impl KeyExtractor for PathParam {
    fn extract(&self, request: RequestParts<'_>) -> Option<String> {
        self.value(request).filter(|value| !value.is_empty())
    }

    fn missing(&self, request: RequestParts<'_>) -> Missing {
        let name = &*self.0;
        let route = request.extensions.get::<RouteParams>();
        if route.is_some_and(|route| !route.routed) {
            return no_route();
        }
        let not_utf8 = route.is_some_and(|route| !route.is_utf8(name));
        #[cfg(feature = "axum")]
        let not_utf8 = not_utf8 || axum_invalid_utf8(request);
        if not_utf8 {
            return Missing::request(format!(
                "the path parameter `{name}` is not valid UTF-8 once decoded"
            ));
        }
        match self.value(request).as_deref() {
            Some("") => Missing::request(format!("the path parameter `{name}` is empty")),
            Some(_) => Missing::request("the request has no key"),
            None if matched(request) => {
                let route = matched_pattern(request).unwrap_or_default();
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

/// The pattern of the matched route, as the router recorded it.
fn matched_pattern(request: RequestParts<'_>) -> Option<&str> {
    if let Some(pattern) = request
        .extensions
        .get::<RouteParams>()
        .and_then(RouteParams::pattern)
    {
        return Some(pattern);
    }
    #[cfg(feature = "axum")]
    if let Some(matched) = request.extensions.get::<axum::extract::MatchedPath>() {
        return Some(matched.as_str());
    }
    None
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
    request
        .extensions
        .get::<RouteParams>()
        .is_some_and(|route| route.routed)
}

fn no_route() -> Missing {
    Missing::configuration(
        "no matched route in the request: the layer runs before routing, where path \
         parameters are not known yet. On actix-web, wrap the resource, not the app: \
         `web::resource(\"/orders/{id}\").wrap(..)` or `web::scope(..).wrap(..)` instead of \
         `App::wrap`; on axum, use `Router::layer` or `Router::route_layer`, not a layer \
         around the whole router",
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
