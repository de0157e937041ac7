//! Who a decision is about: an IP address, an IPv6 network, or any other
//! key. The one definition of a caller's key, shared by the backends (Redis
//! writes it out; memory holds an address as it is) and by tower's key
//! extractors.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use arrayvec::ArrayString;
use compact_str::CompactString;

use crate::error::{Error, Result};
use crate::name::{MAX_NAME_LEN, check_chars};

/// How many leading bits of an IPv6 address make one caller by default: one
/// customer usually holds a whole /64.
pub const DEFAULT_V6_PREFIX: u8 = 64;

/// The caller a rate-limit decision is about. Its key is text: an IPv4
/// address's dotted quad (`192.0.2.7`), an IPv6 network's address and
/// prefix (`2001:db8:1:2::/64`), or the text itself. A text key that is
/// written exactly as one of those is that address or network
/// ([`Caller::parse`], which `From<&str>` uses), so a limit keyed by an
/// address and one keyed by its text are one limit.
///
/// ```
/// # use lock_core as lock_axum; // lock_axum re-exports these modules as they are
/// use std::net::IpAddr;
/// use lock_axum::rate::Caller;
///
/// let ip: IpAddr = "2001:db8:1:2:aaaa::7".parse().unwrap();
/// assert_eq!(Caller::from(ip).to_string(), "2001:db8:1:2::/64");
/// assert_eq!(Caller::from("2001:db8:1:2::/64"), Caller::from(ip));
/// assert_eq!(Caller::from("user:42"), Caller::Text("user:42"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Caller<'a> {
    /// An IPv4 address (an IPv4-mapped IPv6 address counts as its IPv4
    /// address).
    Ipv4(Ipv4Addr),
    /// An IPv6 network: no bits set past the prefix (see
    /// [`Caller::ipv6_network`]).
    Ipv6 {
        /// The network's address.
        network: Ipv6Addr,
        /// The prefix length, at most 128.
        prefix: u8,
    },
    /// Any other key (a user id, an API key, a route).
    Text(&'a str),
}

impl<'a> Caller<'a> {
    /// The caller of `ip`: an IPv4 address as it is, an IPv6 address's
    /// network of `v6_prefix` bits (above 128 counts as 128).
    #[inline]
    pub fn ip(ip: IpAddr, v6_prefix: u8) -> Self {
        match ip {
            IpAddr::V4(v4) => Caller::Ipv4(v4),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Caller::Ipv4(v4),
                None => Self::ipv6_network(v6, v6_prefix),
            },
        }
    }

    /// The IPv6 network of `address` with `prefix` bits (above 128 counts
    /// as 128): the bits past the prefix are cleared.
    pub fn ipv6_network(address: Ipv6Addr, prefix: u8) -> Self {
        let prefix = prefix.min(128);
        let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
        Caller::Ipv6 {
            network: Ipv6Addr::from(u128::from(address) & mask),
            prefix,
        }
    }

    /// The caller a text key names: an IPv4 address when `key` is written
    /// as [`Ipv4Addr`]'s `Display` writes one, an IPv6 network when it is
    /// written as `<network>/<prefix>` with the network as [`Ipv6Addr`]'s
    /// `Display` writes it, no bits set past the prefix and the prefix in
    /// plain decimal; the text otherwise. Every address and network is
    /// written one way, and only that way parses here, so a caller and its
    /// text are one caller.
    pub fn parse(key: &'a str) -> Self {
        // Most keys that are not addresses are told apart by their length.
        if (7..=15).contains(&key.len())
            && let Some(v4) = parse_dotted_quad(key.as_bytes())
        {
            return Caller::Ipv4(Ipv4Addr::from(v4));
        }
        if (4..=LONGEST_V6_KEY).contains(&key.len())
            && let Some((network, prefix)) = parse_v6_network(key)
        {
            return Caller::Ipv6 { network, prefix };
        }
        Caller::Text(key)
    }

    /// The key written out, on the stack when it is an address.
    pub(crate) fn write<R>(self, f: impl FnOnce(&str) -> R) -> R {
        match self {
            Caller::Text(text) => f(text),
            ip => {
                let mut key = ArrayString::<LONGEST_V6_KEY>::new();
                // An address's key always fits.
                let _ = fmt::write(&mut key, format_args!("{ip}"));
                f(&key)
            }
        }
    }

    /// Checks that the key may be used under `scope` (see
    /// [`RateLimiter`](super::RateLimiter)): not empty, `<scope>:<key>` at
    /// most [`MAX_NAME_LEN`] bytes, no braces, no control characters.
    pub(crate) fn validate(self, scope_len: usize) -> Result<()> {
        let room = MAX_NAME_LEN.saturating_sub(scope_len + 1);
        match self {
            Caller::Text("") => Err(Error::invalid_name("", "must not be empty")),
            Caller::Text(text) => check_chars(text, room),
            // Short enough for most scopes without writing it out.
            _ if address_keys_fit(scope_len) => Ok(()),
            ip => ip.write(|key| check_chars(key, room)),
        }
    }

    /// Whether this is a text key, the only kind [`validate`](Self::validate)
    /// can refuse under a scope where [`address_keys_fit`].
    pub(crate) fn is_text(self) -> bool {
        matches!(self, Caller::Text(_))
    }

    /// The key as the in-memory backend stores it.
    #[inline]
    pub(crate) fn to_key(self) -> CallerKey {
        match self {
            Caller::Ipv4(v4) => CallerKey::V4(u32::from(v4)),
            Caller::Ipv6 { network, prefix } => CallerKey::V6(network.octets(), prefix),
            Caller::Text(text) => CallerKey::Text(CompactString::new(text)),
        }
    }
}

impl fmt::Display for Caller<'_> {
    /// The key: `192.0.2.7`, `2001:db8:1:2::/64`, or the text.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Caller::Ipv4(v4) => write!(f, "{v4}"),
            Caller::Ipv6 { network, prefix } => write!(f, "{network}/{prefix}"),
            Caller::Text(text) => f.write_str(text),
        }
    }
}

impl<'a> From<&'a str> for Caller<'a> {
    /// [`Caller::parse`].
    fn from(key: &'a str) -> Self {
        Caller::parse(key)
    }
}

impl<'a> From<&'a String> for Caller<'a> {
    /// [`Caller::parse`].
    fn from(key: &'a String) -> Self {
        Caller::parse(key)
    }
}

impl From<IpAddr> for Caller<'_> {
    /// [`Caller::ip`] with the [`DEFAULT_V6_PREFIX`].
    fn from(ip: IpAddr) -> Self {
        Caller::ip(ip, DEFAULT_V6_PREFIX)
    }
}

impl From<Ipv4Addr> for Caller<'_> {
    fn from(ip: Ipv4Addr) -> Self {
        Caller::Ipv4(ip)
    }
}

/// A caller's key as the in-memory backend stores it: an address as its
/// bits, text inline up to 24 bytes (so a new caller's entry usually
/// allocates nothing of its own).
///
/// An IPv6 network is its bytes rather than a `u128`: a `u128` would
/// align the key, and every entry holding one, to 16 bytes, and make a
/// GCRA entry (key and state) 48 bytes where 32 hold it. Entries are what
/// a decision reads from memory, so fewer bytes each is fewer cache lines
/// for the same callers.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum CallerKey {
    V4(u32),
    /// The network's bytes, and its prefix length.
    V6([u8; 16], u8),
    Text(CompactString),
}

impl CallerKey {
    /// The caller this key is.
    #[inline]
    pub(crate) fn caller(&self) -> Caller<'_> {
        match self {
            CallerKey::V4(v4) => Caller::Ipv4(Ipv4Addr::from(*v4)),
            CallerKey::V6(network, prefix) => Caller::Ipv6 {
                network: Ipv6Addr::from(*network),
                prefix: *prefix,
            },
            CallerKey::Text(text) => Caller::Text(text.as_str()),
        }
    }
}

// The text's spare byte says which kind of key it is: no tag of its own.
const _: () = assert!(std::mem::size_of::<CallerKey>() <= 24);

/// The longest key of an address: `ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128`.
const LONGEST_V6_KEY: usize = 43;

/// Whether every address key fits under a scope of `scope_len` bytes.
pub(crate) fn address_keys_fit(scope_len: usize) -> bool {
    MAX_NAME_LEN.saturating_sub(scope_len + 1) >= LONGEST_V6_KEY
}

/// The first 128 bits and the prefix of the IPv6 network `text` names, if it
/// is written as [`Caller::parse`] says.
fn parse_v6_network(text: &str) -> Option<(Ipv6Addr, u8)> {
    let (address, prefix_text) = text.split_once('/')?;
    // `u8`'s parse also takes a sign and leading zeros.
    let canonical_prefix = !prefix_text.starts_with(['+', '0']) || prefix_text == "0";
    let prefix: u8 = prefix_text.parse().ok().filter(|_| canonical_prefix)?;
    let network: Ipv6Addr = address.parse().ok()?;
    let host_bits = u128::MAX.checked_shr(u32::from(prefix)).unwrap_or(0);
    if prefix > 128 || u128::from(network) & host_bits != 0 {
        return None;
    }
    let mut written = ArrayString::<LONGEST_V6_KEY>::new();
    fmt::write(&mut written, format_args!("{network}")).ok()?;
    (written.as_str() == address).then_some((network, prefix))
}

/// The address `text` names if it is written as `Display` for [`Ipv4Addr`]
/// writes one: four decimal octets of at most 255, without leading zeros,
/// separated by dots. Anything else (leading zeros, a port, spaces) is not
/// an address here, as it is not for `Ipv4Addr`'s `FromStr`.
fn parse_dotted_quad(text: &[u8]) -> Option<u32> {
    let (mut address, mut i) = (0u32, 0);
    for octet in 0..4 {
        if octet > 0 {
            if text.get(i) != Some(&b'.') {
                return None;
            }
            i += 1;
        }
        let start = i;
        let mut value = 0u32;
        while let Some(digit) = text.get(i).filter(|b| b.is_ascii_digit()) {
            if i - start == 3 {
                return None;
            }
            value = value * 10 + u32::from(digit - b'0');
            i += 1;
        }
        let digits = i - start;
        if digits == 0 || (digits > 1 && text[start] == b'0') || value > 255 {
            return None;
        }
        address = address << 8 | value;
    }
    (i == text.len()).then_some(address)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Exactly the texts `Ipv4Addr` parses are addresses here, with the
    /// same address, and each is the text the address displays as.
    #[test]
    fn dotted_quads_are_the_texts_addresses_display_as() {
        let agrees = |text: &str| {
            let std = text.parse::<Ipv4Addr>().ok();
            let expected = std.map_or(Caller::Text(text), Caller::Ipv4);
            assert_eq!(Caller::parse(text), expected, "{text:?}");
            if let Some(ip) = std {
                assert_eq!(ip.to_string(), text);
            }
        };
        let mut x: u32 = 0x9e37_79b9;
        for i in 0..=255u8 {
            for ip in [
                [i, 0, 0, 0],
                [0, i, 9, 10],
                [99, 100, i, 255],
                [255, 1, 10, i],
            ] {
                agrees(&Ipv4Addr::from(ip).to_string());
            }
            x = x.wrapping_mul(0x2c1b_3c6d).rotate_left(13) ^ u32::from(i);
            agrees(&Ipv4Addr::from(x).to_string());
        }
        for text in [
            "",
            "1.2.3",
            "1.2.3.4.",
            ".1.2.3.4",
            "1..2.3",
            "01.2.3.4",
            "1.2.3.04",
            "00.0.0.0",
            "1.2.3.256",
            "256.0.0.0",
            "1.2.3.4:80",
            " 1.2.3.4",
            "1.2.3.4 ",
            "+1.2.3.4",
            "1.2.3.-4",
            "1,2.3.4",
            "0.0.0.0",
            "255.255.255.255",
            "1.2.3.4a",
            "1111.2.3.4",
            "127.000.0.1",
            "0x7f.0.0.1",
        ] {
            agrees(text);
        }
        // Random near misses: runs of digits joined by dots.
        const ALPHABET: &[u8] = b"00123456789255:a";
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x
        };
        for _ in 0..100_000 {
            let parts = 3 + next() % 3;
            let text: Vec<String> = (0..parts)
                .map(|_| {
                    let len = 1 + next() % 4;
                    (0..len)
                        .map(|_| char::from(ALPHABET[next() as usize % ALPHABET.len()]))
                        .collect()
                })
                .collect();
            agrees(&text.join("."));
        }
    }

    /// A network and its text are one caller; other ways of writing it are
    /// text.
    #[test]
    fn ipv6_networks_are_the_texts_networks_display_as() {
        let mut x: u128 = 0x2001_0db8_85a3_0042_1234_5678_9abc_def0;
        for round in 0..2000u32 {
            for prefix in [0, 1, 17, 48, 63, 64, 65, 96, 112, 127, 128] {
                let caller = Caller::ipv6_network(Ipv6Addr::from(x), prefix);
                let text = caller.to_string();
                assert_eq!(Caller::parse(&text), caller, "{text:?}");
                caller.write(|written| assert_eq!(written, text));
            }
            x = x.rotate_left(7) ^ u128::from(round).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
        for text in [
            "2001:DB8::/64",
            "2001:0db8::/64",
            "2001:db8:0:0::/64",
            "2001:db8::0/64",
            "2001:db8::/064",
            "2001:db8::/+64",
            "2001:db8::/129",
            "2001:db8::1/64",
            "2001:db8::/16",
            "2001:db8::/",
            "/64",
            "::/00",
            " ::/64",
            "user/64",
            "a:b/c",
        ] {
            assert_eq!(Caller::parse(text), Caller::Text(text), "{text:?}");
        }
    }

    #[test]
    fn addresses_group_by_prefix_and_mapped_ones_are_ipv4() {
        let v6: IpAddr = "2001:db8:1:2:aaaa::7".parse().unwrap();
        assert_eq!(Caller::from(v6).to_string(), "2001:db8:1:2::/64");
        assert_eq!(Caller::ip(v6, 48).to_string(), "2001:db8:1::/48");
        assert_eq!(Caller::ip(v6, 200).to_string(), "2001:db8:1:2:aaaa::7/128");
        let mapped: IpAddr = "::ffff:192.0.2.7".parse().unwrap();
        assert_eq!(
            Caller::from(mapped),
            Caller::Ipv4(Ipv4Addr::new(192, 0, 2, 7))
        );
    }

    #[test]
    fn keys_are_validated_like_scoped_names() {
        let scope = 3; // "api"
        let longest = "k".repeat(MAX_NAME_LEN - 4);
        assert!(Caller::Text(&longest).validate(scope).is_ok());
        let too_long = "k".repeat(MAX_NAME_LEN - 3);
        assert!(Caller::Text(&too_long).validate(scope).is_err());
        for bad in ["", "a{b", "}", "tab\t", "del\u{7f}", "c1\u{85}x"] {
            assert!(
                Caller::Text(bad).validate(scope).is_err(),
                "{bad:?} accepted"
            );
        }
        // An address's key is checked against the room a long scope leaves.
        let ip = Caller::Ipv4(Ipv4Addr::new(1, 2, 3, 40));
        assert!(ip.validate(MAX_NAME_LEN - 8).is_err());
        assert!(ip.validate(MAX_NAME_LEN - 9).is_ok());
    }
}
