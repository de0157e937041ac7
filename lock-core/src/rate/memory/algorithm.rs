//! The algorithms of the memory backend, apart from the table that keeps
//! their state: each takes the stored state of every quota of a policy and
//! the time, and says what to decide and what to store. They decide as the
//! Redis scripts do, in integer microseconds.

use super::{PerQuota, Policy};
use crate::rate::Algorithm;

/// The state of one quota of one key.
#[derive(Clone, Copy)]
pub(super) enum Slot {
    Count(u64),
    Sliding {
        window: u64,
        current: u64,
        previous: u64,
    },
    Tat(u64),
}

/// A quota's stored state and when it expires.
#[derive(Clone, Copy)]
pub(super) struct Entry {
    pub(super) slot: Slot,
    pub(super) expires_us: u64,
}

/// What an algorithm decided, before it becomes a [`Decision`](crate::rate::Decision).
pub(super) struct Raw {
    pub(super) allowed: bool,
    pub(super) index: usize,
    pub(super) remaining: u64,
    pub(super) reset_us: u64,
    pub(super) retry_us: u64,
}

/// Runs the policy's algorithm over the current state of each quota.
pub(super) fn run(
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

/// The entry to store for each quota, in order (`None`: leave it).
pub(super) type Writes = PerQuota<Option<Entry>>;

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
