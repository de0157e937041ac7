//! The keyed GCRA limiter: governor's decisions against this crate's
//! arithmetic, the cap on callers and the sweep of idle ones.

use super::*;
use crate::backend::ManualClock;
use std::time::UNIX_EPOCH;

/// A limiter of `limit` per `period` (the burst too) keeping at most
/// `cap` callers, on a manual clock.
fn limiter(limit: u32, period: Duration, cap: usize) -> (ManualClock, QuotaLimiter) {
    let (manual, clock) = manual();
    (
        manual,
        QuotaLimiter::new(Gcra::new(limit, limit, period), clock, cap),
    )
}

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
    let (_, limiter) = limiter(1, Duration::from_secs(3600), 10);
    let known = CallerKey::Text("known".into());
    assert!(limiter.decide(&known, 1).allowed);
    for i in 0..100 {
        limiter.decide(&CallerKey::V4(i), 1);
    }
    assert!(limiter.len() <= 10, "{} callers", limiter.len());
    known_kept_and_newcomers_limited(&limiter, &known, CallerKey::V4(1000));
}

/// Idle callers are swept once enough new ones came in.
#[test]
fn idle_callers_are_swept() {
    let (manual, limiter) = limiter(10, Duration::from_millis(100), 1_000_000);
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

/// Threads that each bring distinct new callers at once never take the
/// store past its cap, and the callers past it share the overflow state,
/// which limits them.
#[test]
fn the_cap_holds_with_many_threads_bringing_new_callers() {
    let cap = 4096;
    let (_, limiter) = limiter(1, Duration::from_secs(3600), cap);
    let known = CallerKey::Text("known".into());
    assert!(limiter.decide(&known, 1).allowed);
    let done = AtomicBool::new(false);
    let most = std::thread::scope(|scope| {
        let watcher = scope.spawn(|| {
            let mut most = 0;
            while !done.load(Ordering::Relaxed) {
                most = most.max(limiter.len());
            }
            most
        });
        let threads: Vec<_> = (0..8u32)
            .map(|t| {
                let limiter = &limiter;
                scope.spawn(move || {
                    for i in 0..10_000 {
                        limiter.decide(&CallerKey::V4(t << 24 | i), 1);
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        done.store(true, Ordering::Relaxed);
        watcher.join().unwrap()
    });
    let held = limiter.len();
    assert!(held <= cap && most <= cap, "{held} callers, {most} at most");
    assert!(
        held >= cap / 2,
        "{held} callers: the overflow came too soon"
    );
    known_kept_and_newcomers_limited(&limiter, &known, CallerKey::V4(u32::MAX));
}

/// After a flood past the cap of a one-per-hour limiter: the caller known
/// before it is still refused (its state was kept), and so is a newcomer
/// (the overflow state it shares was taken).
fn known_kept_and_newcomers_limited(
    limiter: &QuotaLimiter,
    known: &CallerKey,
    newcomer: CallerKey,
) {
    assert!(
        !limiter.decide(known, 1).allowed,
        "the known caller's limit was reset"
    );
    assert!(
        !limiter.decide(&newcomer, 1).allowed,
        "overflow callers are limited"
    );
}

/// A caller whose state expired is swept once new callers come into its
/// shard, and the room it took is given back.
#[test]
fn an_expired_caller_is_swept_eventually() {
    let (manual, limiter) = limiter(10, Duration::from_millis(100), 1_000_000);
    let idle = CallerKey::Text("idle".into());
    limiter.decide(&idle, 1);
    assert!(limiter.store.holds(&idle));
    manual.advance(Duration::from_secs(2));
    // New callers land in every shard in turn; the idle caller's shard
    // sweeps it once its arrivals warrant.
    let mut new = 0;
    while limiter.store.holds(&idle) {
        assert!(new < 100_000, "still held after {new} new callers");
        limiter.decide(&CallerKey::V4(new), 1);
        new += 1;
    }
    assert!(limiter.len() <= new as usize);
}

/// However the shards sweep (full ones at every few arrivals, the others
/// as time passes), a caller deciding all along never gets more than its
/// quota: its state is live, so no sweep drops it.
#[test]
fn sweeps_never_give_a_live_caller_more_than_its_quota() {
    // Two shards, full soon: they sweep every few hundred new callers.
    let (manual, limiter) = limiter(10, Duration::from_secs(1), 2048);
    let hot = CallerKey::Text("hot".into());
    let steps = 3000u64;
    let done = AtomicBool::new(false);
    let allowed: u64 = std::thread::scope(|scope| {
        let deciders: Vec<_> = (0..3u32)
            .map(|t| {
                let (limiter, hot, done) = (&limiter, &hot, &done);
                scope.spawn(move || {
                    let mut allowed = 0;
                    let mut i = 0u32;
                    while !done.load(Ordering::Relaxed) {
                        allowed += u64::from(limiter.decide(hot, 1).allowed);
                        limiter.decide(&CallerKey::V4(t << 24 | i), 1);
                        i = i.wrapping_add(1);
                    }
                    allowed
                })
            })
            .collect();
        for _ in 0..steps {
            manual.advance(Duration::from_millis(1));
            std::thread::yield_now();
        }
        done.store(true, Ordering::Relaxed);
        deciders.into_iter().map(|d| d.join().unwrap()).sum()
    });
    // The burst, one more per 100 ms that passed, and one for the step.
    let most = 10 + steps / 100 + 1;
    assert!(allowed <= most, "{allowed} allowed, at most {most}");
    assert!(allowed >= 10, "{allowed} allowed");
}
