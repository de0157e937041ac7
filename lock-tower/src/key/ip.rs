//! Keys by IP address: the TCP peer ([`PeerIp`]) and the client behind
//! trusted proxies ([`ClientIp`]).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use http::HeaderMap;
use http::header::{FORWARDED, HeaderName};
use ipnet::IpNet;
use lock_core::rate::{Caller, DEFAULT_V6_PREFIX};

use super::{HeadersRead, KeyExtractor, Missing, RequestParts, no_peer_address};

/// The TCP peer's IP address. Behind a reverse proxy every request comes from
/// the proxy: use [`ClientIp`] there.
#[derive(Debug, Clone, Copy)]
pub struct PeerIp {
    v6_prefix: u8,
}

impl Default for PeerIp {
    fn default() -> Self {
        PeerIp {
            v6_prefix: DEFAULT_V6_PREFIX,
        }
    }
}

impl PeerIp {
    /// IPv6 grouped by /64.
    pub fn new() -> Self {
        Self::default()
    }

    /// Groups IPv6 addresses by `prefix` bits (128 = one key per address).
    pub fn ipv6_prefix(mut self, prefix: u8) -> Self {
        self.v6_prefix = prefix.min(128);
        self
    }
}

impl KeyExtractor for PeerIp {
    fn missing(&self, _request: RequestParts<'_>) -> Missing {
        no_peer_address()
    }

    fn extract(&self, request: RequestParts<'_>) -> Option<String> {
        let peer = request.peer_addr()?;
        Some(Caller::ip(peer.ip(), self.v6_prefix).to_string())
    }

    fn with_caller<R>(
        &self,
        request: RequestParts<'_>,
        f: impl FnOnce(Option<Caller<'_>>) -> R,
    ) -> R {
        f(request
            .peer_addr()
            .map(|peer| Caller::ip(peer.ip(), self.v6_prefix)))
    }

    fn headers_read(&self) -> HeadersRead<'_> {
        HeadersRead::None
    }

    fn reads_route(&self) -> bool {
        false
    }
}

/// Which header a [`ClientIp`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ForwardedHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2`.
    #[default]
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=client, for="[2001:db8::1]:4711"`.
    Forwarded,
}

/// The client's IP address behind trusted reverse proxies.
///
/// If the TCP peer is not a trusted proxy, its address is the key (so a
/// client cannot pick its own key with a forged header). If it is, the
/// forwarding header is read from the right: the first address that is not a
/// trusted proxy is the client. IPv6 addresses are grouped by prefix.
///
/// ```
/// use lock_axum::key::ClientIp;
/// let key = ClientIp::new(["10.0.0.0/8".parse().unwrap(), "::1/128".parse().unwrap()]);
/// ```
#[derive(Debug, Clone)]
pub struct ClientIp {
    trusted: Arc<[IpNet]>,
    header: ForwardedHeader,
    v6_prefix: u8,
}

impl ClientIp {
    /// Trusts proxies in `trusted` and reads `X-Forwarded-For`.
    pub fn new(trusted: impl IntoIterator<Item = IpNet>) -> Self {
        ClientIp {
            trusted: trusted.into_iter().collect(),
            header: ForwardedHeader::default(),
            v6_prefix: DEFAULT_V6_PREFIX,
        }
    }

    /// Reads `header` instead.
    pub fn header(mut self, header: ForwardedHeader) -> Self {
        self.header = header;
        self
    }

    /// Groups IPv6 addresses by `prefix` bits (default 64).
    pub fn ipv6_prefix(mut self, prefix: u8) -> Self {
        self.v6_prefix = prefix.min(128);
        self
    }

    fn is_trusted(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        self.trusted.iter().any(|net| net.contains(&ip))
    }

    /// The forwarding field read.
    fn field(&self) -> &'static HeaderName {
        static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
        static FORWARDED_FIELD: HeaderName = FORWARDED;
        match self.header {
            ForwardedHeader::XForwardedFor => &X_FORWARDED_FOR,
            ForwardedHeader::Forwarded => &FORWARDED_FIELD,
        }
    }

    /// The hops in the forwarding field, right (last proxy) to left
    /// (client), across repeated fields; an unreadable field value is one
    /// empty hop.
    fn hops_from_right<'h>(&self, headers: &'h HeaderMap) -> impl Iterator<Item = &'h str> {
        let header = self.header;
        headers
            .get_all(self.field())
            .iter()
            .rev()
            .flat_map(|value| value.to_str().unwrap_or("").rsplit(','))
            .map(move |element| match header {
                ForwardedHeader::XForwardedFor => element.trim(),
                ForwardedHeader::Forwarded => element
                    .split(';')
                    .filter_map(|pair| pair.trim().split_once('='))
                    .find(|(k, _)| k.trim().eq_ignore_ascii_case("for"))
                    .map(|(_, v)| v.trim().trim_matches('"'))
                    .unwrap_or_default(),
            })
    }
}

/// Parses `1.2.3.4`, `1.2.3.4:80`, `2001:db8::1`, `[2001:db8::1]:80`.
fn parse_hop(hop: &str) -> Option<IpAddr> {
    if let Ok(ip) = hop.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Ok(addr) = hop.parse::<SocketAddr>() {
        return Some(addr.ip());
    }
    hop.strip_prefix('[')
        .and_then(|rest| rest.split_once(']'))
        .and_then(|(ip, _)| ip.parse().ok())
}

impl ClientIp {
    fn client(&self, request: RequestParts<'_>) -> Option<IpAddr> {
        let peer = request.peer_addr()?.ip();
        if !self.is_trusted(peer) {
            return Some(peer);
        }
        let mut client = peer;
        for hop in self.hops_from_right(request.headers) {
            // An unreadable hop cannot be trusted to be a proxy: stop at the
            // last address we could read.
            let Some(ip) = parse_hop(hop) else { break };
            client = ip;
            if !self.is_trusted(ip) {
                break;
            }
        }
        Some(client)
    }
}

impl KeyExtractor for ClientIp {
    fn missing(&self, _request: RequestParts<'_>) -> Missing {
        no_peer_address()
    }

    fn extract(&self, request: RequestParts<'_>) -> Option<String> {
        let client = self.client(request)?;
        Some(Caller::ip(client, self.v6_prefix).to_string())
    }

    fn with_caller<R>(
        &self,
        request: RequestParts<'_>,
        f: impl FnOnce(Option<Caller<'_>>) -> R,
    ) -> R {
        f(self
            .client(request)
            .map(|ip| Caller::ip(ip, self.v6_prefix)))
    }

    fn headers_read(&self) -> HeadersRead<'_> {
        HeadersRead::Only(std::slice::from_ref(self.field()))
    }

    fn reads_route(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use http::Request;

    use super::super::tests::{client_ip, request};
    use super::*;
    #[test]
    fn untrusted_peer_cannot_choose_its_key() {
        let req = request("203.0.113.9:5000", &[("x-forwarded-for", "1.2.3.4")]);
        assert_eq!(
            client_ip().extract(RequestParts::new(&req)).as_deref(),
            Some("203.0.113.9")
        );
    }

    #[test]
    fn rightmost_untrusted_hop_is_the_client() {
        let req = request(
            "10.0.0.2:5000",
            &[("x-forwarded-for", "6.6.6.6, 198.51.100.7, 10.0.0.1")],
        );
        assert_eq!(
            client_ip().extract(RequestParts::new(&req)).as_deref(),
            Some("198.51.100.7")
        );
    }

    #[test]
    fn several_headers_and_forwarded_syntax() {
        let req = request(
            "10.0.0.2:5000",
            &[
                ("forwarded", "for=6.6.6.6"),
                (
                    "forwarded",
                    "for=\"[2001:db8:1:2::9]:4711\";proto=https, for=10.1.1.1",
                ),
            ],
        );
        let key = client_ip().header(ForwardedHeader::Forwarded);
        assert_eq!(
            key.extract(RequestParts::new(&req)).as_deref(),
            Some("2001:db8:1:2::/64")
        );
    }

    #[test]
    fn all_trusted_falls_back_to_leftmost_and_garbage_stops() {
        let req = request(
            "10.0.0.2:5000",
            &[("x-forwarded-for", "10.9.9.9, 10.0.0.1")],
        );
        assert_eq!(
            client_ip().extract(RequestParts::new(&req)).as_deref(),
            Some("10.9.9.9")
        );
        let req = request(
            "10.0.0.2:5000",
            &[("x-forwarded-for", "6.6.6.6, garbage, 10.0.0.1")],
        );
        assert_eq!(
            client_ip().extract(RequestParts::new(&req)).as_deref(),
            Some("10.0.0.1")
        );
        // A field value that is not text stops the walk the same way.
        let mut req = request("10.0.0.2:5000", &[("x-forwarded-for", "6.6.6.6")]);
        req.headers_mut().append(
            "x-forwarded-for",
            http::HeaderValue::from_bytes(b"\xff").unwrap(),
        );
        req.headers_mut().append(
            "x-forwarded-for",
            http::HeaderValue::from_static("10.0.0.1"),
        );
        assert_eq!(
            client_ip().extract(RequestParts::new(&req)).as_deref(),
            Some("10.0.0.1")
        );
    }

    /// An extractor's caller is its text key's caller: an IPv4 address
    /// (or an IPv4-mapped one) as the address, an IPv6 address's network.
    #[test]
    fn callers_agree_with_text_keys() {
        let cases = [
            ("192.0.2.1:1", vec![]),
            ("[::ffff:192.0.2.1]:1", vec![]),
            ("[2001:db8::1]:1", vec![]),
            (
                "10.0.0.2:5000",
                vec![("x-forwarded-for", "6.6.6.6, 10.0.0.1")],
            ),
            ("10.0.0.2:5000", vec![("x-forwarded-for", "2001:db8::7")]),
            (
                "10.0.0.2:5000",
                vec![("x-forwarded-for", "[::ffff:7.7.7.7]:80")],
            ),
            ("10.0.0.2:5000", vec![]),
        ];
        fn check(key: &impl KeyExtractor, parts: RequestParts<'_>) {
            let text = key.extract(parts).expect("a key");
            key.with_caller(parts, |caller| {
                let caller = caller.expect("a caller");
                assert!(!matches!(caller, Caller::Text(_)), "{caller:?}");
                assert_eq!(caller, Caller::parse(&text));
                assert_eq!(caller.to_string(), text);
            });
        }
        for (peer, headers) in cases {
            let req = request(peer, &headers);
            let parts = RequestParts::new(&req);
            check(&client_ip(), parts);
            if headers.is_empty() {
                check(&PeerIp::new(), parts);
            }
        }
        let no_peer = Request::get("/").body(()).unwrap();
        let parts = RequestParts::new(&no_peer);
        assert!(PeerIp::new().with_caller(parts, |key| key.is_none()));
        assert!(client_ip().with_caller(parts, |key| key.is_none()));
    }

    #[test]
    fn ipv6_is_grouped_by_prefix() {
        let a = request("[2001:db8:aa:bb:1::1]:1", &[]);
        let b = request("[2001:db8:aa:bb:ffff::2]:1", &[]);
        let c = request("[2001:db8:aa:cc::1]:1", &[]);
        let key = |r: &Request<()>| PeerIp::new().extract(RequestParts::new(r));
        assert_eq!(key(&a), key(&b));
        assert_ne!(key(&a), key(&c));
        let full = PeerIp::new().ipv6_prefix(128);
        assert_ne!(
            full.extract(RequestParts::new(&a)),
            full.extract(RequestParts::new(&b))
        );
        let mapped = request("[::ffff:192.0.2.1]:1", &[]);
        assert_eq!(key(&mapped).as_deref(), Some("192.0.2.1"));
    }
}
