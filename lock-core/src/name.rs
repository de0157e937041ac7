//! Key validation and naming.
//!
//! Every Redis key a primitive touches is built as `<prefix>{<name>}:<suffix>`.
//! The braces make `<name>` the Redis Cluster *hash tag*, so all keys of one
//! primitive instance live in the same slot and every script runs on a cluster.
//!
//! Names come from users (a lock per order id, a limit per IP address), so they
//! are validated once, when a [`Name`] is made: non-empty, at most
//! [`MAX_NAME_LEN`] bytes, no braces (they would break the hash tag) and no
//! control characters. Bad input is a typed [`Error::InvalidName`], never a panic.
//!
//! ```
//! # use lock_core as lock_axum; // lock_axum re-exports these modules as they are
//! use lock_axum::name::{KeySpace, Name};
//!
//! let keys = KeySpace::new("shop:").unwrap();
//! let name = Name::new("order:42").unwrap();
//! assert_eq!(keys.key(&name, "lock"), "shop:{order:42}:lock");
//! assert!(Name::new("").is_err());
//! assert!(Name::new("a{b}").is_err());
//! ```

use std::fmt;
use std::sync::Arc;

use crate::error::{Error, Result};

/// Longest accepted name, in bytes.
pub const MAX_NAME_LEN: usize = 512;
/// Longest accepted key prefix, in bytes.
pub const MAX_PREFIX_LEN: usize = 128;
/// The prefix used when none is configured.
pub const DEFAULT_PREFIX: &str = "lock:";

/// A validated, cheaply clonable user-supplied name.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Name(Arc<str>);

impl Name {
    /// Validates `name`.
    ///
    /// # Errors
    /// [`Error::InvalidName`] when the name is empty, longer than [`MAX_NAME_LEN`]
    /// bytes, or contains `{`, `}` or a control character.
    pub fn new(name: impl AsRef<str>) -> Result<Self> {
        let name = name.as_ref();
        if name.is_empty() {
            return Err(Error::invalid_name(name, "must not be empty"));
        }
        check_chars(name, MAX_NAME_LEN)?;
        Ok(Name(Arc::from(name)))
    }

    /// The name as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for Name {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl TryFrom<&str> for Name {
    type Error = Error;
    fn try_from(value: &str) -> Result<Self> {
        Name::new(value)
    }
}

impl TryFrom<String> for Name {
    type Error = Error;
    fn try_from(value: String) -> Result<Self> {
        Name::new(value)
    }
}

/// Checks that `s` is at most `max` bytes, with no braces or control
/// characters. Most names (addresses, ids, paths) are short printable
/// ASCII below `{`: they are accepted inline, where a rate limiter checks
/// a key on every decision; anything else takes the full check.
#[inline]
pub(crate) fn check_chars(s: &str, max: usize) -> Result<()> {
    if s.len() <= max && plain(s.as_bytes()) {
        return Ok(());
    }
    check_chars_fully(s, max)
}

#[cold]
fn check_chars_fully(s: &str, max: usize) -> Result<()> {
    if s.len() > max {
        return Err(Error::invalid_name(
            s,
            "must be at most 512 bytes (with its scope, for a rate-limit key)",
        ));
    }
    // One pass over the bytes. In UTF-8 the C0 controls and DEL are single
    // bytes, and the C1 controls (U+0080..=U+009F) are 0xC2 followed by
    // 0x80..=0x9F; 0xC2 is never a continuation byte, so this cannot
    // misread the middle of another character.
    let bytes = s.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'{' | b'}' => {
                return Err(Error::invalid_name(
                    s,
                    "must not contain `{` or `}` (they delimit the cluster hash tag)",
                ));
            }
            0..=0x1f | 0x7f => return Err(control(s)),
            0xc2 if matches!(bytes.get(i + 1), Some(0x80..=0x9f)) => return Err(control(s)),
            _ => {}
        }
    }
    Ok(())
}

/// Whether every byte is in `b' '..b'{'`, tested eight bytes at a time:
/// in a word, a byte below 0x20 gets its top bit set by subtracting 0x20 from
/// every byte, and a byte of 0x7b or more by adding 0x05 (or has it already).
/// A borrow or carry between bytes only starts at a byte that is flagged
/// itself, so the answer for the word as a whole is exact.
#[inline]
fn plain(bytes: &[u8]) -> bool {
    const ONES: u64 = u64::from_ne_bytes([1; 8]);
    const TOP: u64 = ONES << 7;
    let word = |x: u64| (x.wrapping_sub(0x20 * ONES) & !x) | x.wrapping_add(0x05 * ONES) | x;
    let mut chunks = bytes.chunks_exact(8);
    let mut flagged = 0;
    for chunk in &mut chunks {
        let mut eight = [0; 8];
        eight.copy_from_slice(chunk);
        flagged |= word(u64::from_le_bytes(eight));
    }
    flagged & TOP == 0 && chunks.remainder().iter().all(|b| (b' '..b'{').contains(b))
}

fn control(s: &str) -> Error {
    Error::invalid_name(s, "must not contain control characters")
}

/// A key prefix; builds the hash-tagged keys of every primitive.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct KeySpace {
    prefix: Arc<str>,
}

impl KeySpace {
    /// A key space with the given prefix (may be empty).
    ///
    /// # Errors
    /// [`Error::InvalidName`] when the prefix is longer than [`MAX_PREFIX_LEN`]
    /// bytes or contains braces or control characters.
    pub fn new(prefix: impl AsRef<str>) -> Result<Self> {
        let prefix = prefix.as_ref();
        check_chars(prefix, MAX_PREFIX_LEN)?;
        Ok(KeySpace {
            prefix: Arc::from(prefix),
        })
    }

    /// The prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// `<prefix>{<name>}:<suffix>`.
    pub fn key(&self, name: &Name, suffix: &str) -> String {
        let mut key =
            String::with_capacity(self.prefix.len() + name.as_str().len() + suffix.len() + 3);
        key.push_str(&self.prefix);
        key.push('{');
        key.push_str(name.as_str());
        key.push_str("}:");
        key.push_str(suffix);
        key
    }

    #[cfg(feature = "redis")]
    /// `<prefix>{<scope>:<name>}:<suffix>`: the key of a scoped name, built
    /// without making the scoped [`Name`] first. A `:` or `%` in the scope
    /// is written `%3A` or `%25`, so that the first `:` ends the scope:
    /// scope `api` with name `v2:alice` and scope `api:v2` with name
    /// `alice` are two keys, as they are two limits in memory.
    pub(crate) fn scoped_key(&self, scope: &str, name: &str, suffix: &str) -> String {
        let mut key =
            String::with_capacity(self.prefix.len() + scope.len() + name.len() + suffix.len() + 4);
        key.push_str(&self.prefix);
        key.push('{');
        if scope.bytes().any(|b| b == b':' || b == b'%') {
            for c in scope.chars() {
                match c {
                    ':' => key.push_str("%3A"),
                    '%' => key.push_str("%25"),
                    c => key.push(c),
                }
            }
        } else {
            key.push_str(scope);
        }
        key.push(':');
        key.push_str(name);
        key.push_str("}:");
        key.push_str(suffix);
        key
    }
}

impl Default for KeySpace {
    fn default() -> Self {
        KeySpace {
            prefix: Arc::from(DEFAULT_PREFIX),
        }
    }
}

impl fmt::Debug for KeySpace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("KeySpace").field(&&*self.prefix).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_bytes_are_found_eight_at_a_time() {
        // Every byte value at every position of words and tails, next to
        // the bytes at both edges of the range.
        for len in 1..=17 {
            for at in 0..len {
                for filler in [b' ', b'z', b'a'] {
                    for b in 0..=255u8 {
                        let mut bytes = vec![filler; len];
                        bytes[at] = b;
                        assert_eq!(
                            plain(&bytes),
                            (b' '..b'{').contains(&b),
                            "byte {b:#x} at {at} of {len}"
                        );
                    }
                }
            }
        }
        assert!(plain(b""));
    }

    #[test]
    fn rejects_bad_names() {
        for bad in ["", "{", "}", "a{b", "new\nline", "tab\t"] {
            assert!(
                matches!(Name::new(bad), Err(Error::InvalidName { .. })),
                "{bad:?} accepted"
            );
        }
        assert!(Name::new("x".repeat(MAX_NAME_LEN)).is_ok());
        assert!(matches!(
            Name::new("x".repeat(MAX_NAME_LEN + 1)),
            Err(Error::InvalidName { .. })
        ));
    }

    #[test]
    fn control_characters_are_found_at_any_width() {
        for bad in ["a\u{0}", "a\u{7f}", "a\u{85}b", "\u{9f}"] {
            assert!(Name::new(bad).is_err(), "{bad:?} accepted");
        }
        assert!(Name::new("\u{a0}\u{c2}\u{e9}\u{1f600}").is_ok());
    }

    #[test]
    fn accepts_unicode_and_punctuation() {
        let name = Name::new("user:Zoë/42 [a]").unwrap();
        assert_eq!(name.as_str(), "user:Zoë/42 [a]");
    }

    #[cfg(feature = "redis")]
    #[test]
    fn a_scope_ends_at_the_first_colon_of_its_key() {
        let ks = KeySpace::default();
        assert_eq!(
            ks.scoped_key("api", "v2:alice", "fw"),
            "lock:{api:v2:alice}:fw"
        );
        assert_eq!(
            ks.scoped_key("api:v2", "alice", "fw"),
            "lock:{api%3Av2:alice}:fw"
        );
        assert_eq!(ks.scoped_key("a%3Ab", "c", "fw"), "lock:{a%253Ab:c}:fw");
        assert_eq!(ks.scoped_key("Zoë:x", "c", "fw"), "lock:{Zoë%3Ax:c}:fw");
    }

    #[test]
    fn keys_share_the_hash_tag() {
        let ks = KeySpace::default();
        let n = Name::new("n").unwrap();
        assert_eq!(ks.key(&n, "lock"), "lock:{n}:lock");
        assert_eq!(ks.key(&n, "fence"), "lock:{n}:fence");
        assert!(KeySpace::new("").is_ok());
        assert!(KeySpace::new("a}").is_err());
        assert!(KeySpace::new("p".repeat(MAX_PREFIX_LEN + 1)).is_err());
    }
}
