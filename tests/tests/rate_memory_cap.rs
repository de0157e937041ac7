//! The in-memory rate limiter at its cap on callers: callers past the cap
//! share one overflow state, and nothing taken there comes back, neither
//! when a caller later gets a place of its own nor when callers under
//! different locks decide on the overflow state at once.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, UNIX_EPOCH};

use lock_core::backend::{ManualClock, MemoryBackend};
use lock_core::rate::{Algorithm, Decision, Policy, Quota, RateLimiter};

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).expect("not zero")
}

fn clock() -> ManualClock {
    ManualClock::new(UNIX_EPOCH + Duration::from_secs(1_700_000_000))
}

fn now(limiter: &RateLimiter<MemoryBackend>, key: &str, cost: u32) -> Decision {
    limiter
        .check_now(key, cost)
        .expect("the memory backend answers at once")
        .expect("a valid key and cost")
}

/// GCRA, 5/s, a cap of 4 callers, the clock stopped: a caller that took
/// its burst in the overflow state is not given it again when a sweep
/// makes room for it, and a look agrees with the decision that follows.
#[test]
fn gcra_a_caller_given_a_place_keeps_what_it_took_in_the_overflow() {
    let clock = clock();
    let backend = MemoryBackend::builder()
        .max_keys(4)
        .clock(clock.clone())
        .build();
    let policy = Policy::new(Algorithm::Gcra).quota(Quota::per_second(nz(5)));
    let limiter = RateLimiter::new(backend, "api", policy).expect("limiter");
    for i in 0..4 {
        assert!(now(&limiter, &format!("filler{i}"), 1).allowed);
    }
    // The fillers are idle a second later, but still held.
    clock.advance(Duration::from_secs(1));
    let mut allowed = 0;
    for _ in 0..6 {
        allowed += u32::from(now(&limiter, "victim", 1).allowed);
    }
    assert_eq!(allowed, 5, "the victim's burst, in the overflow state");
    for i in 0..60 {
        let look = now(&limiter, "victim", 0);
        let decided = now(&limiter, "victim", 1);
        assert_eq!(
            look.remaining > 0,
            decided.allowed,
            "a look said {} remaining, then the call was allowed: {}",
            look.remaining,
            decided.allowed
        );
        allowed += u32::from(decided.allowed);
        // Newcomers bring about the sweeps that drop the idle fillers.
        now(&limiter, &format!("newcomer{i}"), 1);
    }
    assert_eq!(allowed, 5, "5/s with the clock stopped");
}

/// A memory backend whose window table (a cap of 4) is full of another
/// scope's entries, which live until [`FILLERS_EXPIRE`] from now.
fn full_window_table(algorithm: Algorithm) -> (ManualClock, MemoryBackend) {
    let clock = clock();
    let backend = MemoryBackend::builder()
        .max_keys(4)
        .clock(clock.clone())
        .build();
    let short = Policy::new(algorithm).quota(Quota::per_second(nz(1)));
    let fillers = RateLimiter::new(backend.clone(), "short", short).expect("limiter");
    for i in 0..4 {
        assert!(now(&fillers, &format!("filler{i}"), 1).allowed);
    }
    (clock, backend)
}

/// When the entries of [`full_window_table`] have all expired (a sliding
/// window's entry lives two periods).
const FILLERS_EXPIRE: Duration = Duration::from_millis(2_100);

/// Fixed and sliding windows, 5 per hour, in a full table: a caller that
/// took its 5 in the overflow caller does not get 5 more once the table
/// has room and it gets entries of its own.
#[test]
fn windows_a_caller_given_a_place_keeps_what_it_took_in_the_overflow() {
    for algorithm in [Algorithm::FixedWindow, Algorithm::SlidingWindow] {
        let (clock, backend) = full_window_table(algorithm);
        let hourly = Policy::new(algorithm).quota(Quota::per_hour(nz(5)));
        let limiter = RateLimiter::new(backend, "hourly", hourly).expect("limiter");
        let mut allowed = 0;
        for _ in 0..10 {
            allowed += u32::from(now(&limiter, "victim", 1).allowed);
        }
        assert_eq!(allowed, 5, "{algorithm:?}: the victim's 5, in the overflow");
        clock.advance(FILLERS_EXPIRE);
        let look = now(&limiter, "victim", 0);
        assert_eq!(look.remaining, 0, "{algorithm:?}: a look after the move");
        for _ in 0..10 {
            allowed += u32::from(now(&limiter, "victim", 1).allowed);
        }
        assert_eq!(allowed, 5, "{algorithm:?}: 5 per hour, 2.1 s in");
    }
}

/// Fixed and sliding windows: a look through a policy that shares one of
/// the caller's quotas gives the caller a place in that quota only; the
/// quota it took from in the overflow still starts where the overflow
/// stands.
#[test]
fn windows_a_place_in_one_quota_keeps_what_was_taken_in_another() {
    for algorithm in [Algorithm::FixedWindow, Algorithm::SlidingWindow] {
        let (clock, backend) = full_window_table(algorithm);
        let wide = Quota::per_hour(nz(100));
        let both = Policy::new(algorithm)
            .quota(wide.clone())
            .quota(Quota::per_hour(nz(5)));
        let both = RateLimiter::new(backend.clone(), "api", both).expect("limiter");
        let wide =
            RateLimiter::new(backend, "api", Policy::new(algorithm).quota(wide)).expect("limiter");
        let mut allowed = 0;
        for _ in 0..10 {
            allowed += u32::from(now(&both, "victim", 1).allowed);
        }
        assert_eq!(allowed, 5, "{algorithm:?}: 5 of the overflow's 5 per hour");
        clock.advance(FILLERS_EXPIRE);
        assert_eq!(now(&wide, "victim", 0).remaining, 95, "{algorithm:?}");
        for _ in 0..10 {
            allowed += u32::from(now(&both, "victim", 1).allowed);
        }
        assert_eq!(allowed, 5, "{algorithm:?}: 5 per hour, 2.1 s in");
    }
}

/// Callers of eight scopes, all new, on a window table at its cap: each
/// thread's caller and each scope's overflow caller are locked together,
/// in every combination, and every thread gets through.
#[test]
fn newcomers_of_many_scopes_at_the_cap_all_get_through() {
    let backend = MemoryBackend::builder().max_keys(2048).build();
    let policy = Policy::new(Algorithm::FixedWindow).quota(Quota::per_hour(nz(1_000_000)));
    let fill = RateLimiter::new(backend.clone(), "fill", policy.clone()).expect("limiter");
    for i in 0..4096 {
        now(&fill, &format!("f{i}"), 1);
    }
    let (done, finished) = mpsc::channel();
    for t in 0..8 {
        let limiter = RateLimiter::new(backend.clone(), format!("scope{t}"), policy.clone())
            .expect("limiter");
        let done = done.clone();
        std::thread::spawn(move || {
            for i in 0..20_000u32 {
                now(&limiter, &format!("t{t}-{i}"), 1);
            }
            done.send(t).expect("the test waits");
        });
    }
    for _ in 0..8 {
        // Minutes of margin: a thread that does not finish is stuck.
        finished
            .recv_timeout(Duration::from_secs(120))
            .expect("every thread finishes: none is stuck on a lock");
    }
}

/// Eight threads of distinct callers, all past a cap of one caller and
/// the clock stopped, so all on the overflow state of a 100,000-per-hour
/// quota: together they are allowed no more than 100,000, whether the
/// quota is decided alone, in a policy of two quotas, or both ways at
/// once.
#[test]
fn callers_deciding_on_the_overflow_at_once_lose_no_charge() {
    let hourly = Quota::per_hour(nz(100_000));
    let alone = Policy::new(Algorithm::Gcra).quota(hourly.clone());
    let two = Policy::new(Algorithm::Gcra)
        .quota(hourly)
        .quota(Quota::per_day(nz(10_000_000)));
    let cases = [
        ("one quota", alone.clone(), alone.clone()),
        ("two quotas", two.clone(), two.clone()),
        ("one quota shared with two", alone, two),
    ];
    for (name, even, odd) in cases {
        let clock = clock();
        let backend = MemoryBackend::builder()
            .max_keys(1)
            .clock(clock.clone())
            .build();
        let even = RateLimiter::new(backend.clone(), "api", even).expect("limiter");
        let odd = RateLimiter::new(backend, "api", odd).expect("limiter");
        // The only place is taken, by a caller that stays live.
        assert!(now(&odd, "filler", 1).allowed);
        let allowed = Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let limiter = if t % 2 == 0 {
                    even.clone()
                } else {
                    odd.clone()
                };
                let allowed = allowed.clone();
                std::thread::spawn(move || {
                    for i in 0..25_000u32 {
                        if now(&limiter, &format!("t{t}-k{i}"), 1).allowed {
                            allowed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().expect("a deciding thread");
        }
        let allowed = allowed.load(Ordering::Relaxed);
        // The filler's own state is not the overflow's.
        assert!(
            allowed <= 100_000,
            "{name}: 200,000 calls on a 100,000/h overflow, clock stopped: {allowed} allowed"
        );
        assert!(
            allowed >= 90_000,
            "{name}: the overflow's room was barely used: {allowed} allowed"
        );
    }
}

/// Four threads decide 1 a second on one caller (or, past a cap of one,
/// each call a new caller on the overflow) while another moves the clock
/// two periods at a time, so that decisions reach the table out of clock
/// order. A grant is counted at a clock value only when the clock read
/// that value before and after the call; no value gets more than one.
#[test]
fn decisions_out_of_clock_order_grant_no_more_than_the_quota() {
    for algorithm in [Algorithm::SlidingWindow, Algorithm::FixedWindow] {
        for overflow in [false, true] {
            out_of_clock_order(algorithm, overflow);
        }
    }
}

fn out_of_clock_order(algorithm: Algorithm, overflow: bool) {
    use std::collections::HashMap;
    use std::sync::atomic::AtomicBool;
    use std::time::SystemTime;
    let clock = clock();
    let backend = MemoryBackend::builder()
        .max_keys(if overflow { 1 } else { 100_000 })
        .clock(clock.clone())
        .build();
    if overflow {
        // The only place, taken for the whole run.
        let year = Quota::new(nz(1), lock_core::rate::MAX_PERIOD).expect("a year");
        let filler = RateLimiter::new(
            backend.clone(),
            "filler",
            Policy::new(algorithm).quota(year),
        )
        .expect("limiter");
        assert!(now(&filler, "filler", 1).allowed);
    }
    let policy = Policy::new(algorithm).quota(Quota::per_second(nz(1)));
    let limiter = RateLimiter::new(backend, "api", policy).expect("limiter");
    let stop = Arc::new(AtomicBool::new(false));
    let ticker = {
        let (clock, stop) = (clock.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                clock.advance(Duration::from_secs(2));
                for _ in 0..200 {
                    std::hint::spin_loop();
                }
            }
        })
    };
    let workers: Vec<_> = (0..4)
        .map(|t| {
            let (clock, stop, limiter) = (clock.clone(), stop.clone(), limiter.clone());
            std::thread::spawn(move || {
                let mut granted: HashMap<SystemTime, u32> = HashMap::new();
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    let key = if overflow {
                        format!("t{t}-{i}")
                    } else {
                        "victim".to_owned()
                    };
                    let before = clock.now();
                    let decision = now(&limiter, &key, 1);
                    if decision.allowed && clock.now() == before {
                        *granted.entry(before).or_default() += 1;
                    }
                }
                granted
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::Relaxed);
    ticker.join().expect("the clock's thread");
    let mut granted: HashMap<SystemTime, u32> = HashMap::new();
    for worker in workers {
        for (at, n) in worker.join().expect("a deciding thread") {
            *granted.entry(at).or_default() += n;
        }
    }
    let over = granted.values().filter(|&&n| n > 1).count();
    assert!(
        granted.len() > 100,
        "{algorithm:?}, overflow {overflow}: too few grants seen to judge: {}",
        granted.len()
    );
    assert_eq!(
        over,
        0,
        "{algorithm:?}, overflow {overflow}: {over} of {} clock values granted more than 1",
        granted.len()
    );
}
