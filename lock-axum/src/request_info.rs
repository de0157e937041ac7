//! Hands lock-tower's key extractors what axum knows of a request: the
//! client's address and the matched route with its path parameters.
//!
//! lock-tower knows no framework: its extractors read a `SocketAddr` and a
//! [`RouteParams`] in the request's extensions (see
//! [`lock_tower::adapter`]). axum keeps its own records (`ConnectInfo`,
//! `MatchedPath`, and its path parameters in a private extension), so this
//! layer copies them into those types, as axum's `into_make_service_with_connect_info`
//! copies the connection's address into each request.

use std::net::SocketAddr;
use std::task::{Context, Poll};

use axum::extract::rejection::RawPathParamsRejection;
use axum::extract::{ConnectInfo, FromRequestParts, MatchedPath, RawPathParams};
use futures_util::FutureExt;
use http::Request;
use http::request::Parts;
use lock_tower::adapter::RouteParams;

/// Records what axum knows of each request for the key extractors of the
/// layers inside it: the client's address (from `ConnectInfo<SocketAddr>`,
/// for [`PeerIp`](crate::key::PeerIp) and [`ClientIp`](crate::key::ClientIp))
/// and the matched route with its path parameters (from `MatchedPath` and
/// `RawPathParams`, for [`PathParam`](crate::key::PathParam) and
/// [`MatchedRoute`](crate::key::MatchedRoute)).
///
/// Add it to the router **after** the lock and rate-limit layers, as its
/// last `.layer(..)`: axum knows the route only once it has routed, so the
/// layer must be one the router puts on its routes, and the layers run
/// from the last added inwards, so it must come last to run first. It
/// covers the layers on methods (`post(pay).layer(lock)`) as well, which
/// run inside the route. A layer that needs none of these (a header key, a
/// constant) works without it. [`Locked`](crate::Locked),
/// [`RateLimited`](crate::RateLimited) and
/// [`RateDecision`](crate::RateDecision) record the same for themselves.
///
/// Without it, or with a lock or rate-limit layer added after it, a key by
/// address or route finds nothing: the layer answers 500 with the fix in
/// the body and logs it once at `warn`. The address also needs the app
/// served with `into_make_service_with_connect_info::<SocketAddr>()`.
///
/// ```
/// use std::net::SocketAddr;
/// use std::num::NonZeroU32;
///
/// use axum::Router;
/// use axum::extract::ConnectInfo;
/// use axum::routing::post;
/// use lock_axum::prelude::*;
/// use lock_axum::RequestInfoLayer;
/// use tower::ServiceExt;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let backend = MemoryBackend::new();
/// let once = Quota::per_hour(NonZeroU32::MIN);
/// let limiter = RateLimiter::new(backend.clone(), "api", Policy::new(Algorithm::Gcra).quota(once))
///     .unwrap();
/// let app: Router = Router::new()
///     // A lock per order id: the key is the route's `{id}`.
///     .route(
///         "/orders/{id}/pay",
///         post(|| async { "paid" }).layer(LockLayer::new(backend, PathParam::new("id"))),
///     )
///     // A rate limit per client address.
///     .layer(RateLimitLayer::new(limiter, PeerIp::new()))
///     // Last: runs first, and hands both layers what axum knows.
///     .layer(RequestInfoLayer::new());
///
/// // `axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>())`
/// // puts the client's address in each request; here, by hand.
/// let request = |peer: [u8; 4]| {
///     let mut request = axum::http::Request::post("/orders/7/pay")
///         .body(axum::body::Body::empty())
///         .unwrap();
///     request.extensions_mut().insert(ConnectInfo(SocketAddr::from((peer, 4000))));
///     request
/// };
/// let first = app.clone().oneshot(request([192, 0, 2, 7])).await.unwrap();
/// assert_eq!(first.status(), 200);
/// let again = app.clone().oneshot(request([192, 0, 2, 7])).await.unwrap();
/// assert_eq!(again.status(), 429);
/// let other = app.oneshot(request([192, 0, 2, 8])).await.unwrap();
/// assert_eq!(other.status(), 200);
/// # }
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestInfoLayer(());

impl RequestInfoLayer {
    /// The layer.
    pub fn new() -> Self {
        RequestInfoLayer(())
    }
}

impl<S> tower::Layer<S> for RequestInfoLayer {
    type Service = RequestInfo<S>;

    fn layer(&self, inner: S) -> RequestInfo<S> {
        RequestInfo { inner }
    }
}

/// The service of [`RequestInfoLayer`]: records, then calls the inner
/// service with the request (its future is the inner service's own).
#[derive(Debug, Clone)]
pub struct RequestInfo<S> {
    inner: S,
}

impl<S, B> tower::Service<Request<B>> for RequestInfo<S>
where
    S: tower::Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        // axum's path parameters are read through its extractor, which
        // takes the request's parts.
        let (mut parts, body) = request.into_parts();
        record(&mut parts);
        self.inner.call(Request::from_parts(parts, body))
    }
}

/// Copies what axum recorded of the request into the neutral types of
/// [`lock_tower::adapter`]: the client's address, and the matched route
/// with its parameters when the router has matched one.
pub(crate) fn record(parts: &mut Parts) {
    if let Some(&ConnectInfo(peer)) = parts.extensions.get::<ConnectInfo<SocketAddr>>() {
        parts.extensions.insert(peer);
    }
    if let Some(route) = route_params(parts) {
        parts.extensions.insert(route);
    }
}

/// The matched route and its parameters, decoded as axum's own `Path`
/// extractor decodes them (so that nesting changes nothing).
fn route_params(parts: &mut Parts) -> Option<RouteParams> {
    let pattern = parts.extensions.get::<MatchedPath>()?.as_str().to_owned();
    // The extractor reads an extension and never waits.
    let params = match RawPathParams::from_request_parts(parts, &()).now_or_never() {
        Some(Ok(params)) => params
            .iter()
            .map(|(name, value)| (name.to_owned(), value.to_owned()))
            .collect(),
        Some(Err(RawPathParamsRejection::InvalidUtf8InPathParam(_))) => {
            // axum then keeps no parameter at all, only the error, and its
            // `Path` refuses the request whichever parameter it asks for:
            // so does every `PathParam` of the route (400), rather than
            // take the route for one without the parameter.
            let names = param_names(&pattern);
            return Some(RouteParams::new(Some(pattern), []).not_utf8(names));
        }
        _ => Vec::new(),
    };
    Some(RouteParams::new(Some(pattern), params))
}

/// The names of the parameters of an axum route `pattern`: `{id}` and
/// `{*rest}` (`{{` and `}}` are literal braces).
fn param_names(pattern: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = pattern;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        if let Some(escaped) = after.strip_prefix('{') {
            rest = escaped;
            continue;
        }
        let Some(close) = after.find('}') else { break };
        names.push(after[..close].trim_start_matches('*').to_owned());
        rest = &after[close + 1..];
    }
    names
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use axum::Router;
    use axum::body::Body;
    use axum::extract::ConnectInfo;
    use axum::http::{Extensions, Request};
    use axum::routing::get;
    use lock_tower::adapter::RouteParams;
    use tower::ServiceExt;

    use super::{RequestInfoLayer, param_names};

    /// What `app` with `RequestInfoLayer` last records for a `GET` of `uri`
    /// from 192.0.2.7:4000: the handler's view of the request's
    /// extensions.
    async fn recorded(app: Router, uri: &str) -> String {
        let mut request = Request::get(uri).body(Body::empty()).unwrap();
        let peer = SocketAddr::from(([192, 0, 2, 7], 4000));
        request.extensions_mut().insert(ConnectInfo(peer));
        let response = app
            .layer(RequestInfoLayer::new())
            .oneshot(request)
            .await
            .unwrap();
        let body = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .unwrap();
        String::from_utf8(body.to_vec()).unwrap()
    }

    async fn show(extensions: Extensions) -> String {
        let route = extensions.get::<RouteParams>().map(|route| {
            (
                route.pattern().map(str::to_owned),
                route.get("id").map(str::to_owned),
                route.get("rest").map(str::to_owned),
            )
        });
        format!("{:?} {route:?}", extensions.get::<SocketAddr>())
    }

    #[tokio::test]
    async fn records_the_peer_and_the_route_as_axum_decodes_them() {
        let nested = Router::new().route("/{id}/files/{*rest}", get(show));
        let app = Router::new().nest("/orders", nested);
        assert_eq!(
            recorded(app.clone(), "/orders/a%2Fb/files/x/y").await,
            "Some(192.0.2.7:4000) Some((Some(\"/orders/{id}/files/{*rest}\"), \
             Some(\"a/b\"), Some(\"x/y\")))"
        );
        // Not UTF-8 once decoded: axum keeps no parameter; every one of
        // the route is marked, so that a `PathParam` answers 400.
        let response = recorded(app, "/orders/%FF/files/x").await;
        assert!(response.ends_with("Some((Some(\"/orders/{id}/files/{*rest}\"), None, None))"));
        // The fallback matched no route: the peer only.
        let fallback = Router::new().fallback(show);
        assert_eq!(
            recorded(fallback, "/nowhere").await,
            "Some(192.0.2.7:4000) None"
        );
    }

    #[tokio::test]
    async fn an_undecodable_parameter_is_refused_not_missing() {
        use lock_tower::key::{KeyExtractor, PathParam, RequestParts};
        async fn why(request: Request<Body>) -> String {
            let parts = RequestParts::new(&request);
            let missing = PathParam::new("id").missing(parts);
            format!("{} {}", missing.is_configuration(), missing.reason())
        }
        let app = Router::new().route("/orders/{id}/{other}", get(why));
        assert_eq!(
            recorded(app, "/orders/%FF/x").await,
            "false the path parameter `id` is not valid UTF-8 once decoded"
        );
    }

    #[test]
    fn parameter_names_of_a_pattern() {
        assert_eq!(param_names("/orders/{id}/pay"), ["id"]);
        assert_eq!(param_names("/a/{x}/b/{*rest}"), ["x", "rest"]);
        assert_eq!(param_names("/{{literal}}/{id}"), ["id"]);
        assert!(param_names("/health").is_empty());
    }
}
