//! Rate limiting: fixed window, sliding window and GCRA, on Redis and in memory.
//!
//! A [`RateLimiter`] checks a key (an IP address, a user id, a route) against a
//! [`Policy`]: an [`Algorithm`] and one or more [`Quota`]s, all checked in one
//! atomic call (one `EVALSHA` on Redis). A call is allowed only if every quota
//! allows it, and a refused call consumes nothing from any quota. Each call
//! has a cost (default 1; 0 just looks).
//!
//! The answer is a [`Decision`] value, never an error: an error means bad input
//! or a backend that failed.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> lock_core::Result<()> {
//! use std::num::NonZeroU32;
//! use lock_core::backend::MemoryBackend;
//! use lock_core::rate::{Algorithm, Policy, Quota, RateLimiter};
//!
//! let policy = Policy::new(Algorithm::Gcra)
//!     .quota(Quota::per_second(NonZeroU32::new(2).unwrap()));
//! let limiter = RateLimiter::new(MemoryBackend::new(), "api", policy)?;
//!
//! assert!(limiter.check("10.0.0.1").await?.allowed);
//! assert!(limiter.check("10.0.0.1").await?.allowed);
//! let third = limiter.check("10.0.0.1").await?;
//! assert!(!third.allowed);
//! assert!(third.retry_after > std::time::Duration::ZERO);
//! assert!(limiter.check("10.0.0.2").await?.allowed); // keys are independent
//! # Ok(()) }
//! ```

pub(crate) mod memory;
mod quota;
mod redis;

use std::future::Future;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::time::Duration;

pub use self::quota::{Algorithm, MAX_PERIOD, MAX_QUOTAS, Policy, Quota};
use crate::error::{Error, Result};
use crate::key::{MAX_NAME_LEN, Name, check_chars};

/// The answer to "may this go ahead?".
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Decision {
    /// Whether the call was allowed (and its cost consumed).
    pub allowed: bool,
    /// The limit of the deciding quota.
    pub limit: u32,
    /// Cost still available under the deciding quota right now.
    pub remaining: u32,
    /// Time until the deciding quota is fully available again.
    pub reset_after: Duration,
    /// When refused: wait at least this long before the same call can be
    /// allowed (if nobody else consumes meanwhile). Zero when allowed.
    pub retry_after: Duration,
    /// The deciding quota: the one that refused (the one with the longest
    /// wait, if several did), or when allowed the one with the least remaining.
    pub quota: Quota,
    /// The deciding quota's position in the policy.
    pub quota_index: usize,
}

/// What one decision is about: a limiter's scope and a caller's key (an IP
/// address, a user id), both validated. Backends store the pair as
/// `<scope>:<key>`, so it is limited like a [`Name`]: at most
/// [`MAX_NAME_LEN`] bytes in all, no braces, no control characters.
///
/// ```
/// use lock_core::key::Name;
/// use lock_core::rate::RateKey;
///
/// let scope = Name::new("api").unwrap();
/// let key = RateKey::new(&scope, "10.0.0.1").unwrap();
/// assert_eq!((key.scope().as_str(), key.key()), ("api", "10.0.0.1"));
/// assert!(RateKey::new(&scope, "").is_err());
/// assert!(RateKey::new(&scope, "a{b}").is_err());
/// ```
#[derive(Debug, Clone, Copy)]
pub struct RateKey<'a> {
    scope: &'a Name,
    key: &'a str,
}

impl<'a> RateKey<'a> {
    /// Validates `key` under `scope`, without allocating.
    ///
    /// # Errors
    /// [`Error::InvalidName`] when `key` is empty, when `<scope>:<key>` is
    /// longer than [`MAX_NAME_LEN`] bytes, or when `key` contains `{`, `}`
    /// or a control character.
    #[inline]
    pub fn new(scope: &'a Name, key: &'a str) -> Result<Self> {
        if key.is_empty() {
            return Err(Error::invalid_name(key, "must not be empty"));
        }
        let room = MAX_NAME_LEN.saturating_sub(scope.as_str().len() + 1);
        check_chars(key, room)?;
        Ok(RateKey { scope, key })
    }

    /// The limiter's scope.
    pub fn scope(&self) -> &'a Name {
        self.scope
    }

    /// The caller's key.
    pub fn key(&self) -> &'a str {
        self.key
    }
}

/// A store that can run rate-limit decisions. Implemented by
/// [`RedisBackend`](crate::backend::RedisBackend) and
/// [`MemoryBackend`](crate::backend::MemoryBackend).
pub trait RateBackend: Clone + Send + Sync + 'static {
    /// Checks `key` against every quota of `policy` at once, consuming `cost`
    /// from all of them only if all allow it. `policy` is valid and `cost` is
    /// at most its smallest limit.
    fn check(
        &self,
        key: RateKey<'_>,
        policy: &Policy,
        cost: u32,
    ) -> impl Future<Output = Result<Decision>> + Send;

    /// Decides at once when the backend can do so without waiting (the
    /// in-memory backend); `None` otherwise (the default). Lets middleware
    /// skip the asynchronous machinery on the hot path.
    fn check_now(&self, key: RateKey<'_>, policy: &Policy, cost: u32) -> Option<Result<Decision>> {
        let _ = (key, policy, cost);
        None
    }

    /// As [`check_now`](Self::check_now) for the key that is `ip`'s dotted
    /// quad (`ip.to_string()`) under `scope`, for a backend that can hold
    /// an address without writing it out (the in-memory backend); `None`
    /// otherwise (the default). It must decide exactly as `check_now`
    /// would for that key: the same state, the same decision. `scope` and
    /// the key together fit in [`MAX_NAME_LEN`] bytes.
    fn check_ipv4_now(
        &self,
        scope: &Name,
        ip: Ipv4Addr,
        policy: &Policy,
        cost: u32,
    ) -> Option<Result<Decision>> {
        let _ = (scope, ip, policy, cost);
        None
    }

    /// As [`check_now`](Self::check_now) for the key that is the IPv6
    /// network's text, `<network>/<prefix>` (`2001:db8:1:2::/64`), under
    /// `scope`, for a backend that can hold a network without writing it out
    /// (the in-memory backend); `None` otherwise (the default). It must
    /// decide exactly as `check_now` would for that key. `prefix` is at most
    /// 64, `network` has no bits set past it, and `scope` and the key
    /// together fit in [`MAX_NAME_LEN`] bytes.
    fn check_ipv6_network_now(
        &self,
        scope: &Name,
        network: Ipv6Addr,
        prefix: u8,
        policy: &Policy,
        cost: u32,
    ) -> Option<Result<Decision>> {
        let _ = (scope, network, prefix, policy, cost);
        None
    }

    /// As [`check_ipv6_network_now`](Self::check_ipv6_network_now) for
    /// `limiter`'s scope and policy, as
    /// [`admit_ipv4_now`](Self::admit_ipv4_now) is to `check_ipv4_now`. The
    /// default forwards to `check_ipv6_network_now`.
    fn admit_ipv6_network_now(
        limiter: &RateLimiter<Self>,
        network: Ipv6Addr,
        prefix: u8,
        cost: u32,
        figures: bool,
    ) -> Option<Result<Admission>> {
        let _ = figures;
        limiter
            .backend
            .check_ipv6_network_now(&limiter.scope, network, prefix, &limiter.policy, cost)
            .map(|decided| decided.map(Admission::Decided))
    }

    /// As [`check_ipv4_now`](Self::check_ipv4_now) for `limiter`'s scope and
    /// policy, for middleware that needs a decision's figures only on
    /// refusals: with `figures` false, an allowed call may come back as
    /// [`Admission::Allowed`], without its [`Decision`] built. It decides
    /// exactly as `check_ipv4_now` would. The default forwards to
    /// `check_ipv4_now`; the in-memory backend decides a one-quota GCRA
    /// policy on a shorter path.
    fn admit_ipv4_now(
        limiter: &RateLimiter<Self>,
        ip: Ipv4Addr,
        cost: u32,
        figures: bool,
    ) -> Option<Result<Admission>> {
        let _ = figures;
        limiter
            .backend
            .check_ipv4_now(&limiter.scope, ip, &limiter.policy, cost)
            .map(|decided| decided.map(Admission::Decided))
    }
}

/// What [`RateLimiter::admit_ipv4_now`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// Allowed, and the cost taken; the decision's figures were not asked
    /// for, and were not worked out.
    Allowed,
    /// The whole decision: a refusal, or any decision when its figures were
    /// asked for.
    Decided(Decision),
}

impl Admission {
    /// Whether the call was allowed.
    pub fn allowed(&self) -> bool {
        match self {
            Admission::Allowed => true,
            Admission::Decided(decision) => decision.allowed,
        }
    }
}

/// A one-quota GCRA policy's figures, kept in the limiter itself so that a
/// decision on the in-memory backend's short path reads no other memory of
/// the policy's.
#[derive(Debug, Clone)]
pub(crate) struct SingleGcra {
    pub(crate) suffix: Arc<str>,
    /// The emission interval, in microseconds.
    pub(crate) interval: u64,
    pub(crate) limit: u32,
}

/// A rate limiter: a scope name (so several limiters can share a backend), a
/// policy, and a backend. Cheap to clone; clones share state.
#[derive(Debug, Clone)]
pub struct RateLimiter<B> {
    pub(crate) backend: B,
    pub(crate) scope: Name,
    pub(crate) policy: Arc<Policy>,
    /// The policy's one quota, when it has one and decides by GCRA.
    pub(crate) single_gcra: Option<SingleGcra>,
}

impl<B: RateBackend> RateLimiter<B> {
    /// A limiter named `scope` enforcing `policy`.
    ///
    /// # Errors
    /// [`Error::InvalidName`] for a bad scope;
    /// [`Error::InvalidArgument`] for a policy
    /// with no quota, more than [`MAX_QUOTAS`], or a GCRA quota finer than one
    /// unit per microsecond.
    pub fn new(backend: B, scope: impl AsRef<str>, policy: Policy) -> Result<Self> {
        policy.validate()?;
        let single_gcra = match (policy.algorithm(), policy.quotas(), policy.suffixes()) {
            (Algorithm::Gcra, [quota], [suffix]) => Some(SingleGcra {
                suffix: suffix.clone(),
                interval: policy.gcra_intervals()[0],
                limit: quota.limit(),
            }),
            _ => None,
        };
        Ok(RateLimiter {
            backend,
            scope: Name::new(scope)?,
            policy: Arc::new(policy),
            single_gcra,
        })
    }

    /// The policy.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The scope name.
    pub fn scope(&self) -> &Name {
        &self.scope
    }

    /// Checks one unit of cost for `key`.
    ///
    /// # Errors
    /// [`Error::InvalidName`] for an empty, oversized
    /// or braced key; backend failures.
    pub async fn check(&self, key: &str) -> Result<Decision> {
        self.check_cost(key, 1).await
    }

    /// Like [`check_cost`](Self::check_cost), but only if the backend can
    /// decide without waiting (in memory); `None` otherwise.
    pub fn check_cost_now(&self, key: &str, cost: u32) -> Option<Result<Decision>> {
        if let Err(e) = self.policy.check_cost(cost) {
            return Some(Err(e));
        }
        match RateKey::new(&self.scope, key) {
            Ok(key) => self.backend.check_now(key, &self.policy, cost),
            Err(e) => Some(Err(e)),
        }
    }

    /// Like [`check_cost_now`](Self::check_cost_now) for the key
    /// `ip.to_string()`, the same caller, without writing the address out
    /// when the backend can hold it as it is (in memory). Key extractors
    /// that key by address use it.
    ///
    /// ```
    /// use std::net::Ipv4Addr;
    /// use std::num::NonZeroU32;
    /// use lock_core::backend::MemoryBackend;
    /// use lock_core::rate::{Algorithm, Policy, Quota, RateLimiter};
    ///
    /// let policy = Policy::new(Algorithm::Gcra)
    ///     .quota(Quota::per_minute(NonZeroU32::new(1).unwrap()));
    /// let limiter = RateLimiter::new(MemoryBackend::new(), "api", policy).unwrap();
    /// let ip = Ipv4Addr::new(192, 0, 2, 7);
    /// assert!(limiter.check_ipv4_cost_now(ip, 1).unwrap().unwrap().allowed);
    /// // The address and its text are one caller.
    /// assert!(!limiter.check_cost_now("192.0.2.7", 1).unwrap().unwrap().allowed);
    /// ```
    pub fn check_ipv4_cost_now(&self, ip: Ipv4Addr, cost: u32) -> Option<Result<Decision>> {
        if !self.every_ipv4_key_fits() {
            return self.check_ipv4_as_text(ip, cost);
        }
        if let Err(e) = self.admissible_cost(cost) {
            return Some(Err(e));
        }
        self.backend
            .check_ipv4_now(&self.scope, ip, &self.policy, cost)
    }

    /// As [`check_ipv4_cost_now`](Self::check_ipv4_cost_now), for middleware
    /// that needs a decision's figures only on refusals: with `figures`
    /// false, an allowed call may come back as [`Admission::Allowed`],
    /// without its [`Decision`] built (on the in-memory backend, a one-quota
    /// GCRA policy is then decided on a shorter path).
    ///
    /// ```
    /// use std::net::Ipv4Addr;
    /// use std::num::NonZeroU32;
    /// use lock_core::backend::MemoryBackend;
    /// use lock_core::rate::{Admission, Algorithm, Policy, Quota, RateLimiter};
    ///
    /// let policy = Policy::new(Algorithm::Gcra)
    ///     .quota(Quota::per_minute(NonZeroU32::new(1).unwrap()));
    /// let limiter = RateLimiter::new(MemoryBackend::new(), "api", policy).unwrap();
    /// let ip = Ipv4Addr::new(192, 0, 2, 7);
    /// assert_eq!(limiter.admit_ipv4_now(ip, 1, false).unwrap().unwrap(), Admission::Allowed);
    /// // A refusal always comes with its decision.
    /// let Admission::Decided(refused) = limiter.admit_ipv4_now(ip, 1, false).unwrap().unwrap()
    /// else { unreachable!() };
    /// assert!(!refused.allowed && refused.retry_after.as_secs() > 0);
    /// ```
    #[inline(always)]
    pub fn admit_ipv4_now(
        &self,
        ip: Ipv4Addr,
        cost: u32,
        figures: bool,
    ) -> Option<Result<Admission>> {
        if !self.every_ipv4_key_fits() {
            return self
                .check_ipv4_as_text(ip, cost)
                .map(|decided| decided.map(Admission::Decided));
        }
        if let Err(e) = self.admissible_cost(cost) {
            return Some(Err(e));
        }
        B::admit_ipv4_now(self, ip, cost, figures)
    }

    /// Like [`check_cost_now`](Self::check_cost_now) for the key of the
    /// IPv6 network of `address` with `prefix` bits: `<network>/<prefix>`,
    /// the network written as `Display` writes it (`2001:db8:1:2::/64`), the
    /// same caller, without writing it out when the backend can hold it as
    /// it is (in memory, for a prefix of at most 64). Key extractors that
    /// group IPv6 addresses by prefix use it. A prefix above 128 counts as
    /// 128.
    ///
    /// ```
    /// use std::net::Ipv6Addr;
    /// use std::num::NonZeroU32;
    /// use lock_core::backend::MemoryBackend;
    /// use lock_core::rate::{Algorithm, Policy, Quota, RateLimiter};
    ///
    /// let policy = Policy::new(Algorithm::Gcra)
    ///     .quota(Quota::per_minute(NonZeroU32::new(1).unwrap()));
    /// let limiter = RateLimiter::new(MemoryBackend::new(), "api", policy).unwrap();
    /// let ip: Ipv6Addr = "2001:db8:1:2:aaaa::7".parse().unwrap();
    /// assert!(limiter.check_ipv6_network_cost_now(ip, 64, 1).unwrap().unwrap().allowed);
    /// // The network and its text are one caller.
    /// assert!(!limiter.check_cost_now("2001:db8:1:2::/64", 1).unwrap().unwrap().allowed);
    /// ```
    pub fn check_ipv6_network_cost_now(
        &self,
        address: Ipv6Addr,
        prefix: u8,
        cost: u32,
    ) -> Option<Result<Decision>> {
        let (network, prefix) = ipv6_network(address, prefix);
        if prefix > 64 || !self.every_ipv6_network_key_fits() {
            return self.check_ipv6_network_as_text(network, prefix, cost);
        }
        if let Err(e) = self.admissible_cost(cost) {
            return Some(Err(e));
        }
        self.backend
            .check_ipv6_network_now(&self.scope, network, prefix, &self.policy, cost)
    }

    /// As [`check_ipv6_network_cost_now`](Self::check_ipv6_network_cost_now),
    /// for middleware that needs a decision's figures only on refusals, as
    /// [`admit_ipv4_now`](Self::admit_ipv4_now) is to
    /// [`check_ipv4_cost_now`](Self::check_ipv4_cost_now).
    ///
    /// ```
    /// use std::net::Ipv6Addr;
    /// use std::num::NonZeroU32;
    /// use lock_core::backend::MemoryBackend;
    /// use lock_core::rate::{Admission, Algorithm, Policy, Quota, RateLimiter};
    ///
    /// let policy = Policy::new(Algorithm::Gcra)
    ///     .quota(Quota::per_minute(NonZeroU32::new(1).unwrap()));
    /// let limiter = RateLimiter::new(MemoryBackend::new(), "api", policy).unwrap();
    /// let ip: Ipv6Addr = "2001:db8:1:2::7".parse().unwrap();
    /// let first = limiter.admit_ipv6_network_now(ip, 64, 1, false).unwrap().unwrap();
    /// assert_eq!(first, Admission::Allowed);
    /// let Admission::Decided(refused) = limiter.admit_ipv6_network_now(ip, 64, 1, false).unwrap().unwrap()
    /// else { unreachable!() };
    /// assert!(!refused.allowed);
    /// ```
    pub fn admit_ipv6_network_now(
        &self,
        address: Ipv6Addr,
        prefix: u8,
        cost: u32,
        figures: bool,
    ) -> Option<Result<Admission>> {
        let (network, prefix) = ipv6_network(address, prefix);
        if prefix > 64 || !self.every_ipv6_network_key_fits() {
            return self
                .check_ipv6_network_as_text(network, prefix, cost)
                .map(|decided| decided.map(Admission::Decided));
        }
        if let Err(e) = self.admissible_cost(cost) {
            return Some(Err(e));
        }
        B::admit_ipv6_network_now(self, network, prefix, cost, figures)
    }

    /// An IPv6 check for a prefix above 64, or a scope so long that whether
    /// the key fits depends on its text: written out.
    #[cold]
    #[inline(never)]
    fn check_ipv6_network_as_text(
        &self,
        network: Ipv6Addr,
        prefix: u8,
        cost: u32,
    ) -> Option<Result<Decision>> {
        self.check_cost_now(&ipv6_network_key(network, prefix), cost)
    }

    /// Whether `<scope>:<network>/<prefix>` fits in [`MAX_NAME_LEN`] bytes
    /// for every network of a prefix of at most 64.
    #[inline]
    fn every_ipv6_network_key_fits(&self) -> bool {
        // `ffff:ffff:ffff:ffff::/64` and its colon.
        const LONGEST: usize = 25;
        self.scope.as_str().len() + LONGEST <= MAX_NAME_LEN
    }

    /// An IPv4 check for a scope so long that whether the key fits depends
    /// on the address's text: written out, out of the common path.
    #[cold]
    #[inline(never)]
    fn check_ipv4_as_text(&self, ip: Ipv4Addr, cost: u32) -> Option<Result<Decision>> {
        self.check_cost_now(&ip.to_string(), cost)
    }

    /// Whether `<scope>:<dotted quad>` fits in [`MAX_NAME_LEN`] bytes for
    /// every address, so that an address may be decided without its text.
    #[inline]
    fn every_ipv4_key_fits(&self) -> bool {
        // The longest dotted quad, `255.255.255.255`, and its colon.
        const LONGEST: usize = 16;
        self.scope.as_str().len() + LONGEST <= MAX_NAME_LEN
    }

    /// [`Policy::check_cost`], from the limiter's own copy of a one-quota
    /// GCRA limit when it has one (no read of the policy's quotas).
    #[inline]
    fn admissible_cost(&self, cost: u32) -> Result<()> {
        match &self.single_gcra {
            Some(single) if cost <= single.limit => Ok(()),
            _ => self.policy.check_cost(cost),
        }
    }

    /// Checks `cost` units for `key` (0 looks without consuming).
    ///
    /// # Errors
    /// As [`check`](Self::check), and
    /// [`Error::InvalidArgument`] when `cost`
    /// exceeds the smallest limit (such a call could never be allowed).
    pub async fn check_cost(&self, key: &str, cost: u32) -> Result<Decision> {
        self.policy.check_cost(cost)?;
        let key = RateKey::new(&self.scope, key)?;
        self.backend.check(key, &self.policy, cost).await
    }
}

/// The rate-limit key of the IPv6 network of `address` with `prefix` bits
/// (above 128 counts as 128): `<network>/<prefix>`, the network written as
/// `Display` writes it. The key
/// [`RateLimiter::check_ipv6_network_cost_now`] decides for.
///
/// ```
/// let ip: std::net::Ipv6Addr = "2001:db8:1:2:aaaa::7".parse().unwrap();
/// assert_eq!(lock_core::rate::ipv6_network_key(ip, 64), "2001:db8:1:2::/64");
/// ```
pub fn ipv6_network_key(address: Ipv6Addr, prefix: u8) -> String {
    let (network, prefix) = ipv6_network(address, prefix);
    format!("{network}/{prefix}")
}

/// The network of `address` with `prefix` bits (above 128 counts as 128),
/// and that prefix.
fn ipv6_network(address: Ipv6Addr, prefix: u8) -> (Ipv6Addr, u8) {
    let prefix = prefix.min(128);
    let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
    (Ipv6Addr::from(u128::from(address) & mask), prefix)
}

/// Builds a decision from the raw answer shared by both backends.
pub(crate) fn decision(
    policy: &Policy,
    allowed: bool,
    index: usize,
    remaining: u64,
    reset_us: u64,
    retry_us: u64,
) -> Decision {
    let index = index.min(policy.quotas().len() - 1);
    let quota = policy.quotas()[index].clone();
    Decision {
        allowed,
        limit: quota.limit(),
        remaining: u32::try_from(remaining)
            .unwrap_or(u32::MAX)
            .min(quota.limit()),
        reset_after: Duration::from_micros(reset_us),
        retry_after: if allowed {
            Duration::ZERO
        } else {
            Duration::from_micros(retry_us.max(1))
        },
        quota,
        quota_index: index,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An address is limited like its text key: under a scope long enough
    /// for the longest dotted quads not to fit, those are refused as
    /// names, and the shorter ones are decided.
    #[test]
    fn address_keys_are_limited_like_their_text() {
        use crate::backend::MemoryBackend;
        use std::num::NonZeroU32;
        let policy =
            Policy::new(Algorithm::Gcra).quota(Quota::per_minute(NonZeroU32::new(1).unwrap()));
        // `<scope>:1.2.3.4` is exactly MAX_NAME_LEN bytes.
        let scope = "s".repeat(MAX_NAME_LEN - 8);
        let limiter = RateLimiter::new(MemoryBackend::new(), &scope, policy).unwrap();
        let short = Ipv4Addr::new(1, 2, 3, 4);
        assert!(
            limiter
                .check_ipv4_cost_now(short, 1)
                .unwrap()
                .unwrap()
                .allowed
        );
        assert!(
            !limiter
                .check_cost_now("1.2.3.4", 1)
                .unwrap()
                .unwrap()
                .allowed
        );
        for long in [Ipv4Addr::new(1, 2, 3, 40), Ipv4Addr::BROADCAST] {
            let text = limiter.check_cost_now(&long.to_string(), 1).unwrap();
            let address = limiter.check_ipv4_cost_now(long, 1).unwrap();
            assert!(matches!(text, Err(Error::InvalidName { .. })), "{text:?}");
            assert!(
                matches!(address, Err(Error::InvalidName { .. })),
                "{address:?}"
            );
            let admitted = limiter.admit_ipv4_now(long, 1, false).unwrap();
            assert!(
                matches!(admitted, Err(Error::InvalidName { .. })),
                "{admitted:?}"
            );
        }
        // A cost no quota allows is refused before any key is looked at.
        assert!(matches!(
            limiter.check_ipv4_cost_now(short, 2),
            Some(Err(Error::InvalidArgument { .. }))
        ));
    }

    #[test]
    fn network_keys_are_limited_like_their_text() {
        use crate::backend::MemoryBackend;
        use std::num::NonZeroU32;
        let policy =
            Policy::new(Algorithm::Gcra).quota(Quota::per_minute(NonZeroU32::new(1).unwrap()));
        let limiter = RateLimiter::new(MemoryBackend::new(), "v6", policy.clone()).unwrap();
        let check = |ip: &str, prefix, text: &str| {
            let ip: Ipv6Addr = ip.parse().unwrap();
            let first = limiter.check_ipv6_network_cost_now(ip, prefix, 1).unwrap();
            assert!(first.unwrap().allowed, "{ip}/{prefix}");
            let again = limiter.check_cost_now(text, 1).unwrap();
            assert!(!again.unwrap().allowed, "{text} is not the same caller");
        };
        // Host bits are dropped; the network is the key.
        check("2001:db8:1:2:aaaa::7", 64, "2001:db8:1:2::/64");
        check("2001:db8:1:3::", 48, "2001:db8:1::/48");
        // Admitted on the short path (a one-quota GCRA), the same caller.
        let ip: Ipv6Addr = "2001:db8:1:4::9".parse().unwrap();
        let admitted = limiter.admit_ipv6_network_now(ip, 64, 1, false).unwrap();
        assert_eq!(admitted.unwrap(), Admission::Allowed);
        let again = limiter.check_cost_now("2001:db8:1:4::/64", 1).unwrap();
        assert!(!again.unwrap().allowed);
        // Above 64 the key is written out, and is still the same caller.
        check("2001:db8::1:2:3", 128, "2001:db8::1:2:3/128");
        check("2001:db8::1:2:4", 200, "2001:db8::1:2:4/128");
        // `<scope>:ffff:ffff:ffff:ffff::/64` is one byte too long here.
        let scope = "s".repeat(MAX_NAME_LEN - 24);
        let limiter = RateLimiter::new(MemoryBackend::new(), &scope, policy).unwrap();
        let short: Ipv6Addr = "2001:db8::".parse().unwrap();
        let allowed = limiter.check_ipv6_network_cost_now(short, 64, 1).unwrap();
        assert!(allowed.unwrap().allowed);
        let text = limiter.check_cost_now("2001:db8::/64", 1).unwrap();
        assert!(!text.unwrap().allowed);
        let long = Ipv6Addr::from(u128::MAX);
        let refused = limiter.check_ipv6_network_cost_now(long, 64, 1).unwrap();
        assert!(
            matches!(refused, Err(Error::InvalidName { .. })),
            "{refused:?}"
        );
        let admitted = limiter.admit_ipv6_network_now(long, 64, 1, false).unwrap();
        assert!(
            matches!(admitted, Err(Error::InvalidName { .. })),
            "{admitted:?}"
        );
        assert!(matches!(
            limiter.check_ipv6_network_cost_now(short, 64, 2),
            Some(Err(Error::InvalidArgument { .. }))
        ));
    }

    #[test]
    fn rate_keys_are_limited_like_the_scoped_name() {
        let scope = Name::new("api").unwrap();
        // `api:` + key must fit in MAX_NAME_LEN bytes.
        let longest = "k".repeat(MAX_NAME_LEN - 4);
        assert!(RateKey::new(&scope, &longest).is_ok());
        let too_long = "k".repeat(MAX_NAME_LEN - 3);
        assert!(matches!(
            RateKey::new(&scope, &too_long),
            Err(Error::InvalidName { .. })
        ));
        for bad in ["", "a{b", "}", "tab\t", "del\u{7f}", "c1\u{85}x"] {
            assert!(RateKey::new(&scope, bad).is_err(), "{bad:?} accepted");
        }
        for good in [
            "10.0.0.1",
            "2001:db8::/64",
            "user:Zoë",
            "~|",
            "\u{a0}\u{1f600}",
        ] {
            assert!(RateKey::new(&scope, good).is_ok(), "{good:?} refused");
        }
    }
}
