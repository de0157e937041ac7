//! The fixed window: each caller's window starts at its first counted call
//! and lasts one period (a counter with a `PX` expiry on Redis, Redis's
//! clock), not aligned to Unix time. Here: its script, the arguments of one
//! quota, and its step in memory.

#[cfg(feature = "redis")]
use std::sync::LazyLock;
use std::time::Duration;

use super::Unit;
#[cfg(feature = "redis")]
use super::gcra::Gcra;
use super::window::{Entry, Outcome, Slot, first_max, first_min, ms_ceil};
#[cfg(feature = "redis")]
use crate::backend::script::{Invocation, LuaScript, lua_script};
use crate::rate::quota::Quota;

#[cfg(feature = "redis")]
static SCRIPT: LazyLock<LuaScript> = lua_script!("fixed_window.lua");

/// The fixed window, as the rate limiter runs it.
pub(super) static UNIT: Unit = Unit {
    tag: "fw",
    #[cfg(feature = "redis")]
    script: &SCRIPT,
    #[cfg(feature = "redis")]
    quota_args,
    check_quota: super::no_burst,
    window: Some(super::Window {
        decide: fixed_window,
        room,
    }),
};

#[cfg(feature = "redis")]
/// A quota's arguments to the script: its limit and period.
fn quota_args(invocation: &mut Invocation<'_>, quota: &Quota, _gcra: &Gcra) {
    invocation.arg(quota.limit()).arg(quota.period_ms());
}

/// The units `quota` has room for now.
fn room(quota: &Quota, slot: &Option<Entry>, _now_us: u64) -> u64 {
    let limit = u64::from(quota.limit());
    match slot {
        Some(Entry {
            slot: Slot::Count(count),
            ..
        }) => limit.saturating_sub(*count),
        _ => limit,
    }
}

fn fixed_window(quotas: &[Quota], slots: &[Option<Entry>], cost: u64, now: u64) -> Outcome {
    // Per quota: limit, count, time left in the window (us).
    let mut state: Vec<(u64, u64, u64)> = Vec::with_capacity(slots.len());
    let mut allowed = true;
    for (quota, slot) in quotas.iter().zip(slots) {
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
