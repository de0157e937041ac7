//! GCRA in memory, decided by `governor`'s keyed rate limiter.
//!
//! Each (scope, quota) has one [`QuotaLimiter`]: a `governor::RateLimiter`
//! over a state store of this module's ([`Store`]), a sharded map of
//! callers like governor's own `DashMap` store, with a cap on live
//! callers. At the cap, callers not yet in the store share one overflow
//! state with the same quota: a flood of distinct keys neither grows
//! memory nor resets the limits of callers already known. Idle callers
//! (whose state is that of a fresh one, by governor's `retain_recent`
//! rule) are swept shard by shard, each by the new caller that finds its
//! shard due: after enough new callers came into it, and not more than
//! once a second unless the shard is full.
//!
//! governor hands its state store the caller's theoretical arrival time
//! before and after each decision, and reads its clock once per decision:
//! both are noted on the deciding thread, so that a decision's figures
//! (remaining, reset, retry) are worked out from the very numbers governor
//! decided with.

use std::cell::Cell;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crossbeam_utils::CachePadded;
use governor::nanos::Nanos;
use governor::state::{InMemoryState, NotKeyed, StateStore};
use hashbrown::HashTable;
use parking_lot::RwLock;

use crate::backend::clock::Clock;
use crate::rate::caller::CallerKey;
use crate::rate::gcra::{Gcra, Step};

/// What governor last read and wrote on this thread.
struct Seen {
    /// Its clock, in Unix nanoseconds.
    now: Cell<u64>,
    /// The caller's theoretical arrival time before the decision ([`NONE`]:
    /// a fresh caller), and after it ([`NONE`]: refused).
    before: Cell<u64>,
    after: Cell<u64>,
}

/// No theoretical arrival time (one this far ahead would be centuries
/// away).
const NONE: u64 = u64::MAX;

thread_local! {
    static SEEN: Seen = const {
        Seen { now: Cell::new(0), before: Cell::new(NONE), after: Cell::new(NONE) }
    };
}

/// The backend's clock, as governor reads it.
#[derive(Clone, Debug)]
struct GovernorClock(Clock);

impl governor::clock::Clock for GovernorClock {
    type Instant = Nanos;

    #[inline]
    fn now(&self) -> Nanos {
        let now = self.0.now_ns();
        SEEN.with(|seen| seen.now.set(now));
        Nanos::new(now)
    }
}

/// Every caller's GCRA state for one (scope, quota), in shards that each
/// keep their own callers, counts and sweeps. Cheap to clone.
///
/// Nothing all callers share is written on the path of a decision or of a
/// new caller: a decision takes its shard's read lock, a new caller its
/// shard's write lock, and the counts that say when to sweep belong to the
/// shard. A store-wide count of callers or of arrivals would be one cache
/// line that every new caller writes, passed between cores on each, and a
/// sweep of the whole store would hold up every decider while it ran.
#[derive(Clone)]
pub(super) struct Store(Arc<StoreInner>);

struct StoreInner {
    shards: Box<[CachePadded<RwLock<Shard>>]>,
    hasher: ahash::RandomState,
    /// The cap on each shard's callers: the store's cap divided evenly, so
    /// the store holds at most its cap. Keys spread over the shards about
    /// evenly, so the first shard fills when the store is nearly full.
    shard_cap: usize,
    /// The state callers share once their shard is full.
    overflow: InMemoryState,
    /// governor's `t` (ns): a theoretical arrival time this far behind now
    /// is what governor's `retain_recent` drops, a state no different
    /// from a new caller's.
    interval: u64,
    /// governor's reference time (Unix ns), known once governor is made.
    start: OnceLock<u64>,
}

/// The callers of one shard and when it sweeps them.
struct Shard {
    callers: HashTable<(CallerKey, InMemoryState)>,
    /// New callers (stored or sent to the overflow state) since the last
    /// sweep.
    arrivals: usize,
    /// When the last sweep ran (Unix ns).
    swept_at: u64,
}

/// A shard sweeps after this many new callers at the least, and after
/// half as many as it holds: its work stays proportional to the callers
/// that came in.
const SWEEP_AFTER: usize = 32;

/// And a shard with room sweeps at most once in this long (ns): callers
/// who come back after their state has expired (most per-IP callers) are
/// then found in place, as in governor's own store, rather than dropped
/// and stored anew on each visit. A full shard sweeps whenever its
/// arrivals warrant: a sweep is what makes room for new callers.
const SWEEP_INTERVAL: u64 = 1_000_000_000;

/// A store has a shard per this many callers of its cap, up to
/// [`MAX_SHARDS`]: a sweep visits one shard, its share of the cap at the
/// most, while only that shard's deciders wait.
const CALLERS_PER_SHARD: usize = 1024;

/// The most shards a store has (governor's `DashMap` has as many on 16
/// cores): enough that threads seldom meet on one, few enough that a
/// store costs little more than an empty map per (scope, quota).
const MAX_SHARDS: usize = 64;

/// The value of `state`, not changing it.
fn read(state: &InMemoryState) -> Option<u64> {
    match state.measure_and_replace(&NotKeyed::NonKey, |tat| {
        Err::<((), Nanos), _>(tat.map(u64::from))
    }) {
        Ok(()) => None,
        Err(tat) => tat,
    }
}

/// Runs governor's `decide` on `state`, noting what it read and wrote.
#[inline]
fn measure<T, E>(
    state: &InMemoryState,
    decide: impl Fn(Option<Nanos>) -> Result<(T, Nanos), E>,
) -> Result<T, E> {
    state.measure_and_replace(&NotKeyed::NonKey, |before| {
        let result = decide(before);
        let after = result.as_ref().map_or(NONE, |(_, tat)| u64::from(*tat));
        SEEN.with(|seen| {
            seen.before.set(before.map_or(NONE, u64::from));
            seen.after.set(after);
        });
        result
    })
}

impl Store {
    /// A store of at most `cap` callers, for a quota whose governor `t`
    /// is `interval` ns.
    fn new(cap: usize, interval: u64) -> Self {
        let cap = cap.max(1);
        let shards = (cap / CALLERS_PER_SHARD)
            .clamp(1, MAX_SHARDS)
            .next_power_of_two();
        let shard = || {
            CachePadded::new(RwLock::new(Shard {
                callers: HashTable::new(),
                arrivals: 0,
                swept_at: 0,
            }))
        };
        Store(Arc::new(StoreInner {
            shards: (0..shards).map(|_| shard()).collect(),
            hasher: ahash::RandomState::new(),
            shard_cap: (cap / shards).max(1),
            overflow: InMemoryState::default(),
            interval,
            start: OnceLock::new(),
        }))
    }

    /// `key`'s hash, and its shard.
    #[inline]
    fn locate(&self, key: &CallerKey) -> (u64, &RwLock<Shard>) {
        let inner = &self.0;
        let hash = inner.hasher.hash_one(key);
        // Bits the shard's table does not place entries by (it takes the
        // low ones and the top seven).
        let shard = (hash >> 32) as usize & (inner.shards.len() - 1);
        (hash, &inner.shards[shard])
    }

    /// Runs `f` on the state of `key`: its own, a new one if its shard has
    /// room, or else the shared overflow state. `now` (Unix ns) is when a
    /// sweep this brings about runs.
    #[inline]
    fn with_state<R>(&self, key: &CallerKey, now: u64, f: impl FnOnce(&InMemoryState) -> R) -> R {
        let (hash, shard) = self.locate(key);
        {
            let shard = shard.read();
            if let Some((_, state)) = shard.callers.find(hash, |(k, _)| k == key) {
                return f(state);
            }
        }
        self.arrive(key, hash, shard, now, f)
    }

    /// [`with_state`](Self::with_state) for a caller its shard did not
    /// hold a moment ago.
    #[cold]
    fn arrive<R>(
        &self,
        key: &CallerKey,
        hash: u64,
        shard: &RwLock<Shard>,
        now: u64,
        f: impl FnOnce(&InMemoryState) -> R,
    ) -> R {
        let inner = &self.0;
        let mut shard = shard.write();
        if let Some((_, state)) = shard.callers.find(hash, |(k, _)| k == key) {
            return f(state);
        }
        shard.arrivals += 1;
        let held = shard.callers.len();
        let full = held >= inner.shard_cap;
        let due = shard.arrivals >= SWEEP_AFTER.max(held / 2)
            && (full || now.saturating_sub(shard.swept_at) >= SWEEP_INTERVAL);
        if due {
            self.sweep(&mut shard, now);
        }
        if shard.callers.len() >= inner.shard_cap {
            drop(shard);
            return f(&inner.overflow);
        }
        let hasher = |(k, _): &(CallerKey, InMemoryState)| inner.hasher.hash_one(k);
        let entry =
            shard
                .callers
                .insert_unique(hash, (key.clone(), InMemoryState::default()), hasher);
        f(&entry.get().1)
    }

    /// Drops the callers of `shard` whose state is a new caller's (as
    /// governor's `retain_recent` would at `now`), and gives back the room
    /// they took once the shard is mostly empty.
    #[cold]
    fn sweep(&self, shard: &mut Shard, now: u64) {
        let inner = &self.0;
        shard.arrivals = 0;
        shard.swept_at = now;
        // Before governor is made nothing is stored, so there is nothing
        // to drop.
        let Some(&start) = inner.start.get() else {
            return;
        };
        let drop_below = now.saturating_sub(start).saturating_sub(inner.interval);
        shard
            .callers
            .retain(|(_, state)| read(state).is_some_and(|tat| tat > drop_below));
        // Room for four times the callers left stays, so that the shard
        // does not shrink and grow back in turn.
        let held = shard.callers.len();
        if held.saturating_mul(4) < shard.callers.capacity() {
            let hasher = |(k, _): &(CallerKey, InMemoryState)| inner.hasher.hash_one(k);
            shard.callers.shrink_to(held.saturating_mul(4), hasher);
        }
    }

    /// The theoretical arrival time of `key` (none: a fresh caller), not
    /// storing it if it is new.
    fn peek(&self, key: &CallerKey) -> Option<u64> {
        let (hash, shard) = self.locate(key);
        let shard = shard.read();
        match shard.callers.find(hash, |(k, _)| k == key) {
            Some((_, state)) => read(state),
            None if shard.callers.len() >= self.0.shard_cap => read(&self.0.overflow),
            None => None,
        }
    }

    /// Sets the theoretical arrival time of `key` at `now` (Unix ns).
    fn set(&self, key: &CallerKey, tat: u64, now: u64) {
        let tat = Nanos::new(tat.max(1));
        self.with_state(key, now, |state| {
            let _ = state.measure_and_replace(&NotKeyed::NonKey, |_| Ok::<_, ()>(((), tat)));
        });
    }

    /// Forgets `key` (a caller in the overflow state stays there).
    fn remove(&self, key: &CallerKey) {
        let (hash, shard) = self.locate(key);
        if let Ok(entry) = shard.write().callers.find_entry(hash, |(k, _)| k == key) {
            entry.remove();
        }
    }

    /// Callers stored, in every shard.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.shards.iter().map(|s| s.read().callers.len()).sum()
    }

    /// Whether `key` has a state of its own.
    #[cfg(test)]
    fn holds(&self, key: &CallerKey) -> bool {
        let (hash, shard) = self.locate(key);
        shard.read().callers.find(hash, |(k, _)| k == key).is_some()
    }
}

impl StateStore for Store {
    type Key = CallerKey;

    #[inline]
    fn measure_and_replace<T, F, E>(&self, key: &CallerKey, f: F) -> Result<T, E>
    where
        F: Fn(Option<Nanos>) -> Result<(T, Nanos), E>,
    {
        // governor read its clock for this decision just before.
        let now = SEEN.with(|seen| seen.now.get());
        self.with_state(key, now, |state| measure(state, f))
    }
}

type Governor = governor::RateLimiter<
    CallerKey,
    Store,
    GovernorClock,
    governor::middleware::NoOpMiddleware<Nanos>,
>;

/// One GCRA quota of one scope: governor's keyed limiter and its store.
pub(super) struct QuotaLimiter {
    gcra: Gcra,
    store: Store,
    governor: Governor,
    clock: Clock,
    /// governor's reference time: its theoretical arrival times count from
    /// here.
    start: u64,
    /// Set once a policy of several quotas decides with this quota too:
    /// every decision then takes the caller's lock (see
    /// [`decide_all`]), so that the several quotas change together.
    shared: AtomicBool,
}

impl QuotaLimiter {
    /// A limiter of `gcra` reading `clock`, keeping at most `cap` callers.
    pub(super) fn new(gcra: Gcra, clock: Clock, cap: usize) -> Self {
        let burst = u32::try_from(gcra.burst()).unwrap_or(u32::MAX);
        let quota = governor::Quota::with_period(Duration::from_nanos(gcra.interval_ns()))
            .unwrap_or_else(|| unreachable!("an interval is at least 1 ns"))
            .allow_burst(NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN));
        let store = Store::new(cap, gcra.interval_ns().max(1));
        let governor = Governor::new(quota, store.clone(), GovernorClock(clock.clone()));
        // `new` read the clock once, on this thread: that is its start.
        let start = SEEN.with(|seen| seen.now.get());
        let _ = store.0.start.set(start);
        QuotaLimiter {
            gcra,
            store,
            governor,
            clock,
            start,
            shared: AtomicBool::new(false),
        }
    }

    pub(super) fn gcra(&self) -> &Gcra {
        &self.gcra
    }

    pub(super) fn share(&self) {
        self.shared.store(true, Ordering::Release);
    }

    #[inline]
    pub(super) fn is_shared(&self) -> bool {
        self.shared.load(Ordering::Acquire)
    }

    /// Now, as this limiter counts.
    fn now(&self) -> u64 {
        self.clock.now_ns().saturating_sub(self.start)
    }

    /// Decides `cost` for `key` with governor; a cost of 0 looks.
    #[inline]
    pub(super) fn decide(&self, key: &CallerKey, cost: u32) -> Step {
        let Some(n) = NonZeroU32::new(cost) else {
            let now = self.now();
            let debt = self
                .store
                .peek(key)
                .map_or(0, |tat| tat.saturating_sub(now));
            return self.gcra.step(debt, 0);
        };
        // governor measures the state once per decision (costs above the
        // burst, which it would refuse without measuring, are refused
        // before they get here), so what it noted is this decision's.
        let allowed = if n.get() == 1 {
            self.governor.check_key(key).is_ok()
        } else {
            matches!(self.governor.check_key_n(key, n), Ok(Ok(())))
        };
        let (now, before, after) =
            SEEN.with(|seen| (seen.now.get(), seen.before.get(), seen.after.get()));
        let now = now.saturating_sub(self.start);
        if allowed && after != NONE {
            Step {
                allowed: true,
                debt: after.saturating_sub(now),
                retry: 0,
            }
        } else {
            // A fresh caller owes nothing.
            let debt = if before == NONE {
                0
            } else {
                before.saturating_sub(now)
            };
            Step {
                allowed: false,
                ..self.gcra.step(debt, cost)
            }
        }
    }

    /// Forgets `key`: its next decision is a new caller's.
    pub(super) fn forget(&self, key: &CallerKey) {
        self.store.remove(key);
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.store.len()
    }
}

/// Decides `cost` for `key` under every quota of `limiters` at once: all
/// allow it and take it, or none takes anything. The caller holds the
/// lock every decision of this caller on these quotas takes.
pub(super) fn decide_all(limiters: &[Arc<QuotaLimiter>], key: &CallerKey, cost: u32) -> Vec<Step> {
    let now = limiters.first().map_or(0, |q| q.clock.now_ns());
    let steps: Vec<Step> = limiters
        .iter()
        .map(|q| {
            let at = now.saturating_sub(q.start);
            let debt = q.store.peek(key).map_or(0, |tat| tat.saturating_sub(at));
            q.gcra.step(debt, cost)
        })
        .collect();
    if cost > 0 && steps.iter().all(|s| s.allowed) {
        for (q, step) in limiters.iter().zip(&steps) {
            q.store
                .set(key, now.saturating_sub(q.start) + step.debt, now);
        }
    }
    steps
}

#[cfg(test)]
mod tests;
