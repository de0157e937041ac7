//! Rate limiting in memory: the same algorithms and decisions as the Redis
//! scripts, on a monotonic clock. Idle keys expire; the number of live keys is
//! capped, so memory stays flat under a stream of distinct keys.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use super::redis::gcra_interval_us;
use super::{Algorithm, Decision, MAX_QUOTAS, Policy, RateBackend, decision};
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

/// A quota's state is keyed by the limited name and the quota's suffix.
type Key = (Name, Arc<str>);

/// Keys come from clients (IP addresses, user ids): the hasher is keyed at
/// random, like std's, but faster.
type Entries = HashMap<Key, Entry, ahash::RandomState>;

#[derive(Default)]
struct Map {
    entries: Entries,
    ops: u64,
}

/// Rate-limit state of one [`MemoryBackend`].
pub(crate) struct RateTable {
    map: Mutex<Map>,
    base: Instant,
    max_keys: usize,
}

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
        RateTable {
            map: Mutex::new(Map::default()),
            base: Instant::now(),
            max_keys: max_keys.max(1),
        }
    }

    fn now_us(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_micros()).unwrap_or(u64::MAX)
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

    fn check(&self, name: &Name, policy: &Policy, cost: u32) -> Decision {
        let now = self.now_us();
        let key = |suffix: &Arc<str>| -> Key { (name.clone(), suffix.clone()) };
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        map.ops += 1;
        if map.ops.is_multiple_of(SWEEP_EVERY) {
            map.entries.retain(|_, e| e.expires_us > now);
        }
        // Fixed-size buffers: a decision allocates nothing here.
        let mut buffer = [None; MAX_QUOTAS];
        for (slot, suffix) in buffer.iter_mut().zip(policy.suffixes()) {
            *slot = map
                .entries
                .get(&key(suffix))
                .filter(|e| e.expires_us > now)
                .map(|e| (e.slot, e.expires_us));
        }
        let slots = &buffer[..policy.quotas().len()];
        let cost = u64::from(cost);
        let (raw, writes) = match policy.algorithm() {
            Algorithm::FixedWindow => fixed_window(policy, slots, cost, now),
            Algorithm::SlidingWindow => sliding_window(policy, slots, cost, now),
            Algorithm::Gcra => gcra(policy, slots, cost, now),
        };
        for (suffix, entry) in policy.suffixes().iter().zip(writes) {
            let Some(entry) = entry else { continue };
            let key = key(suffix);
            match map.entries.get_mut(&key) {
                Some(existing) => *existing = entry,
                None => {
                    if map.entries.len() >= self.max_keys {
                        evict(&mut map.entries, now, self.max_keys);
                    }
                    map.entries.insert(key, entry);
                }
            }
        }
        drop(map);
        decision(
            policy,
            raw.allowed,
            raw.index,
            raw.remaining,
            raw.reset_us,
            raw.retry_us,
        )
    }
}

/// Drops expired entries; if the map is still full, drops arbitrary entries
/// down to 7/8 of the cap (those limits start afresh).
fn evict(entries: &mut Entries, now: u64, max: usize) {
    entries.retain(|_, e| e.expires_us > now);
    if entries.len() >= max {
        let mut excess = entries.len() - max * 7 / 8;
        tracing::debug!(excess, "rate-limit key cap reached, evicting live keys");
        entries.retain(|_, _| {
            if excess > 0 {
                excess -= 1;
                false
            } else {
                true
            }
        });
    }
}

type Writes = [Option<Entry>; MAX_QUOTAS];

fn fixed_window(
    policy: &Policy,
    slots: &[Option<(Slot, u64)>],
    cost: u64,
    now: u64,
) -> (Raw, Writes) {
    let quotas = policy.quotas();
    let mut state = Vec::with_capacity(quotas.len());
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
        let mut writes = [None; MAX_QUOTAS];
        for (s, write) in state.iter_mut().zip(writes.iter_mut()) {
            if cost > 0 {
                // A new counter expires one period from now; an existing one keeps its TTL.
                s.1 += cost;
                *write = Some(Entry {
                    slot: Slot::Count(s.1),
                    expires_us: now + s.2,
                });
            }
        }
        let best = argmin(state.iter().map(|s| s.0 as f64 - s.1 as f64));
        let (limit, count, ttl) = state[best];
        let raw = Raw {
            allowed,
            index: best,
            remaining: limit - count,
            reset_us: ms(ttl),
            retry_us: 0,
        };
        (raw, writes)
    } else {
        let best = argmax(
            state
                .iter()
                .map(|s| if s.1 + cost > s.0 { s.2 as f64 } else { -1.0 }),
        );
        let (limit, count, ttl) = state[best];
        let raw = Raw {
            allowed,
            index: best,
            remaining: limit.saturating_sub(count),
            reset_us: ms(ttl),
            retry_us: ms(ttl),
        };
        (raw, [None; MAX_QUOTAS])
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
) -> (Raw, Writes) {
    let now = now_us / 1000;
    let quotas = policy.quotas();
    let mut state = Vec::with_capacity(quotas.len());
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
    let mut writes: Writes = [None; MAX_QUOTAS];
    let best = if allowed {
        for (s, write) in state.iter_mut().zip(writes.iter_mut()) {
            if cost > 0 {
                s.current += cost;
                s.estimate += cost as f64;
                *write = Some(Entry {
                    slot: Slot::Sliding {
                        window: s.window,
                        current: s.current,
                        previous: s.previous,
                    },
                    expires_us: now_us + 2 * s.period * 1000,
                });
            }
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
    let raw = Raw {
        allowed,
        index: best,
        remaining,
        reset_us: reset * 1000,
        retry_us: s.retry * 1000,
    };
    (raw, writes)
}

fn gcra(policy: &Policy, slots: &[Option<(Slot, u64)>], cost: u64, now: u64) -> (Raw, Writes) {
    let quotas = policy.quotas();
    let mut allowed = true;
    let mut state = Vec::with_capacity(quotas.len());
    for (quota, slot) in quotas.iter().zip(slots) {
        let interval = gcra_interval_us(quota.limit(), quota.period_ms() * 1000);
        let window = interval * u64::from(quota.limit());
        let tat = match slot {
            Some((Slot::Tat(t), _)) => (*t).max(now),
            _ => now,
        };
        let new_tat = tat + cost * interval;
        let retry = (new_tat.saturating_sub(window)).saturating_sub(now);
        allowed &= retry == 0;
        state.push((interval, window, tat, new_tat, retry));
    }
    let mut writes: Writes = [None; MAX_QUOTAS];
    let best = if allowed {
        for (s, write) in state.iter_mut().zip(writes.iter_mut()) {
            if cost > 0 {
                *write = Some(Entry {
                    slot: Slot::Tat(s.3),
                    expires_us: s.3,
                });
            }
            s.2 = s.3;
        }
        argmin(state.iter().map(|s| ((now + s.1 - s.2) / s.0) as f64))
    } else {
        argmax(
            state
                .iter()
                .map(|s| if s.4 > 0 { s.4 as f64 } else { -1.0 }),
        )
    };
    let (interval, window, tat, _, retry) = state[best];
    let raw = Raw {
        allowed,
        index: best,
        remaining: (now + window).saturating_sub(tat) / interval,
        reset_us: tat - now,
        retry_us: retry,
    };
    (raw, writes)
}

/// Index of the first smallest value.
fn argmin(values: impl Iterator<Item = f64>) -> usize {
    let mut best = (0, f64::INFINITY);
    for (i, v) in values.enumerate() {
        if v < best.1 {
            best = (i, v);
        }
    }
    best.0
}

/// Index of the first largest value.
fn argmax(values: impl Iterator<Item = f64>) -> usize {
    argmin(values.map(|v| -v))
}

impl RateBackend for MemoryBackend {
    async fn check(&self, name: &Name, policy: &Policy, cost: u32) -> Result<Decision> {
        Ok(self.inner.rates.check(name, policy, cost))
    }

    fn check_now(&self, name: &Name, policy: &Policy, cost: u32) -> Option<Result<Decision>> {
        Some(Ok(self.inner.rates.check(name, policy, cost)))
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
        for i in 0..10_000 {
            let name = Name::new(format!("k{i}")).unwrap();
            assert!(table.check(&name, &policy, 1).allowed);
        }
        assert!(table.len() <= 1000, "{} live keys", table.len());
    }
}
