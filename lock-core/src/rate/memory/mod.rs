//! Rate limiting in memory: the same algorithms and decisions as the Redis
//! scripts, on a monotonic clock. Idle keys expire; the number of live keys is
//! capped, so memory stays flat under a stream of distinct keys.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use arrayvec::ArrayVec;
use hashbrown::HashTable;
use quanta::{Clock, Instant};

mod algorithm;

use self::algorithm::{Entry, Raw, Slot, Writes, run};
use super::{Decision, MAX_QUOTAS, Policy, RateBackend, RateKey, decision};
use crate::backend::MemoryBackend;
use crate::error::Result;
use crate::key::Name;

/// A quota's state is keyed by the limiter's scope, the caller's key and the
/// quota's suffix. Only a new key allocates (its text); lookups compare a
/// borrowed [`Probe`], once per quota and decision.
///
/// Entries are hashed by the caller's key alone ([`RateTable::hash`]): the
/// quotas of one policy, and the limiters sharing a backend, then share one
/// hash per caller, which is computed once per decision. Those entries are
/// few (one per quota of each limiter), and the probe tells them apart.
struct Key {
    scope: Name,
    key: Box<str>,
    suffix: Arc<str>,
}

#[derive(Clone, Copy)]
struct Probe<'a> {
    scope: &'a str,
    key: &'a str,
    suffix: &'a str,
}

impl Probe<'_> {
    fn matches(&self, stored: &Key) -> bool {
        // The scope and suffix usually are the very strings stored (the
        // limiter's own), so comparing addresses first skips most compares.
        fn same(a: &str, b: &str) -> bool {
            std::ptr::eq(a, b) || a == b
        }
        self.key == &*stored.key
            && same(self.scope, stored.scope.as_str())
            && same(self.suffix, &stored.suffix)
    }
}

type Entries = HashTable<(Key, Entry)>;

#[derive(Default)]
struct Map {
    entries: Entries,
    ops: u64,
}

/// Rate-limit state of one [`MemoryBackend`].
pub(crate) struct RateTable {
    map: Mutex<Map>,
    /// Keys come from clients (IP addresses, user ids): the hasher is keyed
    /// at random, like std's, but faster.
    hasher: ahash::RandomState,
    /// The table's own clock: `Instant::now()` would look up a global clock
    /// and a per-thread override on every decision.
    clock: Clock,
    base: Instant,
    max_keys: usize,
}

type PerQuota<T> = ArrayVec<T, MAX_QUOTAS>;

/// Default cap on live rate-limit keys per memory backend.
pub const DEFAULT_MAX_KEYS: usize = 100_000;
const SWEEP_EVERY: u64 = 4096;

impl Default for RateTable {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_KEYS)
    }
}

impl RateTable {
    pub(crate) fn new(max_keys: usize) -> Self {
        let clock = Clock::new();
        RateTable {
            map: Mutex::new(Map::default()),
            hasher: ahash::RandomState::new(),
            base: clock.now(),
            clock,
            max_keys: max_keys.max(1),
        }
    }

    /// The hash of every entry of the caller `key` (see [`Key`]).
    fn hash(&self, key: &str) -> u64 {
        self.hasher.hash_one(key)
    }

    fn now_us(&self) -> u64 {
        u64::try_from(self.clock.now().duration_since(self.base).as_micros()).unwrap_or(u64::MAX)
    }

    /// Live keys (for tests of eviction).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entries
            .len()
    }

    fn check(&self, key: RateKey<'_>, policy: &Policy, cost: u32) -> Decision {
        let raw = match policy.suffixes() {
            [suffix] => self.check_one(key, policy, suffix, cost),
            suffixes => self.check_all(key, policy, suffixes, cost),
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

    /// Locks the map, sweeping out expired entries every `SWEEP_EVERY`
    /// decisions.
    fn lock(&self, now: u64) -> MutexGuard<'_, Map> {
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        map.ops += 1;
        if map.ops.is_multiple_of(SWEEP_EVERY) {
            map.entries.retain(|(_, e)| e.expires_us > now);
        }
        map
    }

    /// A policy of one quota (the common case): one lookup, and the entry
    /// found is written in place.
    fn check_one(&self, key: RateKey<'_>, policy: &Policy, suffix: &Arc<str>, cost: u32) -> Raw {
        let probe = Probe {
            scope: key.scope().as_str(),
            key: key.key(),
            suffix,
        };
        let hash = self.hash(key.key());
        let now = self.now_us();
        let mut map = self.lock(now);
        let found = map
            .entries
            .find_mut(hash, |(stored, _)| probe.matches(stored));
        let slot = found
            .as_ref()
            .map(|(_, e)| *e)
            .filter(|e| e.expires_us > now)
            .map(|e| (e.slot, e.expires_us));
        let mut writes = Writes::new();
        let raw = run(policy, &[slot], cost, now, &mut writes);
        if let Some(Some(entry)) = writes.pop() {
            match found {
                Some((_, existing)) => *existing = entry,
                None => self.insert(&mut map, key, suffix, hash, entry, now),
            }
        }
        raw
    }

    /// A policy of several quotas, decided together: a refusal by one takes
    /// nothing from the others.
    fn check_all(
        &self,
        key: RateKey<'_>,
        policy: &Policy,
        suffixes: &[Arc<str>],
        cost: u32,
    ) -> Raw {
        // The one hash is computed before the lock is taken.
        let hash = self.hash(key.key());
        let probes: PerQuota<Probe<'_>> = suffixes
            .iter()
            .map(|suffix| Probe {
                scope: key.scope().as_str(),
                key: key.key(),
                suffix,
            })
            .collect();
        let now = self.now_us();
        let mut map = self.lock(now);
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
                None => self.insert(&mut map, key, suffix, hash, entry, now),
            }
        }
        raw
    }

    /// Stores a new entry, evicting first if the map is full.
    fn insert(
        &self,
        map: &mut Map,
        key: RateKey<'_>,
        suffix: &Arc<str>,
        hash: u64,
        entry: Entry,
        now: u64,
    ) {
        if map.entries.len() >= self.max_keys {
            evict(&mut map.entries, now, self.max_keys);
        }
        let stored = Key {
            scope: key.scope().clone(),
            key: key.key().into(),
            suffix: suffix.clone(),
        };
        let rehash = |(stored, _): &(Key, Entry)| self.hash(&stored.key);
        map.entries.insert_unique(hash, (stored, entry), rehash);
    }
}

/// Drops expired entries; if the map is still full, drops arbitrary entries
/// down to 7/8 of the cap (those limits start afresh).
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

impl RateBackend for MemoryBackend {
    async fn check(&self, key: RateKey<'_>, policy: &Policy, cost: u32) -> Result<Decision> {
        Ok(self.inner.rates.check(key, policy, cost))
    }

    fn check_now(&self, key: RateKey<'_>, policy: &Policy, cost: u32) -> Option<Result<Decision>> {
        Some(Ok(self.inner.rates.check(key, policy, cost)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rate::{Algorithm, Quota};
    use std::num::NonZeroU32;

    #[test]
    fn live_keys_are_capped() {
        let table = RateTable::new(1000);
        let policy =
            Policy::new(Algorithm::Gcra).quota(Quota::per_hour(NonZeroU32::new(10).unwrap()));
        let scope = Name::new("scope").unwrap();
        for i in 0..10_000 {
            let key = format!("k{i}");
            let key = RateKey::new(&scope, &key).unwrap();
            assert!(table.check(key, &policy, 1).allowed);
        }
        assert!(table.len() <= 1000, "{} live keys", table.len());
    }
}
