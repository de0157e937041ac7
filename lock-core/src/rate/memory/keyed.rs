//! GCRA in memory, decided by `governor`'s keyed rate limiter.
//!
//! Each (scope, quota) has one [`QuotaLimiter`]: a `governor::RateLimiter`
//! over a state store of this module's ([`Store`]), a sharded map of
//! callers like governor's own `DashMap` store, with a cap on live
//! callers. At the cap, callers not yet in the store share one overflow
//! state with the same quota: a flood of distinct keys neither grows
//! memory nor resets the limits of callers already known. A caller given
//! a place starts where the overflow state stands, so that what it took
//! there stays taken. Idle callers (whose state is that of a fresh one, by
//! governor's `retain_recent` rule) are swept shard by shard, each by the
//! new caller that finds its shard due: after enough new callers came into
//! it, and not more than once a second unless the shard is full.
//!
//! governor hands its state store the caller's theoretical arrival time
//! before and after each decision, and reads its clock once per decision:
//! both are noted on the deciding thread, so that a decision's figures
//! (remaining, reset, retry) are worked out from the very numbers governor
//! decided with.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use governor::nanos::Nanos;

use self::store::{NONE, SEEN, Store};
use crate::backend::clock::Clock;
use crate::rate::algorithm::gcra::{Gcra, Step};
use crate::rate::caller::CallerKey;

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
        store.started(start);
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
/// lock every decision of this caller on these quotas takes; that keeps
/// the caller's own states still, but not the overflow state, which
/// callers under other locks share. So each state is written only if it
/// is still what the decision read; if one was not, the writes made are
/// taken back (where nothing was built on them since) and the decision
/// is made again. A decision that keeps meeting others is refused:
/// nothing is ever granted past a quota.
pub(super) fn decide_all(limiters: &[Arc<QuotaLimiter>], key: &CallerKey, cost: u32) -> Vec<Step> {
    const TRIES: usize = 8;
    let mut steps = Vec::new();
    for _ in 0..TRIES {
        let now = limiters.first().map_or(0, |q| q.clock.now_ns());
        let seen: Vec<Option<u64>> = limiters.iter().map(|q| q.store.peek(key)).collect();
        steps = limiters
            .iter()
            .zip(&seen)
            .map(|(q, seen)| {
                let at = now.saturating_sub(q.start);
                q.gcra
                    .step(seen.map_or(0, |tat| tat.saturating_sub(at)), cost)
            })
            .collect();
        if cost == 0 || !steps.iter().all(|s| s.allowed) {
            return steps;
        }
        let tat = |q: &QuotaLimiter, step: &Step| now.saturating_sub(q.start) + step.debt;
        let written = limiters
            .iter()
            .zip(&steps)
            .zip(&seen)
            .take_while(|((q, step), seen)| q.store.replace(key, **seen, Some(tat(q, step)), now))
            .count();
        if written == limiters.len() {
            return steps;
        }
        for ((q, step), seen) in limiters.iter().zip(&steps).zip(&seen).take(written) {
            // `replace` stores at least 1 (governor's 0 is no state).
            let wrote = Some(tat(q, step).max(1));
            q.store.replace(key, wrote, *seen, now);
        }
    }
    // Refused, with the debts as they stood at the last try (or higher):
    // "remaining" errs low, and a retry may come at once.
    for step in &mut steps {
        *step = Step {
            allowed: false,
            retry: 0,
            ..*step
        };
    }
    steps
}

mod store;
#[cfg(test)]
mod tests;
