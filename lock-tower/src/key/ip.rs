//! Keys by IP address: the TCP peer ([`PeerIp`]) and the client behind
//! trusted proxies ([`ClientIp`]).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use arrayvec::ArrayString;
use http::HeaderMap;
use http::header::{FORWARDED, HeaderName};
use ipnet::IpNet;

use super::{HeadersRead, KeyExtractor, RequestParts, TypedKey};

/// The key of an IP address, formatted on the stack: IPv6 addresses grouped
/// by prefix (one customer usually owns a whole /64), IPv4-mapped IPv6
/// addresses turned back into IPv4.
// The longest key is `ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128`.
struct IpKey(ArrayString<48>);

impl IpKey {
    fn new(ip: IpAddr, v6_prefix: u8) -> Self {
        let mut key = ArrayString::new();
        match (ipv4_of(ip), ip) {
            (Some(v4), _) => {
                // Dotted quad by hand: `Display` for `Ipv4Addr` goes through
                // the formatting machinery four times. At most 15 bytes, so
                // no push can fail.
                for (i, octet) in v4.octets().into_iter().enumerate() {
                    if i > 0 {
                        let _ = key.try_push('.');
                    }
                    push_decimal(&mut key, octet);
                }
            }
            (None, IpAddr::V6(v6)) => {
                let prefix = v6_prefix.min(128);
                let mask = if prefix == 0 {
                    0
                } else {
                    u128::MAX << (128 - u32::from(prefix))
                };
                // Not IPv4-mapped either: had the mask kept the first 96
                // bits, the address itself would have been mapped.
                push_v6(&mut key, Ipv6Addr::from(u128::from(v6) & mask));
                let _ = key.try_push('/');
                push_decimal(&mut key, prefix);
            }
            (None, IpAddr::V4(_)) => unreachable!("IPv4 is handled above"),
        }
        IpKey(key)
    }

    fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

/// The IPv4 address whose dotted quad is the key of `ip` ([`IpKey`]): `ip`
/// itself, or the address an IPv4-mapped IPv6 address maps.
#[inline(always)]
fn ipv4_of(ip: IpAddr) -> Option<Ipv4Addr> {
    match ip {
        IpAddr::V4(v4) => Some(v4),
        IpAddr::V6(v6) => v6.to_ipv4_mapped(),
    }
}

/// The dotted quad of `ip`, as `Display` writes it, without the formatting
/// machinery.
pub(super) fn ipv4_text(ip: Ipv4Addr) -> ArrayString<48> {
    IpKey::new(IpAddr::V4(ip), DEFAULT_V6_PREFIX).0
}

/// Calls `f` with the key of `ip`: the IPv4 address itself, or the IPv6
/// network of `v6_prefix` bits it belongs to, neither written out.
#[inline(always)]
fn typed<R>(ip: IpAddr, v6_prefix: u8, f: impl FnOnce(Option<TypedKey<'_>>) -> R) -> R {
    match (ipv4_of(ip), ip) {
        (Some(v4), _) => f(Some(TypedKey::Ipv4(v4))),
        (None, IpAddr::V6(address)) => f(Some(TypedKey::Ipv6Network {
            address,
            prefix: v6_prefix.min(128),
        })),
        (None, IpAddr::V4(_)) => unreachable!("IPv4 is handled above"),
    }
}

/// Writes `n` in decimal, as `Display` does.
fn push_decimal(key: &mut ArrayString<48>, n: u8) {
    let digit = |d: u8| char::from(b'0' + d);
    if n >= 100 {
        let _ = key.try_push(digit(n / 100));
    }
    if n >= 10 {
        let _ = key.try_push(digit(n / 10 % 10));
    }
    let _ = key.try_push(digit(n % 10));
}

/// Writes `v6` as `Display` for `Ipv6Addr` writes an address that is not
/// IPv4-mapped (RFC 5952): groups in lowercase hex without leading zeros,
/// and the first of the longest runs of two or more zero groups as `::`.
/// `Display` takes three times the instructions (about 1,380 against 470
/// for a /64 key). At most 39 bytes, so no push can fail.
fn push_v6(key: &mut ArrayString<48>, v6: Ipv6Addr) {
    let groups = v6.segments();
    // The first longest run of zero groups, as `start..end`.
    let (mut start, mut end, mut run_start) = (0, 0, 0);
    for (i, &group) in groups.iter().enumerate() {
        if group != 0 {
            run_start = i + 1;
        } else if i + 1 - run_start > end - start {
            (start, end) = (run_start, i + 1);
        }
    }
    let hex = |key: &mut ArrayString<48>, group: u16| {
        let digits = (16 - group.leading_zeros()).div_ceil(4).max(1);
        for shift in (0..digits).rev() {
            let nibble = (group >> (4 * shift)) & 0xf;
            let _ = key.try_push(char::from(b"0123456789abcdef"[usize::from(nibble)]));
        }
    };
    let push_all = |key: &mut ArrayString<48>, groups: &[u16]| {
        for (i, &group) in groups.iter().enumerate() {
            if i > 0 {
                let _ = key.try_push(':');
            }
            hex(key, group);
        }
    };
    if end - start > 1 {
        push_all(key, &groups[..start]);
        let _ = key.try_push_str("::");
        push_all(key, &groups[end..]);
    } else {
        push_all(key, &groups);
    }
}

/// The default IPv6 grouping prefix.
pub const DEFAULT_V6_PREFIX: u8 = 64;

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
    fn extract(&self, request: RequestParts<'_>) -> Option<String> {
        self.with_key(request, |key| key.map(str::to_owned))
    }

    fn with_key<R>(&self, request: RequestParts<'_>, f: impl FnOnce(Option<&str>) -> R) -> R {
        match request.peer_addr() {
            Some(peer) => f(Some(IpKey::new(peer.ip(), self.v6_prefix).as_str())),
            None => f(None),
        }
    }

    #[inline(always)]
    fn with_typed_key<R>(
        &self,
        request: RequestParts<'_>,
        f: impl FnOnce(Option<TypedKey<'_>>) -> R,
    ) -> R {
        match request.peer_addr() {
            Some(peer) => typed(peer.ip(), self.v6_prefix, f),
            None => f(None),
        }
    }

    fn headers_read(&self) -> HeadersRead<'_> {
        HeadersRead::None
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
/// use lock_tower::key::ClientIp;
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
    fn extract(&self, request: RequestParts<'_>) -> Option<String> {
        self.with_key(request, |key| key.map(str::to_owned))
    }

    fn with_key<R>(&self, request: RequestParts<'_>, f: impl FnOnce(Option<&str>) -> R) -> R {
        match self.client(request) {
            Some(ip) => f(Some(IpKey::new(ip, self.v6_prefix).as_str())),
            None => f(None),
        }
    }

    fn with_typed_key<R>(
        &self,
        request: RequestParts<'_>,
        f: impl FnOnce(Option<TypedKey<'_>>) -> R,
    ) -> R {
        match self.client(request) {
            Some(ip) => typed(ip, self.v6_prefix, f),
            None => f(None),
        }
    }

    fn headers_read(&self) -> HeadersRead<'_> {
        HeadersRead::Only(std::slice::from_ref(self.field()))
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

    /// An extractor's typed key is its text key, with an IPv4 address (or
    /// an IPv4-mapped one) as the address: the memory backend decides by
    /// either as one caller.
    #[test]
    fn typed_keys_agree_with_text_keys() {
        let cases = [
            ("192.0.2.1:1", vec![], Some("192.0.2.1")),
            ("[::ffff:192.0.2.1]:1", vec![], Some("192.0.2.1")),
            ("[2001:db8::1]:1", vec![], None),
            (
                "10.0.0.2:5000",
                vec![("x-forwarded-for", "6.6.6.6, 10.0.0.1")],
                Some("6.6.6.6"),
            ),
            (
                "10.0.0.2:5000",
                vec![("x-forwarded-for", "2001:db8::7")],
                None,
            ),
            (
                "10.0.0.2:5000",
                vec![("x-forwarded-for", "[::ffff:7.7.7.7]:80")],
                Some("7.7.7.7"),
            ),
            ("10.0.0.2:5000", vec![], Some("10.0.0.2")),
        ];
        fn check(key: &impl KeyExtractor, parts: RequestParts<'_>, v4: Option<&str>) {
            let text = key.extract(parts).expect("a key");
            key.with_typed_key(parts, |typed| match (typed, v4) {
                (Some(TypedKey::Ipv4(ip)), Some(v4)) => {
                    assert_eq!(ip, v4.parse::<Ipv4Addr>().unwrap());
                    assert_eq!(ip.to_string(), text);
                }
                (Some(typed @ TypedKey::Ipv6Network { .. }), None) => {
                    assert_eq!(typed.to_text(), text);
                }
                (typed, _) => panic!("{typed:?} for {text}, expected {v4:?}"),
            });
        }
        for (peer, headers, v4) in cases {
            let req = request(peer, &headers);
            let parts = RequestParts::new(&req);
            check(&client_ip(), parts, v4);
            if headers.is_empty() {
                check(&PeerIp::new(), parts, v4);
            }
        }
        let no_peer = Request::get("/").body(()).unwrap();
        let parts = RequestParts::new(&no_peer);
        assert!(PeerIp::new().with_typed_key(parts, |key| key.is_none()));
        assert!(client_ip().with_typed_key(parts, |key| key.is_none()));
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

    #[test]
    fn ip_keys_match_std_formatting() {
        let mut addresses: Vec<IpAddr> = ["0.0.0.0", "9.10.99.100", "255.255.255.255", "::"]
            .iter()
            .map(|a| a.parse().unwrap())
            .collect();
        for i in 0..=255u8 {
            addresses.push(IpAddr::from([i, i.wrapping_mul(7), 200, i / 3]));
        }
        for ip in addresses {
            let expected = match ip {
                IpAddr::V4(v4) => v4.to_string(),
                IpAddr::V6(_) => "::/64".to_owned(),
            };
            assert_eq!(IpKey::new(ip, 64).as_str(), expected);
        }
        let longest: IpAddr = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff".parse().unwrap();
        assert_eq!(
            IpKey::new(longest, 128).as_str(),
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128"
        );
    }

    /// The expected key of an IPv6 address that is not IPv4-mapped.
    fn std_v6_key(v6: Ipv6Addr, prefix: u8) -> String {
        let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
        format!("{}/{prefix}", Ipv6Addr::from(u128::from(v6) & mask))
    }

    #[test]
    fn ipv6_keys_match_std_formatting() {
        // Every pattern of zero and non-zero groups (which decides where
        // `::` goes), with groups of one to four hex digits.
        let values = [0x1, 0xa, 0x10, 0x1f, 0x100, 0xabc, 0x1000, 0xffff];
        for pattern in 0..=u8::MAX {
            for (v, _) in values.iter().enumerate() {
                let mut groups = [0u16; 8];
                for (i, group) in groups.iter_mut().enumerate() {
                    if pattern & (1 << i) != 0 {
                        *group = values[(v + i) % values.len()];
                    }
                }
                let v6 = Ipv6Addr::from(groups);
                if v6.to_ipv4_mapped().is_some() {
                    continue;
                }
                assert_eq!(
                    IpKey::new(IpAddr::V6(v6), 128).as_str(),
                    std_v6_key(v6, 128),
                    "{groups:x?}"
                );
            }
        }
        // Every prefix length, on addresses spread over the space.
        let mut x: u128 = 0x2001_0db8_85a3_0000_0000_8a2e_0370_7334;
        for _ in 0..64 {
            let v6 = Ipv6Addr::from(x);
            for prefix in 0..=128 {
                let expected = match v6.to_ipv4_mapped() {
                    Some(v4) => v4.to_string(),
                    None => std_v6_key(v6, prefix),
                };
                assert_eq!(IpKey::new(IpAddr::V6(v6), prefix).as_str(), expected);
            }
            x = x.wrapping_mul(0x2545_f491_4f6c_dd1d).rotate_left(29) ^ 0x9e37_79b9;
        }
        let mapped = IpAddr::V6("::ffff:10.1.2.3".parse().unwrap());
        assert_eq!(IpKey::new(mapped, 0).as_str(), "10.1.2.3");
    }
}
