//! The sliding window: windows are whole periods of Unix time (Redis
//! `TIME`), and a caller's count is this window's plus the last one's,
//! weighted by how much of it still overlaps. Here: its script, the
//! arguments of one quota, and its step in memory.

#[cfg(feature = "redis")]
use std::sync::LazyLock;
use std::time::Duration;

use super::Unit;
#[cfg(feature = "redis")]
use super::gcra::Gcra;
use super::window::{Entry, Outcome, Slot, first_max, first_min};
#[cfg(feature = "redis")]
use crate::backend::script::{Invocation, LuaScript, lua_script};
use crate::rate::quota::Quota;

#[cfg(feature = "redis")]
static SCRIPT: LazyLock<LuaScript> = lua_script!("sliding_window.lua");

/// The sliding window, as the rate limiter runs it.
pub(super) static UNIT: Unit = Unit {
    tag: "sw",
    #[cfg(feature = "redis")]
    script: &SCRIPT,
    #[cfg(feature = "redis")]
    quota_args,
    check_quota: super::no_burst,
    window: Some(super::Window {
        decide: sliding_window,
        room,
    }),
};

#[cfg(feature = "redis")]
/// A quota's arguments to the script: its limit and period.
fn quota_args(invocation: &mut Invocation<'_>, quota: &Quota, _gcra: &Gcra) {
    invocation.arg(quota.limit()).arg(quota.period_ms());
}

/// The units `quota` has room for now.
fn room(quota: &Quota, slot: &Option<Entry>, now_us: u64) -> u64 {
    let seen = Seen::of(quota.period_ms(), slot, now_us / 1000);
    (f64::from(quota.limit()) - seen.estimate + 1e-9)
        .floor()
        .max(0.0) as u64
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
    /// Until when the stored state lives: a write never shortens it.
    kept_until_us: u64,
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
    /// A state stored in a window after `now_ms` (a decision that read the
    /// clock before one that stored first, or a clock set back) is seen
    /// from that window's start, with the whole weight of the window
    /// before: as it stands, never as an empty window.
    fn of(period: u64, slot: &Option<Entry>, now_ms: u64) -> Seen {
        let now_ms = match slot.map(|e| e.slot) {
            Some(Slot::Sliding { window: w, .. }) => now_ms.max(w.saturating_mul(period)),
            _ => now_ms,
        };
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

fn sliding_window(quotas: &[Quota], slots: &[Option<Entry>], cost: u64, now_us: u64) -> Outcome {
    let now = now_us / 1000;
    let mut state: Vec<Sliding> = Vec::with_capacity(slots.len());
    let mut allowed = true;
    for (quota, slot) in quotas.iter().zip(slots) {
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
            kept_until_us: slot.map_or(0, |e| e.expires_us),
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
                        expires_us: (now_us + 2 * s.period * 1000).max(s.kept_until_us),
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

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;

    use super::*;

    /// A decision that read the clock before another stored a later
    /// window (or after the clock was set back) sees that window as it
    /// stands: it is refused where the later one is full, and what it
    /// stores neither rolls the window back nor ends it sooner.
    #[test]
    fn a_state_stored_later_than_now_is_seen_as_it_stands() {
        let quota = Quota::per_second(NonZeroU32::MIN);
        let later_us = 1_700_000_000_000_000 + 2_000_000;
        let full = sliding_window(std::slice::from_ref(&quota), &[None], 1, later_us);
        assert!(full.allowed);
        let stored = full.writes[0];
        // Two windows before: on its own an empty window and its empty
        // predecessor.
        let earlier_us = later_us - 2_000_000;
        let stale = sliding_window(std::slice::from_ref(&quota), &[stored], 1, earlier_us);
        assert!(!stale.allowed, "{stale:?}");
        // With room in the later window, a stale decision adds to it and
        // keeps its end.
        let wide = Quota::per_second(NonZeroU32::new(3).expect("3"));
        let first = sliding_window(std::slice::from_ref(&wide), &[None], 1, later_us);
        let kept = first.writes[0].expect("a write");
        let stale = sliding_window(std::slice::from_ref(&wide), &[Some(kept)], 1, earlier_us);
        assert!(stale.allowed);
        let written = stale.writes[0].expect("a write");
        assert_eq!(written.expires_us, kept.expires_us);
        match (written.slot, kept.slot) {
            (
                Slot::Sliding {
                    window, current, ..
                },
                Slot::Sliding {
                    window: w,
                    current: c,
                    ..
                },
            ) => assert_eq!((window, current), (w, c + 1)),
            other => panic!("{other:?}"),
        }
    }
}
