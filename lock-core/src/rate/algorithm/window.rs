//! The window algorithms in memory: each takes the stored state of every
//! quota of a policy and the time, and says what to decide and what to
//! store. They decide as the Redis scripts (`fixed_window.lua`,
//! `sliding_window.lua`) do, on Unix time, so sliding windows begin and
//! end where they do on Redis.

use std::time::Duration;

use crate::rate::{Algorithm, Policy};

/// The state of one quota of one caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Slot {
    /// A fixed window's count.
    Count(u64),
    /// A sliding window's index and the counts of it and the one before.
    Sliding {
        window: u64,
        current: u64,
        previous: u64,
    },
}

/// A quota's stored state and when it expires (Unix microseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Entry {
    pub(super) slot: Slot,
    pub(super) expires_us: u64,
}

/// What a window algorithm decided.
#[derive(Debug)]
pub(super) struct Outcome {
    pub(super) allowed: bool,
    /// The deciding quota.
    pub(super) index: usize,
    pub(super) remaining: u64,
    pub(super) reset: Duration,
    pub(super) retry: Duration,
    /// The entry to store for each quota, in order (`None`: leave it).
    pub(super) writes: Vec<Option<Entry>>,
    /// The cost decided: the one asked for, or for at most a cost, as many
    /// as every quota had room for (at least one).
    pub(super) cost: u32,
}

/// Runs the policy's window algorithm over the live state of each quota,
/// for `cost`, or with `at_most`, for as many units up to `cost` as every
/// quota has room for (one when none has, to be refused as one would).
pub(super) fn run(
    policy: &Policy,
    slots: &[Option<Entry>],
    cost: u32,
    at_most: bool,
    now_us: u64,
) -> Outcome {
    let cost = if at_most {
        room(policy, slots, now_us).min(u64::from(cost)).max(1)
    } else {
        u64::from(cost)
    };
    let mut outcome = match policy.algorithm() {
        Algorithm::SlidingWindow => sliding_window(policy, slots, cost, now_us),
        _ => fixed_window(policy, slots, cost, now_us),
    };
    outcome.cost = u32::try_from(cost).unwrap_or(u32::MAX);
    outcome
}

/// The units every quota has room for now.
fn room(policy: &Policy, slots: &[Option<Entry>], now_us: u64) -> u64 {
    let room = policy.quotas().iter().zip(slots).map(|(quota, slot)| {
        let limit = u64::from(quota.limit());
        match policy.algorithm() {
            Algorithm::SlidingWindow => {
                let seen = Seen::of(quota.period_ms(), slot, now_us / 1000);
                (f64::from(quota.limit()) - seen.estimate + 1e-9)
                    .floor()
                    .max(0.0) as u64
            }
            _ => match slot {
                Some(Entry {
                    slot: Slot::Count(count),
                    ..
                }) => limit.saturating_sub(*count),
                _ => limit,
            },
        }
    });
    room.min().unwrap_or(0)
}

/// Whole milliseconds, as Redis keeps TTLs, rounded up.
fn ms_ceil(us: u64) -> Duration {
    Duration::from_millis(us.div_ceil(1000))
}

fn fixed_window(policy: &Policy, slots: &[Option<Entry>], cost: u64, now: u64) -> Outcome {
    // Per quota: limit, count, time left in the window (us).
    let mut state: Vec<(u64, u64, u64)> = Vec::with_capacity(slots.len());
    let mut allowed = true;
    for (quota, slot) in policy.quotas().iter().zip(slots) {
        let period = quota.period_ms() * 1000;
        let (count, ttl) = match slot {
            Some(Entry {
                slot: Slot::Count(c),
                expires_us,
            }) => (*c, expires_us - now),
            _ => (0, if cost > 0 { period } else { 0 }),
        };
        allowed &= count + cost <= u64::from(quota.limit());
        state.push((u64::from(quota.limit()), count, ttl));
    }
    if allowed {
        let writes = state
            .iter_mut()
            .map(|s| {
                // A new counter expires one period from now; an existing
                // one keeps its TTL.
                (cost > 0).then(|| {
                    s.1 += cost;
                    Entry {
                        slot: Slot::Count(s.1),
                        expires_us: now + s.2,
                    }
                })
            })
            .collect();
        let best = first_min(state.iter().map(|s| s.0 as f64 - s.1 as f64));
        let (limit, count, ttl) = state[best];
        Outcome {
            allowed,
            index: best,
            remaining: limit - count,
            reset: ms_ceil(ttl),
            retry: Duration::ZERO,
            writes,
            cost: 0,
        }
    } else {
        let best = first_max(state.iter().map(
            |s| {
                if s.1 + cost > s.0 { s.2 as f64 } else { -1.0 }
            },
        ));
        let (limit, count, ttl) = state[best];
        Outcome {
            allowed,
            index: best,
            remaining: limit.saturating_sub(count),
            reset: ms_ceil(ttl),
            retry: ms_ceil(ttl),
            writes: Vec::new(),
            cost: 0,
        }
    }
}

struct Sliding {
    limit: f64,
    period: u64,
    window: u64,
    elapsed: u64,
    current: u64,
    previous: u64,
    estimate: f64,
    retry: u64,
}

/// A sliding window's state as seen at one time: the window now, how far
/// into it, the counts of it and of the one before, and the estimate.
struct Seen {
    window: u64,
    elapsed: u64,
    current: u64,
    previous: u64,
    estimate: f64,
}

impl Seen {
    /// Windows are whole periods of Unix time in milliseconds, as on Redis.
    fn of(period: u64, slot: &Option<Entry>, now_ms: u64) -> Seen {
        let window = now_ms / period;
        let elapsed = now_ms - window * period;
        let (current, previous) = match slot.map(|e| e.slot) {
            Some(Slot::Sliding {
                window: w,
                current,
                previous,
            }) if w == window => (current, previous),
            Some(Slot::Sliding {
                window: w, current, ..
            }) if w + 1 == window => (0, current),
            _ => (0, 0),
        };
        let periodf = period as f64;
        let estimate = previous as f64 * (periodf - elapsed as f64) / periodf + current as f64;
        Seen {
            window,
            elapsed,
            current,
            previous,
            estimate,
        }
    }
}

fn sliding_window(policy: &Policy, slots: &[Option<Entry>], cost: u64, now_us: u64) -> Outcome {
    let now = now_us / 1000;
    let mut state: Vec<Sliding> = Vec::with_capacity(slots.len());
    let mut allowed = true;
    for (quota, slot) in policy.quotas().iter().zip(slots) {
        let period = quota.period_ms();
        let limit = f64::from(quota.limit());
        let Seen {
            window,
            elapsed,
            current,
            previous,
            estimate,
        } = Seen::of(period, slot, now);
        let (p, c, costf, periodf) = (previous as f64, current as f64, cost as f64, period as f64);
        let mut retry = 0;
        if estimate + costf > limit + 1e-9 {
            allowed = false;
            let r = if c + costf > limit {
                // Wait for the next window, then for this one's weight to fade.
                (period - elapsed) as f64 + (periodf * (1.0 - (limit - costf) / c)).ceil()
            } else {
                (periodf * (1.0 - (limit - costf - c) / p)).ceil() - elapsed as f64
            };
            retry = if r < 1.0 { 1 } else { r as u64 };
        }
        state.push(Sliding {
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
    let (best, writes) = if allowed {
        let writes = state
            .iter_mut()
            .map(|s| {
                (cost > 0).then(|| {
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
                })
            })
            .collect();
        (
            first_min(state.iter().map(|s| s.limit - s.estimate)),
            writes,
        )
    } else {
        let best = first_max(
            state
                .iter()
                .map(|s| if s.retry > 0 { s.retry as f64 } else { -1.0 }),
        );
        (best, Vec::new())
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
    Outcome {
        allowed,
        index: best,
        remaining,
        reset: Duration::from_millis(reset),
        retry: Duration::from_millis(s.retry),
        writes,
        cost: 0,
    }
}

/// Index of the first smallest value.
fn first_min(values: impl Iterator<Item = f64>) -> usize {
    let mut best = (0, f64::INFINITY);
    for (i, v) in values.enumerate() {
        if v < best.1 {
            best = (i, v);
        }
    }
    best.0
}

/// Index of the first largest value.
fn first_max(values: impl Iterator<Item = f64>) -> usize {
    first_min(values.map(|v| -v))
}
