//! GCRA in memory, decided by `governor`'s keyed rate limiter.
//!
//! Each (scope, quota) has one [`QuotaLimiter`]: a `governor::RateLimiter`
//! over a state store of this module's ([`Store`]), a `DashMap` of callers
//! like governor's own keyed store, with a cap on live callers. At the cap,
//! callers not yet in the store share one overflow state with the same
//! quota: a flood of distinct keys neither grows memory nor resets the
//! limits of callers already known. Idle callers (whose state is that of a
//! fresh one) are dropped by governor's `retain_recent`, which runs once
//! enough new callers came in since it last ran.
//!
//! governor hands its state store the caller's theoretical arrival time
//! before and after each decision, and reads its clock once per decision:
//! both are noted on the deciding thread, so that a decision's figures
//! (remaining, reset, retry) are worked out from the very numbers governor
//! decided with.

use std::cell::Cell;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use dashmap::DashMap;
use dashmap::mapref::entry::Entry;
use governor::nanos::Nanos;
use governor::state::keyed::ShrinkableKeyedStateStore;
use governor::state::{InMemoryState, NotKeyed, StateStore};

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

/// Every caller's GCRA state for one (scope, quota). Cheap to clone.
#[derive(Clone)]
pub(super) struct Store(Arc<StoreInner>);

struct StoreInner {
    callers: DashMap<CallerKey, InMemoryState, ahash::RandomState>,
    /// About `callers.len()`, without visiting every shard.
    live: AtomicUsize,
    cap: usize,
    /// The state callers share once the store is full.
    overflow: InMemoryState,
    /// New callers (stored or sent to the overflow state) since the last
    /// sweep.
    arrivals: AtomicUsize,
}

/// A sweep is due after this many new callers at the least, and after
/// half as many as the store holds: its work stays proportional to the
/// callers that came in.
const SWEEP_AFTER: usize = 1024;

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
    fn new(cap: usize) -> Self {
        Store(Arc::new(StoreInner {
            callers: DashMap::with_hasher(ahash::RandomState::new()),
            live: AtomicUsize::new(0),
            cap: cap.max(1),
            overflow: InMemoryState::default(),
            arrivals: AtomicUsize::new(0),
        }))
    }

    /// Runs `f` on the state of `key`: its own, a new one if the store has
    /// room, or else the shared overflow state.
    #[inline]
    fn with_state<R>(&self, key: &CallerKey, f: impl FnOnce(&InMemoryState) -> R) -> R {
        let inner = &self.0;
        if let Some(state) = inner.callers.get(key) {
            return f(&state);
        }
        inner.arrivals.fetch_add(1, Ordering::Relaxed);
        if inner.live.load(Ordering::Relaxed) >= inner.cap {
            return f(&inner.overflow);
        }
        match inner.callers.entry(key.clone()) {
            Entry::Occupied(entry) => f(entry.get()),
            Entry::Vacant(entry) => {
                inner.live.fetch_add(1, Ordering::Relaxed);
                f(&entry.insert(InMemoryState::default()))
            }
        }
    }

    /// The theoretical arrival time of `key` (none: a fresh caller), not
    /// storing it if it is new.
    fn peek(&self, key: &CallerKey) -> Option<u64> {
        let inner = &self.0;
        match inner.callers.get(key) {
            Some(state) => read(&state),
            None if inner.live.load(Ordering::Relaxed) >= inner.cap => read(&inner.overflow),
            None => None,
        }
    }

    /// Sets the theoretical arrival time of `key`.
    fn set(&self, key: &CallerKey, tat: u64) {
        let tat = Nanos::new(tat.max(1));
        self.with_state(key, |state| {
            let _ = state.measure_and_replace(&NotKeyed::NonKey, |_| Ok::<_, ()>(((), tat)));
        });
    }

    /// Forgets `key` (a caller in the overflow state stays there).
    fn remove(&self, key: &CallerKey) {
        if self.0.callers.remove(key).is_some() {
            self.0.live.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Whether enough new callers came in to sweep; the caller that sees it
    /// first sweeps.
    #[inline]
    fn sweep_due(&self) -> bool {
        let inner = &self.0;
        let arrivals = inner.arrivals.load(Ordering::Relaxed);
        if arrivals < SWEEP_AFTER {
            return false;
        }
        let due = arrivals >= inner.live.load(Ordering::Relaxed) / 2;
        due && inner
            .arrivals
            .compare_exchange(arrivals, 0, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.callers.len()
    }
}

impl StateStore for Store {
    type Key = CallerKey;

    #[inline]
    fn measure_and_replace<T, F, E>(&self, key: &CallerKey, f: F) -> Result<T, E>
    where
        F: Fn(Option<Nanos>) -> Result<(T, Nanos), E>,
    {
        self.with_state(key, |state| measure(state, f))
    }
}

impl ShrinkableKeyedStateStore<CallerKey> for Store {
    fn retain_recent(&self, drop_below: Nanos) {
        let inner = &self.0;
        let keep = |state: &InMemoryState| read(state).is_some_and(|tat| tat > drop_below.into());
        inner.callers.retain(|_, state| keep(state));
        inner.live.store(inner.callers.len(), Ordering::Relaxed);
    }

    fn shrink_to_fit(&self) {
        let callers = &self.0.callers;
        // Only once a sweep left it mostly empty: room for four times the
        // live callers stays, so it does not shrink and grow back in turn.
        if callers.len().saturating_mul(4) < callers.capacity() {
            callers.shrink_to_fit();
        }
    }

    fn len(&self) -> usize {
        self.0.callers.len()
    }

    fn is_empty(&self) -> bool {
        self.0.callers.is_empty()
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
        let store = Store::new(cap);
        let governor = Governor::new(quota, store.clone(), GovernorClock(clock.clone()));
        // `new` read the clock once, on this thread: that is its start.
        let start = SEEN.with(|seen| seen.now.get());
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
        let step = if allowed && after != NONE {
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
        };
        if self.store.sweep_due() {
            self.sweep();
        }
        step
    }

    /// Forgets `key`: its next decision is a new caller's.
    pub(super) fn forget(&self, key: &CallerKey) {
        self.store.remove(key);
    }

    /// Drops idle callers (governor's `retain_recent`), and gives back
    /// the room they took.
    #[cold]
    fn sweep(&self) {
        self.governor.retain_recent();
        self.governor.shrink_to_fit();
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
            q.store.set(key, now.saturating_sub(q.start) + step.debt);
        }
    }
    steps
}

#[cfg(test)]
mod tests;
