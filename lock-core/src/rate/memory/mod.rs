//! Rate limiting in memory: the same algorithms and decisions as the Redis
//! scripts, on a monotonic clock. Idle keys expire; the number of live keys is
//! capped, so memory stays flat under a stream of distinct keys, and a
//! shard's table shrinks once its keys have expired and been swept.
//!
//! The table is split into shards, each behind its own lock, chosen by the
//! hash of the caller's key: decisions for different callers rarely wait
//! for each other, and every quota of one caller is in one shard, so a
//! policy of several quotas is still decided under one lock.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, OnceLock};

use arrayvec::ArrayVec;
use compact_str::CompactString;
use hashbrown::HashTable;
use parking_lot::{Mutex, MutexGuard};
use quanta::{Clock, Instant};

mod algorithm;

use self::algorithm::{Entry, Raw, Slot, Writes, run};
use super::{
    Admission, Decision, MAX_QUOTAS, Policy, RateBackend, RateKey, RateLimiter, SingleGcra,
    decision,
};
use crate::backend::MemoryBackend;
use crate::error::Result;
use crate::key::Name;

/// A quota's state is keyed by the limiter's scope, the caller's key and the
/// quota's suffix. The caller's key is an IPv4 address ([`Caller`]) or text
/// kept inline up to 24 bytes (an IPv6 /64 prefix), so a new caller's entry
/// allocates nothing of its own and a burst of distinct keys leaves no
/// small allocations scattered over the heap; lookups compare a borrowed
/// [`Probe`], once per quota and decision.
///
/// Entries are hashed by the caller's key alone ([`RateTable::hash`]): the
/// quotas of one policy, and the limiters sharing a backend, then share one
/// hash per caller, which is computed once per decision. Those entries are
/// few (one per quota of each limiter), and the probe tells them apart.
struct Key {
    scope: Name,
    caller: Caller,
    suffix: Arc<str>,
}

/// A caller's key as stored. A key that is an IPv4 address's dotted quad is
/// held as the address, and one that is an IPv6 network of a /64 or a
/// shorter prefix (`2001:db8:1:2::/64`) as the network: the middleware can
/// then decide for a peer address without writing it out, and the text key
/// and the address reach the same entry (see [`CallerRef::of`]).
enum Caller {
    V4(u32),
    /// The first 64 bits of the network (the rest are zero), and the prefix.
    V6 {
        network: u64,
        prefix: u8,
    },
    Text(CompactString),
}

/// A caller's key as looked up: [`Caller`], borrowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CallerRef<'a> {
    V4(u32),
    V6 { network: u64, prefix: u8 },
    Text(&'a str),
}

impl<'a> CallerRef<'a> {
    /// The caller whose key is the text `key`: an address when `key` is the
    /// dotted quad an [`Ipv4Addr`] displays as, the text otherwise. Every
    /// address displays as exactly one text, and that text alone parses
    /// here, so a key and its address are one caller.
    ///
    /// The same holds for IPv6 networks: a key that is a network's text as
    /// `Display` writes the network's address, a slash and the prefix in
    /// decimal (`2001:db8:1:2::/64`, no host bits set, a prefix of at most
    /// 64), and that text alone, is the network.
    #[inline]
    fn of(key: &'a str) -> Self {
        // Most keys that are not addresses are told apart by their length.
        let v4 = (7..=15)
            .contains(&key.len())
            .then(|| parse_dotted_quad(key.as_bytes()))
            .flatten();
        match v4 {
            Some(v4) => CallerRef::V4(v4),
            None => Self::of_text(key),
        }
    }

    /// A key that is not a dotted quad: an IPv6 network's text, or text.
    #[inline(never)]
    fn of_text(key: &'a str) -> Self {
        match parse_v6_network(key) {
            Some((network, prefix)) => CallerRef::V6 { network, prefix },
            None => CallerRef::Text(key),
        }
    }

    fn of_ipv4(ip: Ipv4Addr) -> Self {
        CallerRef::V4(u32::from(ip))
    }

    /// The caller whose key is `network`'s text with `prefix` (at most 64),
    /// `network` having no bits set past the prefix.
    fn of_ipv6_network(network: Ipv6Addr, prefix: u8) -> Self {
        CallerRef::V6 {
            // The first 64 bits: the rest are zero.
            network: (u128::from(network) >> 64) as u64,
            prefix,
        }
    }

    fn to_owned(self) -> Caller {
        match self {
            CallerRef::V4(v4) => Caller::V4(v4),
            CallerRef::V6 { network, prefix } => Caller::V6 { network, prefix },
            CallerRef::Text(key) => Caller::Text(CompactString::new(key)),
        }
    }
}

impl Caller {
    fn borrow(&self) -> CallerRef<'_> {
        match self {
            Caller::V4(v4) => CallerRef::V4(*v4),
            Caller::V6 { network, prefix } => CallerRef::V6 {
                network: *network,
                prefix: *prefix,
            },
            Caller::Text(key) => CallerRef::Text(key),
        }
    }
}

/// The longest text [`parse_v6_network`] accepts: `ffff:ffff:ffff:ffff::/64`.
const LONGEST_V6_NETWORK: usize = 24;

/// The first 64 bits and the prefix of the IPv6 network `text` names, if it
/// is written as [`CallerRef::of`] says; anything else (capitals, leading
/// zeros, zero groups not shortened as `Display` shortens them, host bits,
/// a prefix above 64) is not a network here.
fn parse_v6_network(text: &str) -> Option<(u64, u8)> {
    if !(4..=LONGEST_V6_NETWORK).contains(&text.len()) {
        return None;
    }
    let (address, prefix_text) = text.split_once('/')?;
    // `u8`'s parse also takes a sign and leading zeros.
    let canonical_prefix = !prefix_text.starts_with(['+', '0']) || prefix_text == "0";
    let prefix: u8 = prefix_text.parse().ok().filter(|_| canonical_prefix)?;
    let network: Ipv6Addr = address.parse().ok()?;
    let bits = u128::from(network);
    let host_bits = u128::MAX.checked_shr(u32::from(prefix)).unwrap_or(0);
    if prefix > 64 || bits & host_bits != 0 {
        return None;
    }
    let mut written = arrayvec::ArrayString::<48>::new();
    fmt::Write::write_fmt(&mut written, format_args!("{network}")).ok()?;
    // The host bits are zero: the network is in the first 64 bits.
    (written.as_str() == address).then_some(((bits >> 64) as u64, prefix))
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

#[derive(Clone, Copy)]
struct Probe<'a> {
    scope: &'a str,
    caller: CallerRef<'a>,
    suffix: &'a str,
}

impl Probe<'_> {
    #[inline]
    fn matches(&self, stored: &Key) -> bool {
        // The scope and suffix usually are the very strings stored (the
        // limiter's own), so comparing addresses first skips most compares.
        fn same(a: &str, b: &str) -> bool {
            std::ptr::eq(a, b) || a == b
        }
        let caller = match (self.caller, &stored.caller) {
            (CallerRef::V4(probe), Caller::V4(stored)) => probe == *stored,
            (
                CallerRef::V6 { network, prefix },
                Caller::V6 {
                    network: stored_network,
                    prefix: stored_prefix,
                },
            ) => network == *stored_network && prefix == *stored_prefix,
            (CallerRef::Text(probe), Caller::Text(stored)) => probe == stored.as_str(),
            _ => false,
        };
        caller && same(self.scope, stored.scope.as_str()) && same(self.suffix, &stored.suffix)
    }
}

type Entries = HashTable<(Key, Entry)>;

#[derive(Default)]
struct Map {
    entries: Entries,
    ops: u64,
}

/// One shard of a [`RateTable`], on cache lines of its own so that two
/// threads locking neighbouring shards do not contend for a line.
///
/// The lock is `parking_lot`'s: a decision holds it for a few dozen
/// instructions, and when two threads want one shard at once (two workers
/// serving one client, or two clients whose keys share a shard) it spins
/// briefly before it parks, where std's puts the waiter to sleep in the
/// kernel sooner. Two threads deciding at once took 190 to 202 ns a
/// decision with std's lock and 117 to 121 with this one (BENCHMARKS.md,
/// round 21).
#[repr(align(128))]
#[derive(Default)]
struct Shard {
    map: Mutex<Map>,
}

/// Rate-limit state of one [`MemoryBackend`]. Aligned to a cache line, so
/// that a decision reads its fields from two lines rather than three.
#[repr(align(64))]
pub(crate) struct RateTable {
    shards: Box<[Shard]>,
    /// Keys come from clients (IP addresses, user ids): the hasher is keyed
    /// at random, like std's, but faster.
    hasher: ahash::RandomState,
    /// The table's own clock: `Instant::now()` would look up a global clock
    /// and a per-thread override on every decision.
    clock: Clock,
    base: Instant,
    /// The cap on each shard's entries: the table's cap divided evenly, so
    /// the shards together never hold more than it.
    shard_cap: usize,
    /// Each shard sweeps out its expired entries once in this many of its
    /// own decisions: [`SWEEP_EVERY`] divided among the shards, so the
    /// table as a whole sweeps as often as one unsharded table would, and
    /// holds as few expired entries.
    sweep_every: u64,
}

/// How many shards a table has: as `dashmap` chooses, four per thread the
/// machine can run, rounded up to a power of two (here at most 64); but
/// few enough that each may hold at least [`MIN_SHARD_KEYS`] entries.
/// Keys spread over the shards by hash, so a shard fills (and evicts) about
/// when the whole table does only if each holds many; a small cap keeps
/// one shard.
fn shard_count(max_keys: usize) -> usize {
    static PER_MACHINE: OnceLock<usize> = OnceLock::new();
    let per_machine = *PER_MACHINE.get_or_init(|| {
        let threads = std::thread::available_parallelism().map_or(1, usize::from);
        (threads * 4).next_power_of_two().min(MAX_SHARDS)
    });
    // The largest power of two not above the shards the cap allows.
    let fit = 1 << (max_keys / MIN_SHARD_KEYS).max(1).ilog2();
    per_machine.min(fit)
}

const MAX_SHARDS: usize = 64;
const MIN_SHARD_KEYS: usize = 1024;

type PerQuota<T> = ArrayVec<T, MAX_QUOTAS>;

/// Default cap on live rate-limit keys per memory backend.
pub const DEFAULT_MAX_KEYS: usize = 100_000;
/// A table sweeps out expired entries once in this many decisions.
const SWEEP_EVERY: u64 = 4096;

impl Default for RateTable {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_KEYS)
    }
}

impl RateTable {
    pub(crate) fn new(max_keys: usize) -> Self {
        Self::with_clock(max_keys, Clock::new())
    }

    fn with_clock(max_keys: usize, clock: Clock) -> Self {
        let max_keys = max_keys.max(1);
        let shards = shard_count(max_keys);
        RateTable {
            shards: (0..shards).map(|_| Shard::default()).collect(),
            hasher: ahash::RandomState::new(),
            base: clock.now(),
            clock,
            shard_cap: max_keys / shards,
            sweep_every: (SWEEP_EVERY / shards as u64).max(1),
        }
    }

    /// The hash of every entry of `caller` (see [`Key`]).
    #[inline]
    fn hash(&self, caller: CallerRef<'_>) -> u64 {
        match caller {
            CallerRef::V4(v4) => self.hasher.hash_one(v4),
            CallerRef::V6 { network, prefix } => self.hasher.hash_one((network, prefix)),
            CallerRef::Text(key) => self.hasher.hash_one(key),
        }
    }

    #[inline]
    fn now_us(&self) -> u64 {
        u64::try_from(self.clock.now().duration_since(self.base).as_micros()).unwrap_or(u64::MAX)
    }

    /// Live keys (for tests of eviction).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| {
                let map = shard.map.lock();
                map.entries.len()
            })
            .sum()
    }

    /// Bytes the shards' tables hold (for tests of shrinking).
    #[cfg(test)]
    fn allocation_size(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| {
                let map = shard.map.lock();
                map.entries.allocation_size()
            })
            .sum()
    }

    fn check(&self, key: RateKey<'_>, policy: &Policy, cost: u32) -> Decision {
        self.check_caller(key.scope(), CallerRef::of(key.key()), policy, cost)
    }

    /// Decides for the caller whose key is `ip`'s dotted quad.
    fn check_ipv4(&self, scope: &Name, ip: Ipv4Addr, policy: &Policy, cost: u32) -> Decision {
        self.check_caller(scope, CallerRef::of_ipv4(ip), policy, cost)
    }

    /// Decides for the caller whose key is the text of `network` with
    /// `prefix` (at most 64; no bits set past it).
    fn check_ipv6_network(
        &self,
        scope: &Name,
        network: Ipv6Addr,
        prefix: u8,
        policy: &Policy,
        cost: u32,
    ) -> Decision {
        let caller = CallerRef::of_ipv6_network(network, prefix);
        self.check_caller(scope, caller, policy, cost)
    }

    fn check_caller(
        &self,
        scope: &Name,
        caller: CallerRef<'_>,
        policy: &Policy,
        cost: u32,
    ) -> Decision {
        let raw = match policy.suffixes() {
            [suffix] => self.check_one(scope, caller, policy, suffix, cost),
            suffixes => self.check_all(scope, caller, policy, suffixes, cost),
        };
        decision(
            policy,
            raw.allowed,
            raw.index,
            raw.remaining,
            raw.reset_us,
            raw.retry_us,
        )
    }

    /// Locks the shard of `hash`, sweeping out its expired entries every
    /// `sweep_every` decisions it makes.
    #[inline]
    fn lock(&self, hash: u64, now: u64) -> MutexGuard<'_, Map> {
        // The bucket within a shard's table comes from the hash's low bits
        // and its tag from the top seven: the shard takes bits of neither.
        // The shard count is a power of two.
        let index = (hash >> 32) as usize & (self.shards.len() - 1);
        let mut map = self.shards[index].map.lock();
        map.ops += 1;
        if map.ops.is_multiple_of(self.sweep_every) {
            self.sweep(&mut map.entries, now);
        }
        map
    }

    /// Drops a shard's expired entries, and gives back its room if that
    /// left it mostly empty.
    #[cold]
    #[inline(never)]
    fn sweep(&self, entries: &mut Entries, now: u64) {
        entries.retain(|(_, e)| e.expires_us > now);
        self.shrink(entries);
    }

    /// A policy of one quota (the common case): one lookup, and the entry
    /// found is written in place.
    fn check_one(
        &self,
        scope: &Name,
        caller: CallerRef<'_>,
        policy: &Policy,
        suffix: &Arc<str>,
        cost: u32,
    ) -> Raw {
        self.update(scope, caller, suffix, |live, now| {
            let slot = live.map(|e| (e.slot, e.expires_us));
            let mut writes = Writes::new();
            let raw = run(policy, &[slot], cost, now, &mut writes);
            (writes.pop().flatten(), raw)
        })
    }

    /// A one-quota GCRA policy for an IPv4 caller, on the shortest path:
    /// the decision's figures are worked out only for a refusal or when
    /// asked for, and after the shard's lock is let go. It reads and writes
    /// the very entry [`check_one`](Self::check_one) would, and decides as
    /// it would.
    #[inline]
    fn admit_gcra(
        &self,
        scope: &Name,
        caller: CallerRef<'_>,
        single: &SingleGcra,
        policy: &Policy,
        cost: u32,
        figures: bool,
    ) -> Admission {
        let interval = single.interval;
        let window = interval * u64::from(single.limit);
        let (allowed, tat, now) = self.update(scope, caller, &single.suffix, |live, now| {
            let tat = match live {
                Some(Entry {
                    slot: Slot::Tat(tat),
                    ..
                }) => tat.max(now),
                _ => now,
            };
            let new_tat = tat + u64::from(cost) * interval;
            if new_tat > now + window {
                return (None, (false, tat, now));
            }
            let entry = (cost > 0).then_some(Entry {
                slot: Slot::Tat(new_tat),
                expires_us: new_tat,
            });
            (entry, (true, new_tat, now))
        });
        match (allowed, figures) {
            (true, false) => Admission::Allowed,
            (true, true) => {
                Admission::Decided(gcra_decision(policy, true, tat, now, window, interval, 0))
            }
            (false, _) => {
                let retry_us = tat + u64::from(cost) * interval - window - now;
                Admission::Decided(gcra_decision(
                    policy, false, tat, now, window, interval, retry_us,
                ))
            }
        }
    }

    /// Looks up the entry of `(scope, caller, suffix)` under its shard's
    /// lock, hands `f` the entry if it is live, and the time, and stores
    /// the entry `f` gives back (if any) in its place.
    #[inline]
    fn update<R>(
        &self,
        scope: &Name,
        caller: CallerRef<'_>,
        suffix: &Arc<str>,
        f: impl FnOnce(Option<Entry>, u64) -> (Option<Entry>, R),
    ) -> R {
        let probe = Probe {
            scope: scope.as_str(),
            caller,
            suffix,
        };
        let hash = self.hash(caller);
        let now = self.now_us();
        let mut map = self.lock(hash, now);
        // `find_mut` would compare through a `dyn` closure, called apart
        // from this path; the iterator over the hash's candidates inlines.
        let found = map
            .entries
            .iter_hash_mut(hash)
            .find(|(stored, _)| probe.matches(stored));
        let live = found
            .as_ref()
            .map(|(_, e)| *e)
            .filter(|e| e.expires_us > now);
        let (write, out) = f(live, now);
        if let Some(entry) = write {
            match found {
                Some((_, existing)) => *existing = entry,
                None => self.insert(&mut map, scope, caller, suffix, hash, entry, now),
            }
        }
        out
    }

    /// A policy of several quotas, decided together: a refusal by one takes
    /// nothing from the others.
    fn check_all(
        &self,
        scope: &Name,
        caller: CallerRef<'_>,
        policy: &Policy,
        suffixes: &[Arc<str>],
        cost: u32,
    ) -> Raw {
        // The one hash is computed before the lock is taken.
        let hash = self.hash(caller);
        let probes: PerQuota<Probe<'_>> = suffixes
            .iter()
            .map(|suffix| Probe {
                scope: scope.as_str(),
                caller,
                suffix,
            })
            .collect();
        let now = self.now_us();
        let mut map = self.lock(hash, now);
        let mut slots: PerQuota<Option<(Slot, u64)>> = PerQuota::new();
        for probe in &probes {
            let found = map.entries.find(hash, |(stored, _)| probe.matches(stored));
            slots.push(
                found
                    .filter(|(_, e)| e.expires_us > now)
                    .map(|(_, e)| (e.slot, e.expires_us)),
            );
        }
        let mut writes = PerQuota::new();
        let raw = run(policy, &slots, cost, now, &mut writes);
        for ((probe, suffix), entry) in probes.iter().zip(suffixes).zip(writes) {
            let Some(entry) = entry else { continue };
            match map
                .entries
                .find_mut(hash, |(stored, _)| probe.matches(stored))
            {
                Some((_, existing)) => *existing = entry,
                None => self.insert(&mut map, scope, caller, suffix, hash, entry, now),
            }
        }
        raw
    }

    /// Gives back a shard's room once a sweep left it mostly empty: after a
    /// burst of distinct keys, the memory their entries took. The table
    /// shrinks only when its live entries would fit in a quarter of it, and
    /// keeps room for four times as many, so that it does not shrink and
    /// grow back in turn. A table that needs no shrinking costs a few
    /// instructions.
    fn shrink(&self, entries: &mut Entries) {
        entries.shrink_to(entries.len().saturating_mul(4), |(stored, _)| {
            self.hash(stored.caller.borrow())
        });
    }

    /// Stores a new entry, evicting first if its shard is full. Out of
    /// line: a caller seen before (the common case) needs none of its
    /// stack or code.
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    fn insert(
        &self,
        map: &mut Map,
        scope: &Name,
        caller: CallerRef<'_>,
        suffix: &Arc<str>,
        hash: u64,
        entry: Entry,
        now: u64,
    ) {
        if map.entries.len() >= self.shard_cap {
            evict(&mut map.entries, now, self.shard_cap);
        }
        let stored = Key {
            scope: scope.clone(),
            caller: caller.to_owned(),
            suffix: suffix.clone(),
        };
        let rehash = |(stored, _): &(Key, Entry)| self.hash(stored.caller.borrow());
        map.entries.insert_unique(hash, (stored, entry), rehash);
    }
}

/// Drops expired entries; if the shard is still full, drops arbitrary
/// entries down to 7/8 of its cap (those limits start afresh).
fn evict(entries: &mut Entries, now: u64, max: usize) {
    entries.retain(|(_, e)| e.expires_us > now);
    if entries.len() >= max {
        let mut excess = entries.len() - max * 7 / 8;
        tracing::debug!(excess, "rate-limit key cap reached, evicting live keys");
        entries.retain(|_| {
            if excess > 0 {
                excess -= 1;
                false
            } else {
                true
            }
        });
    }
}

/// A one-quota GCRA decision, as [`algorithm`]'s GCRA reaches it.
#[cold]
#[inline(never)]
fn gcra_decision(
    policy: &Policy,
    allowed: bool,
    tat: u64,
    now: u64,
    window: u64,
    interval: u64,
    retry_us: u64,
) -> Decision {
    let remaining = (now + window).saturating_sub(tat) / interval;
    decision(policy, allowed, 0, remaining, tat - now, retry_us)
}

impl RateBackend for MemoryBackend {
    async fn check(&self, key: RateKey<'_>, policy: &Policy, cost: u32) -> Result<Decision> {
        Ok(self.inner.rates.check(key, policy, cost))
    }

    fn check_now(&self, key: RateKey<'_>, policy: &Policy, cost: u32) -> Option<Result<Decision>> {
        Some(Ok(self.inner.rates.check(key, policy, cost)))
    }

    fn check_ipv4_now(
        &self,
        scope: &Name,
        ip: Ipv4Addr,
        policy: &Policy,
        cost: u32,
    ) -> Option<Result<Decision>> {
        Some(Ok(self.inner.rates.check_ipv4(scope, ip, policy, cost)))
    }

    fn check_ipv6_network_now(
        &self,
        scope: &Name,
        network: Ipv6Addr,
        prefix: u8,
        policy: &Policy,
        cost: u32,
    ) -> Option<Result<Decision>> {
        let rates = &self.inner.rates;
        Some(Ok(
            rates.check_ipv6_network(scope, network, prefix, policy, cost)
        ))
    }

    #[inline]
    fn admit_ipv4_now(
        limiter: &RateLimiter<Self>,
        ip: Ipv4Addr,
        cost: u32,
        figures: bool,
    ) -> Option<Result<Admission>> {
        Some(Ok(admit(limiter, CallerRef::of_ipv4(ip), cost, figures)))
    }

    fn admit_ipv6_network_now(
        limiter: &RateLimiter<Self>,
        network: Ipv6Addr,
        prefix: u8,
        cost: u32,
        figures: bool,
    ) -> Option<Result<Admission>> {
        let caller = CallerRef::of_ipv6_network(network, prefix);
        Some(Ok(admit(limiter, caller, cost, figures)))
    }
}

/// An address's admission: a one-quota GCRA policy on the short path.
#[inline(always)]
fn admit(
    limiter: &RateLimiter<MemoryBackend>,
    caller: CallerRef<'_>,
    cost: u32,
    figures: bool,
) -> Admission {
    let rates = &limiter.backend.inner.rates;
    match &limiter.single_gcra {
        Some(single) => rates.admit_gcra(
            &limiter.scope,
            caller,
            single,
            &limiter.policy,
            cost,
            figures,
        ),
        None => {
            Admission::Decided(rates.check_caller(&limiter.scope, caller, &limiter.policy, cost))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rate::{Algorithm, Quota};
    use std::num::NonZeroU32;
    use std::time::Duration;

    /// Ten an hour: no key is refused, and none expires, during a test.
    fn hourly() -> Policy {
        Policy::new(Algorithm::Gcra).quota(Quota::per_hour(NonZeroU32::new(10).unwrap()))
    }

    /// Decides once for each of `n` distinct keys `<prefix><i>`, asserting
    /// that each is allowed, and calls `each` after every decision.
    fn hit_distinct(
        table: &RateTable,
        policy: &Policy,
        prefix: &str,
        n: u64,
        mut each: impl FnMut(&RateTable),
    ) {
        let scope = Name::new("scope").unwrap();
        for i in 0..n {
            let key = format!("{prefix}{i}");
            let key = RateKey::new(&scope, &key).unwrap();
            assert!(table.check(key, policy, 1).allowed);
            each(table);
        }
    }

    /// Exactly the texts `Ipv4Addr` parses are dotted quads here, with the
    /// same address, and each is the text the address displays as: so a
    /// text key and an address are one caller only when they name the same
    /// address the same way.
    #[test]
    fn dotted_quads_are_the_texts_addresses_display_as() {
        let agrees = |text: &str| {
            let std = text.parse::<Ipv4Addr>().ok();
            let expected = std.map_or(CallerRef::Text(text), CallerRef::of_ipv4);
            assert_eq!(CallerRef::of(text), expected, "{text:?}");
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
            "1.2.3.1000",
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
            "255.255.255.2555",
        ] {
            agrees(text);
        }
        // Random texts: three to five runs of one to four bytes (digits
        // mostly, so many are near misses), joined by dots.
        const ALPHABET: &[u8] = b"00123456789255:a";
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x
        };
        for _ in 0..200_000 {
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

    /// Exactly the texts a network of a prefix of at most 64 displays as
    /// (`Display` of the network's address, `/`, the prefix) are networks
    /// here, with that network: other ways of writing it stay text.
    #[test]
    fn ipv6_networks_are_the_texts_networks_display_as() {
        let network_text = |network: u64, prefix: u8| {
            format!("{}/{prefix}", Ipv6Addr::from(u128::from(network) << 64))
        };
        let mut x: u64 = 0x2001_0db8_85a3_0042;
        let mut checked = 0;
        for round in 0..4096u64 {
            // Every pattern of zero and non-zero groups, and random ones.
            let pattern = round % 16;
            let groups: Vec<u64> = (0..4)
                .map(|i| {
                    let digits = 1 + (round / 16 + i) % 4;
                    (x >> (16 * i)) & ((1 << (4 * digits)) - 1) | 1
                })
                .collect();
            let mut network = 0u64;
            for (i, group) in groups.iter().enumerate() {
                if pattern & (1 << i) != 0 {
                    network |= group << (48 - 16 * i);
                }
            }
            for prefix in 0..=64u8 {
                let kept = u64::MAX.checked_shl(64 - u32::from(prefix)).unwrap_or(0);
                let network = network & kept;
                let text = network_text(network, prefix);
                assert_eq!(
                    CallerRef::of(&text),
                    CallerRef::V6 { network, prefix },
                    "{text:?}"
                );
                checked += 1;
            }
            x = x.wrapping_mul(0x2545_f491_4f6c_dd1d).rotate_left(29) ^ round;
        }
        assert!(checked > 200_000);
        for text in [
            "2001:DB8::/64",
            "2001:0db8::/64",
            "2001:db8:0:0::/64",
            "2001:db8::0/64",
            "2001:db8::/064",
            "2001:db8::/+64",
            "2001:db8::/65",
            "2001:db8::/128",
            "2001:db8::1/64",
            "2001:db8::/16",
            "2001:db8::/",
            "/64",
            "::/00",
            "::/ 64",
            " ::/64",
            "::ffff:1.2.3.4/64",
            "2001:db8:1:2:3::/64",
            "ffff:ffff:ffff:ffff::/640",
            "user/64",
            "a:b/c",
        ] {
            assert_eq!(CallerRef::of(text), CallerRef::Text(text), "{text:?}");
        }
        assert_eq!(
            CallerRef::of("::/0"),
            CallerRef::V6 {
                network: 0,
                prefix: 0
            }
        );
        assert_eq!(
            CallerRef::of("2001:db8::/32"),
            CallerRef::V6 {
                network: 0x2001_0db8 << 32,
                prefix: 32
            }
        );
    }

    /// A network and its text are one caller; the same address under
    /// another prefix is another.
    #[test]
    fn a_network_and_its_text_share_state() {
        let table = RateTable::new(1000);
        let scope = Name::new("scope").unwrap();
        let one = Policy::new(Algorithm::Gcra).quota(Quota::per_hour(NonZeroU32::new(1).unwrap()));
        let network: Ipv6Addr = "2001:db8:1:2::".parse().unwrap();
        assert!(
            table
                .check_ipv6_network(&scope, network, 64, &one, 1)
                .allowed
        );
        let text = RateKey::new(&scope, "2001:db8:1:2::/64").unwrap();
        assert!(!table.check(text, &one, 1).allowed);
        assert!(
            !table
                .check_ipv6_network(&scope, network, 64, &one, 1)
                .allowed
        );
        assert!(
            table
                .check_ipv6_network(&scope, network, 63, &one, 1)
                .allowed
        );
        let other_form = RateKey::new(&scope, "2001:db8:1:2:0::/64").unwrap();
        assert!(table.check(other_form, &one, 1).allowed);
        assert_eq!(table.len(), 3);
    }

    /// An address and its dotted quad are one caller, with one quota or
    /// several; other texts of it are other callers.
    #[test]
    fn an_address_and_its_text_share_state() {
        let table = RateTable::new(1000);
        let scope = Name::new("scope").unwrap();
        let once = |n| Quota::per_hour(NonZeroU32::new(n).unwrap());
        let one = Policy::new(Algorithm::Gcra).quota(once(1));
        let two = Policy::new(Algorithm::FixedWindow)
            .quota(once(1))
            .quota(once(5));
        for (policy, ip) in [(&one, [10, 0, 0, 1]), (&two, [192, 0, 2, 200])] {
            let ip = Ipv4Addr::from(ip);
            let text = ip.to_string();
            assert!(table.check_ipv4(&scope, ip, policy, 1).allowed);
            let key = RateKey::new(&scope, &text).unwrap();
            assert!(
                !table.check(key, policy, 1).allowed,
                "{text} is another caller"
            );
            let padded = format!("{text} ");
            let other = RateKey::new(&scope, &padded).unwrap();
            assert!(table.check(other, policy, 1).allowed);
            // And the other way round, on a fresh address.
            let next = Ipv4Addr::from(u32::from(ip) + 1);
            let text = next.to_string();
            assert!(
                table
                    .check(RateKey::new(&scope, &text).unwrap(), policy, 1)
                    .allowed
            );
            assert!(!table.check_ipv4(&scope, next, policy, 1).allowed);
        }
        let other_scope = Name::new("other").unwrap();
        assert!(
            table
                .check_ipv4(&other_scope, Ipv4Addr::new(10, 0, 0, 1), &one, 1)
                .allowed
        );
    }

    /// `admit_ipv4_now` (on the short path for a one-quota GCRA policy)
    /// decides as `check_cost_now` does for the address's text: the same
    /// allowances and refusals, and the same decision whenever one comes
    /// back, through a spent burst, refills, a look at cost 0, an entry
    /// that has expired, and a cost no quota allows.
    #[test]
    fn admitting_an_address_decides_as_checking_its_text() {
        let (clock, time) = Clock::mock();
        let backend = MemoryBackend::with_rate_table(RateTable::with_clock(1000, clock));
        let quota = |n, ms| Quota::new(NonZeroU32::new(n).unwrap(), Duration::from_millis(ms));
        let policies = [
            Policy::new(Algorithm::Gcra).quota(quota(3, 300).unwrap()),
            Policy::new(Algorithm::Gcra)
                .quota(quota(3, 300).unwrap())
                .quota(quota(5, 1000).unwrap()),
            Policy::new(Algorithm::FixedWindow).quota(quota(3, 300).unwrap()),
        ];
        // (milliseconds to let pass first, cost, figures asked for)
        let steps = [
            (0, 1, false),
            (0, 1, true),
            (0, 1, false),
            (0, 1, false),
            (0, 0, false),
            (0, 0, true),
            (100, 2, false),
            (0, 1, false),
            (50, 1, true),
            (60, 1, false),
            (1000, 3, false),
            (0, 1, true),
            (0, 4, false),
            (300, 3, true),
        ];
        for (p, policy) in policies.into_iter().enumerate() {
            let short =
                RateLimiter::new(backend.clone(), format!("short{p}"), policy.clone()).unwrap();
            let full = RateLimiter::new(backend.clone(), format!("full{p}"), policy).unwrap();
            let ip = Ipv4Addr::new(192, 0, 2, 1);
            let text = ip.to_string();
            let (mut allowed, mut refused) = (0, 0);
            for (i, &(pass, cost, figures)) in steps.iter().enumerate() {
                time.increment(Duration::from_millis(pass));
                let expected = full.check_cost_now(&text, cost).unwrap();
                let got = short.admit_ipv4_now(ip, cost, figures).unwrap();
                let (expected, got) = match (expected, got) {
                    (Ok(expected), Ok(got)) => (expected, got),
                    (Err(_), Err(_)) => continue,
                    (expected, got) => panic!("policy {p}, step {i}: {expected:?}, {got:?}"),
                };
                if expected.allowed {
                    allowed += 1;
                } else {
                    refused += 1;
                }
                match got {
                    Admission::Allowed => {
                        assert!(expected.allowed && !figures, "policy {p}, step {i}");
                    }
                    Admission::Decided(got) => assert_eq!(got, expected, "policy {p}, step {i}"),
                }
            }
            assert!(
                allowed >= 5 && refused >= 3,
                "policy {p}: {allowed} allowed, {refused} refused"
            );
        }
        // The short path gives a bare allowance when no figures are asked.
        let single = Policy::new(Algorithm::Gcra).quota(quota(3, 300).unwrap());
        let limiter = RateLimiter::new(backend, "bare", single).unwrap();
        let ip = Ipv4Addr::new(192, 0, 2, 2);
        assert_eq!(
            limiter.admit_ipv4_now(ip, 1, false).unwrap().unwrap(),
            Admission::Allowed
        );
    }

    #[test]
    fn live_keys_are_capped() {
        let table = RateTable::new(1000);
        hit_distinct(&table, &hourly(), "k", 10_000, |_| {});
        assert!(table.len() <= 1000, "{} live keys", table.len());
    }

    #[test]
    fn shards_hold_many_keys_each() {
        assert_eq!(shard_count(0), 1);
        assert_eq!(shard_count(1000), 1);
        for max in [1024, 2047, 2048, 5000, 100_000, usize::MAX] {
            let shards = shard_count(max);
            assert!(shards.is_power_of_two(), "{shards} shards for {max}");
            assert!(
                shards <= MAX_SHARDS && shards * MIN_SHARD_KEYS <= max,
                "{shards} for {max}"
            );
        }
        assert_eq!(shard_count(2048), 2.min(shard_count(usize::MAX)));
    }

    /// The table as a whole sweeps out expired keys about every
    /// `SWEEP_EVERY` decisions, however many shards it has: idle keys do not
    /// pile up in shards that each wait for `SWEEP_EVERY` of their own.
    #[test]
    fn expired_keys_are_swept_across_shards() {
        let table = RateTable::new(DEFAULT_MAX_KEYS);
        // Ten per 100 ms: an entry expires 10 ms after its last hit.
        let quota = Quota::new(NonZeroU32::new(10).unwrap(), Duration::from_millis(100)).unwrap();
        let policy = Policy::new(Algorithm::Gcra).quota(quota);
        hit_distinct(&table, &policy, "idle", 5 * SWEEP_EVERY, |_| {});
        std::thread::sleep(Duration::from_millis(20));
        // Enough for every shard to reach its next sweep.
        hit_distinct(&table, &policy, "fresh", 2 * SWEEP_EVERY, |_| {});
        let live = table.len() as u64;
        assert!(
            live <= 2 * SWEEP_EVERY + table.shards.len() as u64,
            "{live} live keys in {} shards",
            table.shards.len()
        );
    }

    /// After a burst of distinct keys has expired and been swept, the
    /// shards' tables give most of their room back.
    #[test]
    fn swept_tables_shrink() {
        let (clock, time) = Clock::mock();
        let table = RateTable::with_clock(1_000_000, clock);
        // Ten per 100 ms: an entry expires 10 ms after its last hit.
        let quota = Quota::new(NonZeroU32::new(10).unwrap(), Duration::from_millis(100)).unwrap();
        let policy = Policy::new(Algorithm::Gcra).quota(quota);
        hit_distinct(&table, &policy, "burst", 100_000, |_| {});
        let peak = table.allocation_size();
        let entry = std::mem::size_of::<(Key, Entry)>();
        assert!(peak >= 100_000 * entry, "{peak} bytes for 100,000 entries");
        time.increment(Duration::from_millis(20));
        hit_distinct(&table, &policy, "fresh", 2 * SWEEP_EVERY, |_| {});
        let after = table.allocation_size();
        assert!(
            after <= peak / 4,
            "{after} bytes after the sweep, {peak} at the peak, {} live entries",
            table.len()
        );
    }

    /// The cap holds across shards, and a full shard evicts only down to
    /// 7/8 of its share.
    #[test]
    fn sharded_cap_holds() {
        let max = 8 * MIN_SHARD_KEYS;
        let table = RateTable::new(max);
        hit_distinct(&table, &hourly(), "k", 50_000, |table| {
            assert!(table.len() <= max, "{} live keys", table.len());
        });
        let floor = table.shards.len() * (table.shard_cap * 7 / 8);
        assert!(
            table.len() >= floor,
            "{} live keys, fewer than {floor}",
            table.len()
        );
    }
}
