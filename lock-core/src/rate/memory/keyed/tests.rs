//! The keyed GCRA limiter: governor's decisions against this crate's
//! arithmetic, the cap on callers and the sweep of idle ones.

use super::*;
use crate::backend::ManualClock;
use std::time::UNIX_EPOCH;

fn manual() -> (ManualClock, Clock) {
    let manual = ManualClock::new(UNIX_EPOCH + Duration::from_secs(1_700_000_000));
    (manual.clone(), Clock::Manual(manual))
}

/// governor's decisions and this crate's GCRA arithmetic agree, with
/// the figures worked out from what governor read and wrote.
#[test]
fn governor_decides_as_the_arithmetic() {
    let (manual, clock) = manual();
    let gcra = Gcra::new(3, 3, Duration::from_millis(300));
    let limiter = QuotaLimiter::new(gcra, clock, 100);
    let key = CallerKey::V4(7);
    let mut debt = 0u64;
    for (pass_ms, cost) in [
        (0, 1),
        (0, 1),
        (0, 0),
        (0, 1),
        (0, 1),
        (50, 1),
        (60, 1),
        (0, 2),
        (500, 3),
        (0, 1),
    ] {
        manual.advance(Duration::from_millis(pass_ms));
        debt = debt.saturating_sub(pass_ms * 1_000_000);
        let expected = gcra.step(debt, cost);
        let got = limiter.decide(&key, cost);
        assert_eq!(got, expected, "after {pass_ms} ms, cost {cost}");
        if got.allowed {
            debt = got.debt;
        }
    }
}

/// Past the cap, new callers share one state, and callers already
/// known keep theirs.
#[test]
fn new_callers_past_the_cap_share_the_overflow() {
    let (_, clock) = manual();
    let gcra = Gcra::new(1, 1, Duration::from_secs(3600));
    let limiter = QuotaLimiter::new(gcra, clock, 10);
    let known = CallerKey::Text("known".into());
    assert!(limiter.decide(&known, 1).allowed);
    for i in 0..100 {
        limiter.decide(&CallerKey::V4(i), 1);
    }
    assert!(limiter.len() <= 10, "{} callers", limiter.len());
    assert!(
        !limiter.decide(&known, 1).allowed,
        "the known caller's limit was reset"
    );
    assert!(
        !limiter.decide(&CallerKey::V4(1000), 1).allowed,
        "overflow callers are limited"
    );
}

/// Idle callers are swept once enough new ones came in.
#[test]
fn idle_callers_are_swept() {
    let (manual, clock) = manual();
    let gcra = Gcra::new(10, 10, Duration::from_millis(100));
    let limiter = QuotaLimiter::new(gcra, clock, 1_000_000);
    for i in 0..5000 {
        limiter.decide(&CallerKey::V4(i), 1);
    }
    manual.advance(Duration::from_secs(1));
    for i in 0..6000 {
        limiter.decide(&CallerKey::V4(1_000_000 + i), 1);
    }
    // The 5,000 idle ones went at a sweep; at most the new ones stay.
    assert!(
        limiter.len() <= 6000,
        "{} callers after the sweep",
        limiter.len()
    );
}
