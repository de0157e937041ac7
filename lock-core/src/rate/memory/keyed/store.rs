//! Every caller's GCRA state for one (scope, quota), as governor's state
//! store: a sharded map with a cap on live callers, swept shard by shard,
//! and what governor read and wrote on this thread for the decision's
//! figures.

use std::cell::Cell;
use std::sync::{Arc, OnceLock};

use crossbeam_utils::CachePadded;
use governor::nanos::Nanos;
use governor::state::{InMemoryState, NotKeyed, StateStore};
use hashbrown::HashTable;
use parking_lot::RwLock;

use crate::rate::caller::CallerKey;

/// What governor last read and wrote on this thread.
pub(super) struct Seen {
    /// Its clock, in Unix nanoseconds.
    pub(super) now: Cell<u64>,
    /// The caller's theoretical arrival time before the decision ([`NONE`]:
    /// a fresh caller), and after it ([`NONE`]: refused).
    pub(super) before: Cell<u64>,
    pub(super) after: Cell<u64>,
}

/// No theoretical arrival time (one this far ahead would be centuries
/// away).
pub(super) const NONE: u64 = u64::MAX;

thread_local! {
    pub(super) static SEEN: Seen = const {
        Seen { now: Cell::new(0), before: Cell::new(NONE), after: Cell::new(NONE) }
    };
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
    /// Notes governor's reference time (Unix ns), read once it is made.
    pub(super) fn started(&self, start: u64) {
        let _ = self.0.start.set(start);
    }

    /// A store of at most `cap` callers, for a quota whose governor `t`
    /// is `interval` ns.
    pub(super) fn new(cap: usize, interval: u64) -> Self {
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
    pub(super) fn with_state<R>(
        &self,
        key: &CallerKey,
        now: u64,
        f: impl FnOnce(&InMemoryState) -> R,
    ) -> R {
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
        // The shard's lock is held while the overflow state decides too,
        // so that a caller's decisions there are all over before it can
        // be given a state of its own (which starts from the overflow's).
        if shard.callers.len() >= inner.shard_cap {
            return f(&inner.overflow);
        }
        // A newcomer starts where the overflow state stands: it may have
        // been one of the callers that shared it a moment ago, and what it
        // took there must not come back with a place of its own. A state
        // the overflow never had, or that is behind now, is a new caller's.
        let state = InMemoryState::default();
        if let Some(tat) = read(&inner.overflow) {
            let _ = state
                .measure_and_replace(&NotKeyed::NonKey, |_| Ok::<_, ()>(((), Nanos::new(tat))));
        }
        let hasher = |(k, _): &(CallerKey, InMemoryState)| inner.hasher.hash_one(k);
        let entry = shard
            .callers
            .insert_unique(hash, (key.clone(), state), hasher);
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
    /// storing it if it is new. A caller the store does not hold stands
    /// where the overflow state does, in it or (see [`arrive`](Self::arrive))
    /// in a state of its own that starts there.
    pub(super) fn peek(&self, key: &CallerKey) -> Option<u64> {
        let (hash, shard) = self.locate(key);
        let shard = shard.read();
        match shard.callers.find(hash, |(k, _)| k == key) {
            Some((_, state)) => read(state),
            None => read(&self.0.overflow),
        }
    }

    /// Sets the theoretical arrival time of `key` to `tat` at `now` (Unix
    /// ns), if it is still `seen` (as [`peek`](Self::peek) read it; `tat`
    /// none: back to a fresh caller's). Says whether it was: a caller's
    /// lock keeps its own state from changing, but not the overflow
    /// state, which callers under other locks decide on too.
    pub(super) fn replace(
        &self,
        key: &CallerKey,
        seen: Option<u64>,
        tat: Option<u64>,
        now: u64,
    ) -> bool {
        // governor keeps 0 for "no state".
        let tat = Nanos::new(tat.map_or(0, |tat| tat.max(1)));
        self.with_state(key, now, |state| {
            state
                .measure_and_replace(&NotKeyed::NonKey, |current| {
                    if current.map(u64::from) == seen {
                        Ok(((), tat))
                    } else {
                        Err(())
                    }
                })
                .is_ok()
        })
    }

    /// Forgets `key` (a caller in the overflow state stays there).
    pub(super) fn remove(&self, key: &CallerKey) {
        let (hash, shard) = self.locate(key);
        if let Ok(entry) = shard.write().callers.find_entry(hash, |(k, _)| k == key) {
            entry.remove();
        }
    }

    /// Callers stored, in every shard.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.0.shards.iter().map(|s| s.read().callers.len()).sum()
    }

    /// Whether `key` has a state of its own.
    #[cfg(test)]
    pub(super) fn holds(&self, key: &CallerKey) -> bool {
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
