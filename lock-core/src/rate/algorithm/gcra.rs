//! GCRA arithmetic in integers: the emission interval and burst window of a
//! quota, and one decision from a caller's debt (how far its theoretical
//! arrival time is ahead of now). The Redis script (`gcra.lua`) runs the
//! same arithmetic in ticks; the in-memory backend hands a one-quota
//! policy to `governor`, whose GCRA is the same, with this interval.

#[cfg(feature = "redis")]
use std::sync::LazyLock;
use std::time::Duration;

use super::Unit;
#[cfg(feature = "redis")]
use crate::backend::script::{Invocation, LuaScript, lua_script};
use crate::error::{Error, Result};
use crate::rate::quota::{MAX_PERIOD, Quota};

#[cfg(feature = "redis")]
static SCRIPT: LazyLock<LuaScript> = lua_script!("gcra.lua");

/// GCRA, as the rate limiter runs it. In memory, the backend's keyed
/// stores decide with this arithmetic ([`Gcra::step`]), and `governor`
/// decides a one-quota policy with the same interval.
pub(super) static UNIT: Unit = Unit {
    tag: "gcra",
    #[cfg(feature = "redis")]
    script: &SCRIPT,
    #[cfg(feature = "redis")]
    quota_args,
    check_quota,
    window: None,
};

#[cfg(feature = "redis")]
/// A quota's arguments to the script: its emission interval and burst
/// window in ticks, and ticks per microsecond.
fn quota_args(invocation: &mut Invocation<'_>, _quota: &Quota, gcra: &Gcra) {
    invocation
        .arg(gcra.interval_ticks())
        .arg(gcra.window_ticks())
        .arg(1000 / gcra.tick_ns());
}

/// An interval of a whole tick needs at most one unit per microsecond; a
/// burst window (burst × period / limit) of at most a year keeps every
/// figure of [`Gcra`], governor's and the script's exact.
fn check_quota(quota: &Quota) -> Result<()> {
    if u128::from(quota.limit()) > quota.period().as_micros() {
        return Err(Error::invalid_argument(
            "quota",
            "GCRA needs at most one unit per microsecond",
        ));
    }
    // burst × period / limit ≤ a year, without rounding: a quota without a
    // burst of its own (burst = limit) always passes. The interval rounded
    // up to a tick adds less than a tick per unit, which every figure has
    // room for.
    let window = quota.period().as_nanos() * u128::from(quota.capacity());
    if window > MAX_PERIOD.as_nanos() * u128::from(quota.limit()) {
        return Err(Error::invalid_argument(
            "quota",
            "GCRA's burst window (burst × period / limit) must be at most a year: \
             lower the burst",
        ));
    }
    Ok(())
}

/// The largest integer a Lua number (a double) holds exactly.
const EXACT_IN_LUA: u64 = 1 << 53;

/// A GCRA quota: one unit every `interval`, a burst of `burst` units.
///
/// The interval is `period / limit` **rounded up** to a whole tick, so
/// that no more than the quota ever gets through: over any span of time,
/// at most `burst + elapsed / interval` units, which is at most the
/// quota's `burst + limit × elapsed / period`. A tick is a nanosecond, or a
/// microsecond for quotas whose burst window in nanoseconds would not be
/// exact in a Lua number (windows over about 104 days). The rounding costs
/// at most one tick per unit: for the finest quota accepted (one unit per
/// microsecond) that is 0.1% of the rate, far less for any other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Gcra {
    /// Nanoseconds per tick: 1 or 1000.
    tick_ns: u64,
    /// The emission interval, in ticks.
    interval: u64,
    burst: u64,
}

/// What one GCRA decision came to, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Step {
    pub(crate) allowed: bool,
    /// The caller's debt after the decision (its cost added when allowed).
    pub(crate) debt: u64,
    /// When refused: how long until the same cost fits.
    pub(crate) retry: u64,
}

impl Gcra {
    /// The quota of `limit` units per `period`, with a burst of `burst`.
    /// `period` is at most a year; `burst × period / limit` fits in a year
    /// too (quotas are validated for both).
    pub(crate) fn new(limit: u32, burst: u32, period: Duration) -> Self {
        let period_ns = u64::try_from(period.as_nanos()).unwrap_or(u64::MAX);
        let limit = u64::from(limit.max(1));
        let burst = u64::from(burst.max(1));
        let interval_ns = period_ns.div_ceil(limit).max(1);
        let tick_ns = if interval_ns.saturating_mul(burst) <= EXACT_IN_LUA {
            1
        } else {
            1000
        };
        Gcra {
            tick_ns,
            interval: interval_ns.div_ceil(tick_ns),
            burst,
        }
    }

    #[cfg_attr(not(feature = "redis"), allow(dead_code))] // Redis and the tests use it
    /// Nanoseconds per tick.
    pub(crate) fn tick_ns(&self) -> u64 {
        self.tick_ns
    }

    #[cfg_attr(not(feature = "redis"), allow(dead_code))] // Redis and the tests use it
    /// The emission interval in ticks.
    pub(crate) fn interval_ticks(&self) -> u64 {
        self.interval
    }

    /// The burst window in ticks: how far ahead of now the theoretical
    /// arrival time may run.
    pub(crate) fn window_ticks(&self) -> u64 {
        self.interval * self.burst
    }

    /// The emission interval in nanoseconds.
    pub(crate) fn interval_ns(&self) -> u64 {
        self.interval * self.tick_ns
    }

    /// The burst window in nanoseconds.
    pub(crate) fn window_ns(&self) -> u64 {
        self.window_ticks() * self.tick_ns
    }

    /// The burst.
    pub(crate) fn burst(&self) -> u64 {
        self.burst
    }

    /// Decides `cost` units for a caller whose theoretical arrival time is
    /// `debt` nanoseconds ahead of now (0 when it is not ahead).
    #[inline]
    pub(crate) fn step(&self, debt: u64, cost: u32) -> Step {
        let after = debt + u64::from(cost) * self.interval_ns();
        let window = self.window_ns();
        if after > window {
            Step {
                allowed: false,
                debt,
                retry: after - window,
            }
        } else {
            Step {
                allowed: true,
                debt: after,
                retry: 0,
            }
        }
    }

    /// Units a caller with `debt` nanoseconds could take at once.
    #[inline]
    pub(crate) fn remaining(&self, debt: u64) -> u64 {
        self.window_ns().saturating_sub(debt) / self.interval_ns()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quota(limit: u32, period: Duration) -> Gcra {
        Gcra::new(limit, limit, period)
    }

    /// Over any span, a caller that takes every unit it can gets at most
    /// `burst + limit × elapsed / period + 1` units, for quotas whose
    /// interval is not a whole number of ticks.
    #[test]
    fn never_more_than_the_quota() {
        let day = Duration::from_secs(86_400);
        for (limit, period) in [
            (1, Duration::from_millis(1)),
            (501, Duration::from_millis(1)),
            (3, Duration::from_secs(7)),
            (150_000, Duration::from_secs(1)),
            (700_000, Duration::from_secs(1)),
            (u32::MAX, day),
            (7, Duration::from_secs(365 * 86_400)),
        ] {
            let gcra = quota(limit, period);
            let period_ns = period.as_nanos();
            // Time in steps of a third of the interval, plus a little, so
            // that arrivals fall everywhere within intervals.
            let step_ns = gcra.interval_ns() / 3 + 7;
            let (mut tat, mut now, mut allowed) = (0u64, 0u64, 0u128);
            let steps = (20 * period_ns / u128::from(step_ns)).min(200_000);
            for _ in 0..steps {
                let debt = tat.saturating_sub(now);
                let s = gcra.step(debt, 1);
                if s.allowed {
                    allowed += 1;
                    tat = now + s.debt;
                }
                let bound = u128::from(limit) + u128::from(limit) * u128::from(now) / period_ns + 1;
                assert!(
                    allowed <= bound,
                    "{limit}/{period:?}: {allowed} > {bound} at {now} ns"
                );
                now += step_ns;
            }
            // And the rounding takes little: at least 99.8% of the rate.
            let floor = u128::from(limit) * u128::from(now) / period_ns * 998 / 1000;
            assert!(allowed >= floor, "{limit}/{period:?}: {allowed} < {floor}");
        }
    }

    #[test]
    fn burst_then_one_per_interval() {
        let gcra = quota(5, Duration::from_secs(1));
        assert_eq!(gcra.interval_ns(), 200_000_000);
        let mut debt = 0;
        for left in (0..5).rev() {
            let s = gcra.step(debt, 1);
            assert!(s.allowed);
            debt = s.debt;
            assert_eq!(gcra.remaining(debt), left);
        }
        let refused = gcra.step(debt, 1);
        assert!(!refused.allowed);
        assert_eq!(refused.retry, 200_000_000);
        assert_eq!(refused.debt, debt);
        // Cost 0 looks: allowed, nothing taken.
        assert_eq!(gcra.step(debt, 0).debt, debt);
    }

    #[test]
    fn long_windows_count_in_microseconds() {
        assert_eq!(quota(10, Duration::from_secs(1)).tick_ns(), 1);
        let year = quota(7, Duration::from_secs(365 * 86_400));
        assert_eq!(year.tick_ns(), 1000);
        assert!(year.window_ticks() <= EXACT_IN_LUA);
        assert!(quota(u32::MAX, Duration::from_secs(86_400)).window_ticks() <= EXACT_IN_LUA);
    }
}
