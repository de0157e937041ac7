//! The neutral types an adapter records in a request's extensions, and
//! the [`RequestInfo`] through which the layers read a framework's own
//! records (see [`adapter`](crate::adapter), which exports them).

use std::net::SocketAddr;

use http::{Extensions, Request};

/// How a layer learns what a framework knows of a request: the peer's
/// address and the matched route, which the key extractors read. It is the
/// third parameter of [`LockLayerWith`](crate::lock::LockLayerWith),
/// [`ConcurrencyLimitLayerWith`](crate::lock::ConcurrencyLimitLayerWith) and
/// [`RateLimitLayerWith`](crate::rate_limit::RateLimitLayerWith); lock-tower's own
/// [`LockLayer`](crate::LockLayer), [`ConcurrencyLimitLayer`](crate::ConcurrencyLimitLayer)
/// and [`RateLimitLayer`](crate::RateLimitLayer) take [`Neutral`], and an
/// adapter exports the same names with its own (lock-axum's read axum's
/// `ConnectInfo`, `MatchedPath` and path parameters), so that its
/// applications need no extra layer.
///
/// A type of it is a marker, never built: its functions are called with
/// the request. The defaults read and record nothing of any framework.
pub trait RequestInfo: Clone + std::fmt::Debug + Send + Sync + 'static {
    /// The TCP peer's address, for [`PeerIp`](crate::key::PeerIp) and
    /// [`ClientIp`](crate::key::ClientIp). An adapter reads a
    /// [`SocketAddr`] recorded in `extensions` first (the neutral record
    /// wins), then its framework's own. Called only when a key asks for it,
    /// so it should not allocate. The default reads the `SocketAddr` only.
    fn peer_addr(extensions: &Extensions) -> Option<SocketAddr> {
        extensions.get::<SocketAddr>().copied()
    }

    /// Records the matched route as a [`RouteParams`] in the request's
    /// extensions, for [`PathParam`](crate::key::PathParam) and
    /// [`MatchedRoute`](crate::key::MatchedRoute). The layers call it once
    /// per request, before taking the key, and only for a key that
    /// [reads the route](crate::key::KeyExtractor::reads_route); an adapter
    /// leaves a `RouteParams` already there as it is. The default records
    /// nothing.
    fn record_route<B>(request: Request<B>) -> Request<B> {
        request
    }
}

/// The [`RequestInfo`] of lock-tower's own layers: the peer's address is a
/// [`SocketAddr`] in the request's extensions, and the route a
/// [`RouteParams`], as an adapter (or the server itself) recorded them.
#[derive(Debug, Clone, Copy, Default)]
pub struct Neutral;

impl RequestInfo for Neutral {}

/// The route a request matched and its path parameters, as an adapter
/// records them in the request's extensions, for
/// [`PathParam`](crate::key::PathParam) and
/// [`MatchedRoute`](crate::key::MatchedRoute) to read.
///
/// ```
/// use lock_tower::adapter::RouteParams;
/// use lock_tower::key::{KeyExtractor, MatchedRoute, PathParam, RequestParts};
///
/// let mut request = http::Request::get("/orders/42/pay").body(()).unwrap();
/// request.extensions_mut().insert(RouteParams::new(
///     Some("/orders/{id}/pay".to_owned()),
///     [("id".to_owned(), "42".to_owned())],
/// ));
/// let parts = RequestParts::new(&request);
/// assert_eq!(PathParam::new("id").extract(parts).as_deref(), Some("42"));
/// assert_eq!(MatchedRoute.extract(parts).as_deref(), Some("/orders/:id/pay"));
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
    /// the parameters): [`MatchedRoute`](crate::key::MatchedRoute) keys by
    /// it, and a [`PathParam`](crate::key::PathParam) says that its layer
    /// must move to the route.
    ///
    /// ```
    /// use lock_tower::adapter::RouteParams;
    /// use lock_tower::key::{KeyExtractor, MatchedRoute, PathParam, RequestParts};
    ///
    /// let mut request = http::Request::get("/orders/42").body(()).unwrap();
    /// let route = RouteParams::before_routing(Some("/orders/{id}".to_owned()));
    /// request.extensions_mut().insert(route);
    /// let parts = RequestParts::new(&request);
    /// assert_eq!(MatchedRoute.extract(parts).as_deref(), Some("/orders/:id"));
    /// assert!(PathParam::new("id").missing(parts).is_configuration());
    /// ```
    pub fn before_routing(pattern: Option<String>) -> Self {
        RouteParams {
            routed: false,
            ..RouteParams::new(pattern, [])
        }
    }

    /// Marks the parameters `names` as not UTF-8 once percent-decoded: a
    /// [`PathParam`](crate::key::PathParam) of one of them refuses the
    /// request (400) rather than key it by a lossy copy, which every such
    /// value would share.
    ///
    /// ```
    /// use lock_tower::adapter::RouteParams;
    /// use lock_tower::key::{KeyExtractor, PathParam, RequestParts};
    ///
    /// let mut request = http::Request::get("/jobs/%FF/run").body(()).unwrap();
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

    /// Whether routing has run (see [`before_routing`](Self::before_routing)).
    pub(crate) fn routed(&self) -> bool {
        self.routed
    }

    /// Whether the value of `name`, if any, is UTF-8 once decoded.
    pub(crate) fn is_utf8(&self, name: &str) -> bool {
        !self.not_utf8.iter().any(|param| param == name)
    }
}

impl Default for RouteParams {
    /// A matched route without a pattern or parameters.
    fn default() -> Self {
        RouteParams::new(None, [])
    }
}
