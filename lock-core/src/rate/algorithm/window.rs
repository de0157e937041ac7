//! What the window algorithms share in memory: the state a window table
//! keeps for one quota of one caller, what a step decided, and running a
//! policy's step over every quota. The steps themselves are in
//! [`fixed_window`](super::fixed_window) and
//! [`sliding_window`](super::sliding_window); they decide as their Redis
//! scripts do, on Unix time, so sliding windows begin and end where they
//! do on Redis.

use std::time::Duration;

use super::Window;
use crate::rate::quota::Quota;

/// The state of one quota of one caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Slot {
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
pub(crate) struct Entry {
    pub(crate) slot: Slot,
    pub(crate) expires_us: u64,
}

/// What a window algorithm decided.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub(crate) allowed: bool,
    /// The deciding quota.
    pub(crate) index: usize,
    pub(crate) remaining: u64,
    pub(crate) reset: Duration,
    pub(crate) retry: Duration,
    /// The entry to store for each quota, in order (`None`: leave it).
    pub(crate) writes: Vec<Option<Entry>>,
    /// The cost decided: the one asked for, or for at most a cost, as many
    /// as every quota had room for (at least one).
    pub(crate) cost: u32,
}

/// Runs `window`'s step over the live state of each of a policy's
/// `quotas`, for `cost`, or with `at_most`, for as many units up to
/// `cost` as every quota has room for (one when none has, to be refused as
/// one would).
pub(crate) fn run(
    window: &Window,
    quotas: &[Quota],
    slots: &[Option<Entry>],
    cost: u32,
    at_most: bool,
    now_us: u64,
) -> Outcome {
    let cost = if at_most {
        let room = quotas
            .iter()
            .zip(slots)
            .map(|(quota, slot)| (window.room)(quota, slot, now_us))
            .min()
            .unwrap_or(0);
        room.min(u64::from(cost)).max(1)
    } else {
        u64::from(cost)
    };
    let mut outcome = (window.decide)(quotas, slots, cost, now_us);
    outcome.cost = u32::try_from(cost).unwrap_or(u32::MAX);
    outcome
}

/// Whole milliseconds, as Redis keeps TTLs, rounded up.
pub(super) fn ms_ceil(us: u64) -> Duration {
    Duration::from_millis(us.div_ceil(1000))
}

/// Index of the first smallest value.
pub(super) fn first_min(values: impl Iterator<Item = f64>) -> usize {
    let mut best = (0, f64::INFINITY);
    for (i, v) in values.enumerate() {
        if v < best.1 {
            best = (i, v);
        }
    }
    best.0
}

/// Index of the first largest value.
pub(super) fn first_max(values: impl Iterator<Item = f64>) -> usize {
    first_min(values.map(|v| -v))
}
