//! Key extractors: which bucket or lock a request belongs to.
//!
//! | extractor | key |
//! | --- | --- |
//! | [`PeerIp`] | the TCP peer's address (IPv6 grouped by prefix) |
//! | [`ClientIp`] | the client's address behind trusted proxies (`X-Forwarded-For` or `Forwarded`) |
//! | [`HeaderKey`] | a header's value (an API key, a user id) |
//! | [`PathKey`] | the request path |
//! | [`PathParam`] | one path parameter of the matched route (`/orders/{id}`: the id) |
//! | [`MatchedRoute`] | the matched route's pattern (one key per route) |
//! | [`GlobalKey`] | one constant key: a limit shared by every request |
//! | any `Fn(RequestParts<'_>) -> Option<String>` | whatever it returns |
//!
//! The extractors read what the request says and what an adapter recorded
//! in its extensions (see [`adapter`](crate::adapter)): the peer's
//! [`SocketAddr`] and the matched route's
//! [`RouteParams`](crate::adapter::RouteParams). [`PeerIp`] and
//! [`ClientIp`] hand a rate limiter the address itself, an IPv6 address as
//! its network ([`KeyExtractor::with_caller`], a [`Caller`]): the same key
//! as its text (`192.0.2.7`, `2001:db8:1:2::/64`), not written out.

mod global;
mod header;
mod ip;
mod path;
mod route;

use std::borrow::Cow;
use std::net::SocketAddr;

use http::header::HeaderName;
use http::{Extensions, HeaderMap, Method, Request, Uri};
pub use lock_core::rate::{Caller, DEFAULT_V6_PREFIX};

pub use self::global::GlobalKey;
pub use self::header::HeaderKey;
pub use self::ip::{ClientIp, ForwardedHeader, PeerIp};
pub use self::path::PathKey;
pub(crate) use self::route::record_route;
pub use self::route::{MatchedRoute, PathParam};
use crate::request::{Neutral, RequestInfo};

/// The parts of a request a key extractor may look at.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct RequestParts<'a> {
    /// The method.
    pub method: &'a Method,
    /// The URI.
    pub uri: &'a Uri,
    /// The headers.
    pub headers: &'a HeaderMap,
    /// The extensions: the peer's `SocketAddr` and the matched route's
    /// [`RouteParams`](crate::adapter::RouteParams), as an adapter
    /// recorded them, and whatever else the stack put there.
    pub extensions: &'a Extensions,
    /// Reads the peer's address from the extensions: the layer's
    /// [`RequestInfo::peer_addr`].
    peer: fn(&Extensions) -> Option<SocketAddr>,
}

impl<'a> RequestParts<'a> {
    /// A view of `request`.
    pub fn new<B>(request: &'a Request<B>) -> Self {
        RequestParts {
            method: request.method(),
            uri: request.uri(),
            headers: request.headers(),
            extensions: request.extensions(),
            peer: Neutral::peer_addr,
        }
    }

    /// A view of request `parts` (as axum extractors get them).
    pub fn from_parts(parts: &'a http::request::Parts) -> Self {
        RequestParts {
            method: &parts.method,
            uri: &parts.uri,
            headers: &parts.headers,
            extensions: &parts.extensions,
            peer: Neutral::peer_addr,
        }
    }

    /// A view of separately held request pieces (for other frameworks).
    pub fn from_pieces(
        method: &'a Method,
        uri: &'a Uri,
        headers: &'a HeaderMap,
        extensions: &'a Extensions,
    ) -> Self {
        RequestParts {
            method,
            uri,
            headers,
            extensions,
            peer: Neutral::peer_addr,
        }
    }

    /// The same view, whose [`peer_addr`](Self::peer_addr) reads the peer
    /// as `R` does (a layer's framework).
    #[inline]
    pub(crate) fn peer_as<R: RequestInfo>(self) -> Self {
        RequestParts {
            peer: R::peer_addr,
            ..self
        }
    }

    /// The TCP peer's address: the [`SocketAddr`] in the extensions, which
    /// an adapter records (lock-actix from actix-web's peer address) or the
    /// server puts there itself; in a layer, else the address its
    /// framework keeps ([`RequestInfo::peer_addr`]: lock-axum's layers read
    /// axum's `ConnectInfo`).
    ///
    /// ```
    /// use std::net::SocketAddr;
    /// use lock_tower::key::RequestParts;
    ///
    /// let mut request = http::Request::get("/").body(()).unwrap();
    /// assert_eq!(RequestParts::new(&request).peer_addr(), None);
    /// let peer = SocketAddr::from(([192, 0, 2, 7], 4000));
    /// request.extensions_mut().insert(peer);
    /// assert_eq!(RequestParts::new(&request).peer_addr(), Some(peer));
    /// ```
    // Inline, so that a caller holding the parts reads the extensions
    // straight from them rather than through a fresh copy of all four.
    #[inline]
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        (self.peer)(self.extensions)
    }
}

/// Why a request has no key, as its [`KeyExtractor`] tells it: the
/// request's own fault (a 400 with the reason), or the server's set-up (a
/// 500 with the fix, which is also logged once). See
/// [`MissingKey`](crate::MissingKey).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missing {
    configuration: bool,
    reason: Cow<'static, str>,
}

impl Missing {
    /// The request lacks what its key comes from (a header): the client's
    /// mistake. `reason` is sent back to it.
    pub fn request(reason: impl Into<Cow<'static, str>>) -> Self {
        Missing {
            configuration: false,
            reason: reason.into(),
        }
    }

    /// No request can have a key as the server is set up; `fix` says what
    /// to change. It is logged once at `warn`, and sent in the body of the
    /// 500 as well, for whoever tries the server before looking at its
    /// logs: write it for the developer, with nothing secret in it.
    pub fn configuration(fix: impl Into<Cow<'static, str>>) -> Self {
        Missing {
            configuration: true,
            reason: fix.into(),
        }
    }

    /// Whether the server's set-up is at fault.
    pub fn is_configuration(&self) -> bool {
        self.configuration
    }

    /// Why: for the client, or for the operator when the set-up is at fault.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

/// What [`PeerIp`] and [`ClientIp`] say when there is no peer address.
pub(crate) fn no_peer_address() -> Missing {
    Missing::configuration(
        "no peer address in the request: serve axum with \
         `axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>())`, \
         with the layers of lock-axum (`lock_axum::RateLimitLayer`, not lock-tower's, which \
         reads no framework's records); with no framework, put the peer's `SocketAddr` in \
         the request's extensions",
    )
}

/// Decides the key of a request; `None` when it has none (see
/// [`MissingKey`](crate::MissingKey)).
pub trait KeyExtractor: Clone + Send + Sync + 'static {
    /// The key of the request.
    fn extract(&self, request: RequestParts<'_>) -> Option<String>;

    /// Why `request` has no key, when it has none (the default: the
    /// request's fault, with no more said). An extractor that reads what
    /// the server must provide (the peer address, the route's parameters)
    /// says so, so that the layers log the fix instead of blaming clients.
    fn missing(&self, request: RequestParts<'_>) -> Missing {
        let _ = request;
        Missing::request("the request has no key")
    }

    /// Calls `f` with the key of the request. The middleware uses this, so
    /// an extractor that can lend its key without allocating (a header, the
    /// path, a constant, an IP address formatted on the stack) should
    /// override it; the default calls [`extract`](Self::extract).
    ///
    /// ```
    /// use lock_axum::key::{KeyExtractor, PathKey, RequestParts};
    /// let request = axum::http::Request::get("/orders/7").body(()).unwrap();
    /// let len = PathKey.with_key(RequestParts::new(&request), |key| key.map(str::len));
    /// assert_eq!(len, Some(9));
    /// ```
    fn with_key<R>(&self, request: RequestParts<'_>, f: impl FnOnce(Option<&str>) -> R) -> R {
        f(self.extract(request).as_deref())
    }

    /// Calls `f` with the request's [`Caller`]: the rate limiters decide
    /// by it. The default parses the text of [`with_key`](Self::with_key)
    /// ([`Caller::parse`]); [`PeerIp`] and [`ClientIp`] hand the address
    /// itself, so the in-memory backend decides without writing it out.
    ///
    /// ```
    /// use std::net::{Ipv4Addr, SocketAddr};
    /// use lock_axum::key::{Caller, KeyExtractor, PathKey, PeerIp, RequestParts};
    /// let mut request = axum::http::Request::get("/orders").body(()).unwrap();
    /// request.extensions_mut().insert(SocketAddr::from(([192, 0, 2, 7], 4000)));
    /// let parts = RequestParts::new(&request);
    /// let peer = Some(Caller::Ipv4(Ipv4Addr::new(192, 0, 2, 7)));
    /// assert!(PeerIp::new().with_caller(parts, |caller| caller == peer));
    /// assert!(PathKey.with_caller(parts, |caller| caller == Some(Caller::Text("/orders"))));
    /// ```
    fn with_caller<R>(
        &self,
        request: RequestParts<'_>,
        f: impl FnOnce(Option<Caller<'_>>) -> R,
    ) -> R {
        self.with_key(request, |key| f(key.map(Caller::parse)))
    }

    /// Which header fields the key depends on (default: all of them).
    /// Adapters that must first copy a request into `http` types (lock-actix:
    /// actix-web 4 has its own) copy only these. An extractor that reads no
    /// header, or only some, should say so.
    ///
    /// ```
    /// use axum::http::HeaderName;
    /// use lock_axum::key::{ClientIp, HeaderKey, HeadersRead, KeyExtractor, PeerIp};
    /// assert_eq!(PeerIp::new().headers_read(), HeadersRead::None);
    /// let api_key = HeaderKey::new(HeaderName::from_static("x-api-key"));
    /// assert_eq!(api_key.headers_read(), HeadersRead::Only(&[HeaderName::from_static("x-api-key")]));
    /// let key = |_: lock_axum::key::RequestParts<'_>| Some("k".to_owned());
    /// assert_eq!(key.headers_read(), HeadersRead::All);
    /// ```
    fn headers_read(&self) -> HeadersRead<'_> {
        HeadersRead::All
    }

    /// Whether the key reads the matched route (a
    /// [`RouteParams`](crate::adapter::RouteParams)): the layers have their
    /// framework record it ([`RequestInfo::record_route`]) only for keys
    /// that do, as it costs an allocation. The default says yes; an
    /// extractor that reads no route should say no.
    ///
    /// ```
    /// use lock_axum::key::{KeyExtractor, PathParam, PeerIp};
    /// assert!(!PeerIp::new().reads_route());
    /// assert!(PathParam::new("id").reads_route());
    /// ```
    fn reads_route(&self) -> bool {
        true
    }
}

/// The header fields a key (or a rate-limit cost) depends on; see
/// [`KeyExtractor::headers_read`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HeadersRead<'a> {
    /// No header field: the key comes from the peer address, the URI or
    /// nothing.
    None,
    /// Only the fields of these names.
    Only(&'a [HeaderName]),
    /// Any field.
    All,
}

impl<F> KeyExtractor for F
where
    F: Fn(RequestParts<'_>) -> Option<String> + Clone + Send + Sync + 'static,
{
    fn extract(&self, request: RequestParts<'_>) -> Option<String> {
        self(request)
    }
}

#[cfg(test)]
mod tests {
    use http::header::FORWARDED;

    use super::*;

    pub(super) fn request(peer: &str, headers: &[(&str, &str)]) -> Request<()> {
        let mut builder = Request::builder().uri("/orders/42");
        for (k, v) in headers {
            builder = builder.header(*k, *v);
        }
        let mut req = builder.body(()).unwrap();
        req.extensions_mut()
            .insert(peer.parse::<SocketAddr>().unwrap());
        req
    }

    pub(super) fn client_ip() -> ClientIp {
        ClientIp::new(["10.0.0.0/8".parse().unwrap()])
    }

    #[test]
    fn each_extractor_names_the_fields_it_reads() {
        let x_forwarded_for = [HeaderName::from_static("x-forwarded-for")];
        assert_eq!(
            client_ip().headers_read(),
            HeadersRead::Only(&x_forwarded_for)
        );
        assert_eq!(
            client_ip()
                .header(ForwardedHeader::Forwarded)
                .headers_read(),
            HeadersRead::Only(&[FORWARDED])
        );
        for none in [
            PeerIp::new().headers_read(),
            PathKey.headers_read(),
            GlobalKey::new().headers_read(),
        ] {
            assert_eq!(none, HeadersRead::None);
        }
    }

    #[test]
    fn lent_keys_equal_extracted_keys() {
        let req = request(
            "10.0.0.2:5000",
            &[("x-forwarded-for", "198.51.100.7"), ("x-api-key", "k1")],
        );
        let parts = RequestParts::new(&req);
        fn same<K: KeyExtractor>(k: K, parts: RequestParts<'_>) {
            let lent = k.with_key(parts, |key| key.map(str::to_owned));
            assert_eq!(lent, k.extract(parts));
        }
        same(PeerIp::new(), parts);
        same(client_ip(), parts);
        same(HeaderKey::new(HeaderName::from_static("x-api-key")), parts);
        same(HeaderKey::new(HeaderName::from_static("x-none")), parts);
        same(PathKey, parts);
        same(GlobalKey::named("all"), parts);
        let no_peer = Request::new(());
        assert!(PeerIp::new().with_key(RequestParts::new(&no_peer), |k| k.is_none()));
    }

    #[test]
    fn header_path_global_and_closures() {
        let req = request("192.0.2.1:1", &[("x-api-key", "k1")]);
        let parts = RequestParts::new(&req);
        assert_eq!(
            HeaderKey::new(HeaderName::from_static("x-api-key"))
                .extract(parts)
                .as_deref(),
            Some("k1")
        );
        assert_eq!(
            HeaderKey::new(HeaderName::from_static("x-user")).extract(parts),
            None
        );
        assert_eq!(PathKey.extract(parts).as_deref(), Some("/orders/42"));
        assert_eq!(GlobalKey::new().extract(parts).as_deref(), Some("global"));
        let by_method = |p: RequestParts<'_>| Some(p.method.to_string());
        assert_eq!(by_method.extract(parts).as_deref(), Some("GET"));
    }
}
