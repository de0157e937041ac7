//! Checks of rate-limit histories: no quota admits more than its
//! algorithm's bound, over any span of time.
//!
//! Each decision is made on Redis at some instant between its invoke and
//! its completion, so the decisions of every call invoked at or after `a`
//! and completed by `b` were made within `b - a` (plus [`slack`] for Redis
//! reading the wall clock and the client a monotonic one). Over a span
//! `L` the algorithms promise at most:
//!
//! * GCRA: `capacity + limit × L / period` (the interval is rounded up,
//!   see [`Quota`]).
//! * Fixed window: windows start at their first hit and last one period
//!   (less under a millisecond, Redis keeps whole milliseconds), at most
//!   `limit` each: `limit × (⌈L / (period − 1 ms)⌉ + 1)` (twice the limit
//!   within one period, as documented).
//! * Sliding window: windows aligned to Redis time, and the current
//!   window alone never takes more than `limit`: `limit × (⌈L / period⌉ +
//!   1)`. The weighting smooths the boundary, but promises no tighter
//!   bound for every span: a full previous window at its very end and a
//!   full current one are one period apart.

use std::time::{Duration, Instant};

use lock_core::rate::{Algorithm, Quota};

use super::{Call, History, Reply, Violation};

/// How much longer a span may have been on Redis's clock than on ours.
pub fn slack(span: Duration) -> Duration {
    Duration::from_millis(2) + span / 1000
}

/// The most units `quota` admits, under `algorithm`, within `span`
/// measured on the client.
pub fn bound(algorithm: Algorithm, quota: &Quota, span: Duration) -> f64 {
    let span = span + slack(span);
    let limit = f64::from(quota.limit());
    let period = quota.period();
    match algorithm {
        Algorithm::Gcra => {
            f64::from(quota.capacity()) + limit * span.as_secs_f64() / period.as_secs_f64()
        }
        Algorithm::FixedWindow => {
            let shortest = period
                .saturating_sub(Duration::from_millis(1))
                .max(Duration::from_micros(1));
            limit * ((span.as_secs_f64() / shortest.as_secs_f64()).ceil() + 1.0)
        }
        _ => limit * ((span.as_secs_f64() / period.as_secs_f64()).ceil() + 1.0),
    }
}

/// Checks every quota of the limiter recorded as `limiter` (whose calls
/// share one caller key).
pub fn check(
    history: &History,
    limiter: &str,
    algorithm: Algorithm,
    quotas: &[Quota],
) -> Vec<Violation> {
    let mut admitted: Vec<(Instant, Instant, u32)> = history
        .ops()
        .iter()
        .filter_map(|op| match (&op.call, op.reply(), op.complete) {
            (Call::Rate(l, _), Some(Reply::Decision(true, units)), Some(done)) if l == limiter => {
                Some((op.invoke, done, *units))
            }
            _ => None,
        })
        .collect();
    admitted.sort_by_key(|&(invoke, ..)| invoke);
    let mut out = Vec::new();
    for (q, quota) in quotas.iter().enumerate() {
        let mut worst: Option<(usize, f64, Duration, Instant)> = None;
        let mut spans = 0;
        for (i, &(a, ..)) in admitted.iter().enumerate() {
            // Calls invoked at `a` or later, by completion.
            let mut later: Vec<(Instant, u32)> = admitted[i..]
                .iter()
                .map(|&(_, done, u)| (done, u))
                .collect();
            later.sort_by_key(|&(done, _)| done);
            let mut units = 0usize;
            for &(done, u) in &later {
                units += u as usize;
                let span = done.saturating_duration_since(a);
                let most = bound(algorithm, quota, span);
                if units as f64 > most + 1e-9 {
                    spans += 1;
                    if worst.is_none_or(|(w, m, ..)| units as f64 - most > w as f64 - m) {
                        worst = Some((units, most, span, a));
                    }
                }
            }
        }
        if let Some((units, most, span, a)) = worst {
            out.push(Violation::new(
                "rate",
                format!(
                    "{limiter} quota {q} ({} per {:?}, {algorithm:?}): {units} units admitted within \
                     {span:?} from {:.0} ms, at most {most:.1} allowed ({spans} spans over)",
                    quota.limit(),
                    quota.period(),
                    history.ms(a)
                ),
            ));
        }
    }
    out
}
