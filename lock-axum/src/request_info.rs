//! Hands lock-tower's key extractors what axum knows of a request: the
//! client's address and the matched route with its path parameters.
//!
//! lock-tower knows no framework: its extractors read a `SocketAddr` and a
//! [`RouteParams`] in the request's extensions (see
//! [`lock_tower::adapter`]), or what a layer's [`RequestInfo`] reads.
//! axum keeps its own records (`ConnectInfo`, `MatchedPath`, and its path
//! parameters in a private extension): [`AxumInfo`] reads them for
//! lock-axum's layers, and [`record`] copies them for its extractors.

use std::net::SocketAddr;

use axum::extract::rejection::RawPathParamsRejection;
use axum::extract::{ConnectInfo, FromRequestParts, MatchedPath, RawPathParams};
use futures_util::FutureExt;
use http::request::Parts;
use http::{Extensions, Request};
use lock_tower::adapter::{RequestInfo, RouteParams};

/// What axum knows of a request, as lock-axum's layers read it: the
/// [`RequestInfo`] behind [`LockLayer`](crate::LockLayer),
/// [`ConcurrencyLimitLayer`](crate::ConcurrencyLimitLayer) and
/// [`RateLimitLayer`](crate::RateLimitLayer), so that their key extractors
/// find what axum recorded with no other layer in the app:
///
/// * the client's address from `ConnectInfo<SocketAddr>` (read in place),
///   for [`PeerIp`](crate::key::PeerIp) and [`ClientIp`](crate::key::ClientIp):
///   serve the app with `into_make_service_with_connect_info::<SocketAddr>()`;
/// * the matched route from `MatchedPath` and its parameters from
///   `RawPathParams`, decoded as axum's `Path` decodes them, for
///   [`PathParam`](crate::key::PathParam) and
///   [`MatchedRoute`](crate::key::MatchedRoute): recorded once per request
///   as a [`RouteParams`], and only for keys that read the route.
///
/// A [`SocketAddr`] or [`RouteParams`] already in the request's extensions
/// (put there by the server or another layer) is used as it is.
/// [`Locked`](crate::Locked), [`RateLimited`](crate::RateLimited) and
/// [`RateDecision`](crate::RateDecision) record the same for themselves.
///
/// ```
/// use std::net::SocketAddr;
/// use std::num::NonZeroU32;
///
/// use axum::Router;
/// use axum::extract::ConnectInfo;
/// use axum::routing::post;
/// use lock_axum::prelude::*;
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
///     .layer(RateLimitLayer::new(limiter, PeerIp::new()));
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
pub struct AxumInfo;

impl RequestInfo for AxumInfo {
    #[inline]
    fn peer_addr(extensions: &Extensions) -> Option<SocketAddr> {
        match extensions.get::<SocketAddr>() {
            Some(&peer) => Some(peer),
            None => extensions
                .get::<ConnectInfo<SocketAddr>>()
                .map(|&ConnectInfo(peer)| peer),
        }
    }

    fn record_route<B>(request: Request<B>) -> Request<B> {
        let extensions = request.extensions();
        if extensions.get::<RouteParams>().is_some() || extensions.get::<MatchedPath>().is_none() {
            return request;
        }
        // axum's path parameters are read through its extractor, which
        // takes the request's parts.
        let (mut parts, body) = request.into_parts();
        if let Some(route) = route_params(&mut parts) {
            parts.extensions.insert(route);
        }
        Request::from_parts(parts, body)
    }
}

/// Copies what axum recorded of the request into the neutral types of
/// [`lock_tower::adapter`], for the extractors: the client's address, and
/// the matched route with its parameters when the router has matched one
/// (each unless already there).
pub(crate) fn record(parts: &mut Parts) {
    if parts.extensions.get::<SocketAddr>().is_none()
        && let Some(&ConnectInfo(peer)) = parts.extensions.get::<ConnectInfo<SocketAddr>>()
    {
        parts.extensions.insert(peer);
    }
    if parts.extensions.get::<RouteParams>().is_none()
        && let Some(route) = route_params(parts)
    {
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
    use http::request::Parts;
    use lock_tower::adapter::{RequestInfo, RouteParams};
    use tower::ServiceExt;

    use super::{AxumInfo, param_names, record};

    /// What `app` shows for a `GET` of `uri` from 192.0.2.7:4000.
    async fn recorded(app: Router, uri: &str) -> String {
        let mut request = Request::get(uri).body(Body::empty()).unwrap();
        let peer = SocketAddr::from(([192, 0, 2, 7], 4000));
        request.extensions_mut().insert(ConnectInfo(peer));
        let response = app.oneshot(request).await.unwrap();
        let body = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .unwrap();
        String::from_utf8(body.to_vec()).unwrap()
    }

    /// The request's parts as [`AxumInfo`] records them for a layer.
    fn as_a_layer_records(parts: Parts) -> Parts {
        AxumInfo::record_route(Request::from_parts(parts, ()))
            .into_parts()
            .0
    }

    /// What a layer and an extractor find of the request: the same.
    async fn show(parts: Parts) -> String {
        let layer = as_a_layer_records(parts.clone());
        let layer = describe(AxumInfo::peer_addr(&layer.extensions), &layer.extensions);
        let mut extractor = parts;
        record(&mut extractor);
        let peer = extractor.extensions.get::<SocketAddr>().copied();
        assert_eq!(describe(peer, &extractor.extensions), layer);
        layer
    }

    fn describe(peer: Option<SocketAddr>, extensions: &Extensions) -> String {
        let route = extensions.get::<RouteParams>().map(|route| {
            (
                route.pattern().map(str::to_owned),
                route.get("id").map(str::to_owned),
                route.get("rest").map(str::to_owned),
            )
        });
        format!("{peer:?} {route:?}")
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
    async fn what_is_recorded_already_is_kept() {
        async fn kept(mut parts: Parts) -> String {
            let peer = SocketAddr::from(([198, 51, 100, 1], 80));
            parts.extensions.insert(peer);
            parts
                .extensions
                .insert(RouteParams::new(Some("/mine".to_owned()), []));
            show(parts).await
        }
        let app = Router::new().route("/{id}", get(kept));
        assert_eq!(
            recorded(app, "/7").await,
            "Some(198.51.100.1:80) Some((Some(\"/mine\"), None, None))"
        );
    }

    #[tokio::test]
    async fn an_undecodable_parameter_is_refused_not_missing() {
        use lock_tower::key::{KeyExtractor, PathParam, RequestParts};
        async fn why(parts: Parts) -> String {
            let parts = as_a_layer_records(parts);
            let missing = PathParam::new("id").missing(RequestParts::from_parts(&parts));
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
