//! The rate-limiting algorithms, one unit each: its Redis script, the
//! arguments it takes for a quota, what it accepts of a quota, and its step
//! in memory. The limiter and the backends reach an algorithm only through
//! its [`Unit`]; this file is the one place that names them all.
//!
//! A new algorithm is a file here (its script beside it) with a `UNIT`, a
//! variant of [`Algorithm`], and a line in [`Algorithm::unit`].

pub(crate) mod fixed_window;
pub(crate) mod gcra;
pub(crate) mod sliding_window;
pub(crate) mod window;

#[cfg(feature = "redis")]
use std::sync::LazyLock;

#[cfg(feature = "redis")]
use self::gcra::Gcra;
use self::window::{Entry, Outcome};
#[cfg(feature = "redis")]
use crate::backend::script::{Invocation, LuaScript};
use crate::error::Result;
use crate::rate::quota::Quota;

/// The rate-limiting algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Algorithm {
    /// Counts cost in windows of each caller's own: a window starts at the
    /// caller's first counted call and lasts one period (a counter set with
    /// `PX <period>`, then `INCRBY`, in one script), not at a multiple of
    /// the period on the clock. Cheapest; allows up to twice the limit
    /// around the end of a window.
    FixedWindow,
    /// Counts the current window plus the previous one, weighted by how much
    /// of it still overlaps the last period. Windows are aligned to Unix
    /// time (whole periods since the epoch), the same for every caller.
    /// Smooths the burst at a window's end.
    SlidingWindow,
    /// Generic cell rate algorithm: a theoretical arrival time per key; a
    /// burst of `limit`, then one unit every `period / limit`. The default.
    #[default]
    Gcra,
}

impl Algorithm {
    /// What runs this algorithm.
    #[inline]
    pub(crate) fn unit(self) -> &'static Unit {
        match self {
            Algorithm::FixedWindow => &fixed_window::UNIT,
            Algorithm::SlidingWindow => &sliding_window::UNIT,
            Algorithm::Gcra => &gcra::UNIT,
        }
    }
}

/// One algorithm, as the limiter and the backends run it.
pub(crate) struct Unit {
    /// The algorithm's part of each quota's key suffix
    /// (`<tag>:<limit>:<period ms>`): policies of different algorithms
    /// never share state.
    pub(crate) tag: &'static str,
    /// Its Redis script: every quota of a policy in one call. Its first
    /// argument is the cost (negative: at most that many); its reply is
    /// one string, "allowed quota remaining reset retry cost", the times
    /// in microseconds.
    #[cfg(feature = "redis")]
    pub(crate) script: &'static LazyLock<LuaScript>,
    /// Appends one quota's arguments to the script's call.
    #[cfg(feature = "redis")]
    pub(crate) quota_args: fn(&mut Invocation<'_>, &Quota, &Gcra),
    /// Refuses a quota the algorithm cannot keep.
    pub(crate) check_quota: fn(&Quota) -> Result<()>,
    /// Its step over a window table in memory; `None` for GCRA, which
    /// memory decides with `governor`'s keyed state instead.
    pub(crate) window: Option<Window>,
}

/// A window step: the quotas of a policy, the live state of each (in the
/// same order), the cost and Unix time in microseconds.
pub(crate) type WindowStep = fn(&[Quota], &[Option<Entry>], u64, u64) -> Outcome;

/// A window algorithm's step in memory.
pub(crate) struct Window {
    /// Decides `cost` over the live state of every quota of a policy (in
    /// order), at
    /// Unix time `now_us`, and says what to store.
    pub(crate) decide: WindowStep,
    /// The units one quota has room for at `now_us`.
    pub(crate) room: fn(&Quota, &Option<Entry>, u64) -> u64,
}

/// A window's burst is its limit: a burst set apart is GCRA's alone.
fn no_burst(quota: &Quota) -> Result<()> {
    match quota.burst_set() {
        Some(_) => Err(crate::error::Error::invalid_argument(
            "quota",
            "a burst apart from the rate needs GCRA (a window's burst is its limit)",
        )),
        None => Ok(()),
    }
}
