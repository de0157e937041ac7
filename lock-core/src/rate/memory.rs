//! Rate limiting in memory: the same algorithms and decisions as the Redis
//! scripts, on a monotonic clock. Idle keys expire; the number of live keys is
//! capped, so memory stays flat under a stream of distinct keys.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use arrayvec::ArrayVec;
use hashbrown::HashTable;
use quanta::{Clock, Instant};

use super::{Algorithm, Decision, MAX_QUOTAS, Policy, RateBackend, RateKey, decision};
use crate::backend::MemoryBackend;
use crate::error::Result;
use crate::key::Name;

#[derive(Clone, Copy)]
enum Slot {
    Count(u64),
    Sliding {
        window: u64,
        current: u64,
        previous: u64,
    },
    Tat(u64),
}

#[derive(Clone, Copy)]
struct Entry {
    slot: Slot,
    expires_us: u64,
}

/// A quota's state is keyed by the limiter's scope, the caller's key and the
/// quota's suffix. Only a new key allocates (its text); lookups hash and
/// compare a borrowed [`Probe`], once per quota and decision.
struct Key {
    scope: Name,
    key: Box<str>,
    suffix: Arc<str>,
}

impl Key {
    fn probe(&self) -> Probe<'_> {
        Probe {
            scope: self.scope.as_str(),
            key: &self.key,
            suffix: &self.suffix,
        }
    }
}

#[derive(Hash, Clone, Copy)]
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

struct Raw {
    allowed: bool,
    index: usize,
    remaining: u64,
    reset_us: u64,
    retry_us: u64,
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
        let hash = self.hasher.hash_one(probe);
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
        // Hashes are computed once, before the lock is taken.
        let mut probes: PerQuota<(Probe<'_>, u64)> = PerQuota::new();
        for suffix in suffixes {
            let probe = Probe {
                scope: key.scope().as_str(),
                key: key.key(),
                suffix,
            };
            probes.push((probe, self.hasher.hash_one(probe)));
        }
        let now = self.now_us();
        let mut map = self.lock(now);
        let mut slots: PerQuota<Option<(Slot, u64)>> = PerQuota::new();
        for (probe, hash) in &probes {
            let found = map.entries.find(*hash, |(stored, _)| probe.matches(stored));
            slots.push(
                found
                    .filter(|(_, e)| e.expires_us > now)
                    .map(|(_, e)| (e.slot, e.expires_us)),
            );
        }
        let mut writes = PerQuota::new();
        let raw = run(policy, &slots, cost, now, &mut writes);
        for (((probe, hash), suffix), entry) in probes.iter().zip(suffixes).zip(writes) {
            let Some(entry) = entry else { continue };
            match map
                .entries
                .find_mut(*hash, |(stored, _)| probe.matches(stored))
            {
                Some((_, existing)) => *existing = entry,
                None => self.insert(&mut map, key, suffix, *hash, entry, now),
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
        let rehash = |(stored, _): &(Key, Entry)| self.hasher.hash_one(stored.probe());
        map.entries.insert_unique(hash, (stored, entry), rehash);
    }
}

/// Runs the policy's algorithm over the current state of each quota.
fn run(
    policy: &Policy,
    slots: &[Option<(Slot, u64)>],
    cost: u32,
    now: u64,
    writes: &mut Writes,
) -> Raw {
    let cost = u64::from(cost);
    match policy.algorithm() {
        Algorithm::FixedWindow => fixed_window(policy, slots, cost, now, writes),
        Algorithm::SlidingWindow => sliding_window(policy, slots, cost, now, writes),
        Algorithm::Gcra => gcra(policy, slots, cost, now, writes),
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

/// The entry to store for each quota, in order (`None`: leave it).
type Writes = PerQuota<Option<Entry>>;

fn fixed_window(
    policy: &Policy,
    slots: &[Option<(Slot, u64)>],
    cost: u64,
    now: u64,
    writes: &mut Writes,
) -> Raw {
    let quotas = policy.quotas();
    let mut state = PerQuota::new();
    let mut allowed = true;
    for (quota, slot) in quotas.iter().zip(slots) {
        let period = quota.period_ms() * 1000;
        let (count, ttl) = match slot {
            Some((Slot::Count(c), expires)) => (*c, expires - now),
            _ => (0, if cost > 0 { period } else { 0 }),
        };
        allowed &= count + cost <= u64::from(quota.limit());
        state.push((u64::from(quota.limit()), count, ttl));
    }
    // Redis TTLs are whole milliseconds.
    let ms = |us: u64| us.div_ceil(1000) * 1000;
    if allowed {
        for s in state.iter_mut() {
            // A new counter expires one period from now; an existing one keeps its TTL.
            writes.push((cost > 0).then(|| {
                s.1 += cost;
                Entry {
                    slot: Slot::Count(s.1),
                    expires_us: now + s.2,
                }
            }));
        }
        let best = argmin(state.iter().map(|s| s.0 as f64 - s.1 as f64));
        let (limit, count, ttl) = state[best];
        Raw {
            allowed,
            index: best,
            remaining: limit - count,
            reset_us: ms(ttl),
            retry_us: 0,
        }
    } else {
        let best = argmax(
            state
                .iter()
                .map(|s| if s.1 + cost > s.0 { s.2 as f64 } else { -1.0 }),
        );
        let (limit, count, ttl) = state[best];
        Raw {
            allowed,
            index: best,
            remaining: limit.saturating_sub(count),
            reset_us: ms(ttl),
            retry_us: ms(ttl),
        }
    }
}

struct SlidingState {
    limit: f64,
    period: u64,
    window: u64,
    elapsed: u64,
    current: u64,
    previous: u64,
    estimate: f64,
    retry: u64,
}

fn sliding_window(
    policy: &Policy,
    slots: &[Option<(Slot, u64)>],
    cost: u64,
    now_us: u64,
    writes: &mut Writes,
) -> Raw {
    let now = now_us / 1000;
    let quotas = policy.quotas();
    let mut state = PerQuota::new();
    let mut allowed = true;
    for (quota, slot) in quotas.iter().zip(slots) {
        let period = quota.period_ms();
        let limit = f64::from(quota.limit());
        let window = now / period;
        let elapsed = now - window * period;
        let (current, previous) = match slot {
            Some((
                Slot::Sliding {
                    window: w,
                    current,
                    previous,
                },
                _,
            )) if *w == window => (*current, *previous),
            Some((
                Slot::Sliding {
                    window: w, current, ..
                },
                _,
            )) if *w + 1 == window => (0, *current),
            _ => (0, 0),
        };
        let (p, c, costf) = (previous as f64, current as f64, cost as f64);
        let periodf = period as f64;
        let estimate = p * (periodf - elapsed as f64) / periodf + c;
        let mut retry = 0;
        if estimate + costf > limit + 1e-9 {
            allowed = false;
            let r = if c + costf > limit {
                (period - elapsed) as f64 + (periodf * (1.0 - (limit - costf) / c)).ceil()
            } else {
                (periodf * (1.0 - (limit - costf - c) / p)).ceil() - elapsed as f64
            };
            retry = if r < 1.0 { 1 } else { r as u64 };
        }
        state.push(SlidingState {
            limit,
            period,
            window,
            elapsed,
            current,
            previous,
            estimate,
            retry,
        });
    }
    let best = if allowed {
        for s in state.iter_mut() {
            writes.push((cost > 0).then(|| {
                s.current += cost;
                s.estimate += cost as f64;
                Entry {
                    slot: Slot::Sliding {
                        window: s.window,
                        current: s.current,
                        previous: s.previous,
                    },
                    expires_us: now_us + 2 * s.period * 1000,
                }
            }));
        }
        argmin(state.iter().map(|s| s.limit - s.estimate))
    } else {
        argmax(
            state
                .iter()
                .map(|s| if s.retry > 0 { s.retry as f64 } else { -1.0 }),
        )
    };
    let s = &state[best];
    let remaining = (s.limit - s.estimate + 1e-9).floor().max(0.0) as u64;
    let reset = if s.current > 0 {
        2 * s.period - s.elapsed
    } else if s.previous > 0 {
        s.period - s.elapsed
    } else {
        0
    };
    Raw {
        allowed,
        index: best,
        remaining,
        reset_us: reset * 1000,
        retry_us: s.retry * 1000,
    }
}

fn gcra(
    policy: &Policy,
    slots: &[Option<(Slot, u64)>],
    cost: u64,
    now: u64,
    writes: &mut Writes,
) -> Raw {
    let quotas = policy.quotas();
    let intervals = policy.gcra_intervals();
    // One quota (the common case): no state to gather and compare.
    if let ([quota], [slot], [interval]) = (quotas, slots, intervals) {
        let mut step = GcraStep::new(*interval, quota.limit(), slot, cost, now);
        let allowed = step.retry == 0;
        if allowed {
            writes.push(step.commit(cost));
        }
        return step.raw(allowed, 0, now);
    }
    let mut allowed = true;
    let mut steps = PerQuota::new();
    for ((quota, slot), &interval) in quotas.iter().zip(slots).zip(intervals) {
        let step = GcraStep::new(interval, quota.limit(), slot, cost, now);
        allowed &= step.retry == 0;
        steps.push(step);
    }
    let best = if allowed {
        for step in steps.iter_mut() {
            writes.push(step.commit(cost));
        }
        argmin(
            steps
                .iter()
                .map(|s| (now + s.window - s.tat) as f64 / s.interval as f64),
        )
    } else {
        argmax(
            steps
                .iter()
                .map(|s| if s.retry > 0 { s.retry as f64 } else { -1.0 }),
        )
    };
    steps[best].raw(allowed, best, now)
}

/// One quota's GCRA arithmetic, in microseconds.
#[derive(Clone, Copy)]
struct GcraStep {
    interval: u64,
    window: u64,
    /// The theoretical arrival time: as stored (or now), then as written.
    tat: u64,
    new_tat: u64,
    retry: u64,
}

impl GcraStep {
    fn new(interval: u64, limit: u32, slot: &Option<(Slot, u64)>, cost: u64, now: u64) -> Self {
        let window = interval * u64::from(limit);
        let tat = match slot {
            Some((Slot::Tat(t), _)) => (*t).max(now),
            _ => now,
        };
        let new_tat = tat + cost * interval;
        let retry = (new_tat.saturating_sub(window)).saturating_sub(now);
        GcraStep {
            interval,
            window,
            tat,
            new_tat,
            retry,
        }
    }

    /// Takes the cost: the entry to write (none for a cost of 0).
    fn commit(&mut self, cost: u64) -> Option<Entry> {
        self.tat = self.new_tat;
        (cost > 0).then_some(Entry {
            slot: Slot::Tat(self.new_tat),
            expires_us: self.new_tat,
        })
    }

    /// The decision's figures, with this quota deciding.
    fn raw(&self, allowed: bool, index: usize, now: u64) -> Raw {
        Raw {
            allowed,
            index,
            remaining: (now + self.window).saturating_sub(self.tat) / self.interval,
            reset_us: self.tat - now,
            retry_us: self.retry,
        }
    }
}

/// Index of the first smallest value.
fn argmin(values: impl ExactSizeIterator<Item = f64>) -> usize {
    if values.len() == 1 {
        return 0;
    }
    let mut best = (0, f64::INFINITY);
    for (i, v) in values.enumerate() {
        if v < best.1 {
            best = (i, v);
        }
    }
    best.0
}

/// Index of the first largest value.
fn argmax(values: impl ExactSizeIterator<Item = f64>) -> usize {
    argmin(values.map(|v| -v))
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
    use crate::rate::Quota;
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
