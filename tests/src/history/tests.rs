//! The checkers against histories made by hand: each promise broken once,
//! and kept.

use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use lock_core::counter::Purchase;
use lock_core::rate::{Algorithm, Quota};

use super::locks::{self, Exclusion};
use super::*;

/// A history and a clock in milliseconds from its start.
struct Fixture {
    history: History,
    start: Instant,
}

impl Fixture {
    fn new() -> Self {
        let history = History::new();
        let start = history.start;
        Fixture { history, start }
    }

    fn at(&self, ms: u64) -> Instant {
        self.start + Duration::from_millis(ms)
    }

    fn op(&self, call: Call, invoke: u64, complete: u64, outcome: Outcome) -> OpId {
        self.history.push(Op {
            worker: 0,
            call,
            invoke: self.at(invoke),
            complete: Some(self.at(complete)),
            outcome,
        })
    }

    /// A guard for `owner` asked at `invoke`, returned at `ok`, valid until `until`.
    fn grant(
        &self,
        owner: &str,
        shared: bool,
        (invoke, ok, until): (u64, u64, u64),
        fence: Option<u64>,
    ) -> OpId {
        let call = Call::Acquire {
            lock: "l".into(),
            owner: owner.into(),
            shared,
            permits: 1,
        };
        let grant = Grant {
            fence,
            valid_until: self.at(until),
            returned_lost: None,
        };
        self.op(call, invoke, ok, Outcome::Ok(Reply::Granted(grant)))
    }

    fn release(&self, grant: OpId, (invoke, done): (u64, u64), held: bool) {
        self.op(
            Call::Release(vec![grant]),
            invoke,
            done,
            Outcome::Ok(Reply::Released(held)),
        );
    }

    fn kinds(&self, exclusion: Exclusion) -> Vec<&'static str> {
        locks::check(&self.history, |_| exclusion)
            .iter()
            .map(|v| v.kind)
            .collect()
    }
}

#[test]
fn valid_guards_of_two_owners_overlap() {
    let f = Fixture::new();
    let a = f.grant("a", false, (0, 10, 500), None);
    f.release(a, (100, 110), true);
    // Starts before a's release was invoked: both valid over 50..100.
    f.grant("b", false, (20, 50, 400), None);
    assert_eq!(f.kinds(Exclusion::Exclusive), ["overlap"]);
}

#[test]
fn guards_one_after_another_or_of_one_owner_do_not() {
    let f = Fixture::new();
    let a = f.grant("a", false, (0, 10, 500), None);
    f.release(a, (100, 110), true);
    f.grant("b", false, (20, 120, 400), None); // after a's release
    f.grant("c", false, (400, 410, 450), None); // after b's lease
    f.grant("c", false, (420, 430, 450), None); // c again: re-entry
    f.grant("d", false, (0, 440, 440), None); // returned with no lease left
    assert!(f.kinds(Exclusion::Exclusive).is_empty());
}

#[test]
fn readers_share_and_writers_do_not() {
    let f = Fixture::new();
    f.grant("r1", true, (0, 10, 100), None);
    f.grant("r2", true, (0, 20, 100), None);
    assert!(f.kinds(Exclusion::ReadWrite).is_empty());
    f.grant("w", false, (0, 30, 100), None);
    assert_eq!(f.kinds(Exclusion::ReadWrite), ["overlap", "overlap"]);
}

#[test]
fn a_semaphore_never_holds_more_than_its_permits() {
    let f = Fixture::new();
    f.grant("a", false, (0, 10, 100), None);
    f.grant("b", false, (0, 20, 100), None);
    assert!(f.kinds(Exclusion::Permits(2)).is_empty());
    f.grant("c", false, (0, 30, 100), None);
    assert_eq!(f.kinds(Exclusion::Permits(2)), ["permits"]);
}

#[test]
fn fencing_tokens_rise_and_a_re_entry_keeps_its_holdings() {
    let f = Fixture::new();
    f.grant("a", false, (0, 10, 20), Some(5));
    f.grant("b", false, (30, 40, 50), Some(6));
    f.grant("b", false, (41, 45, 50), Some(6)); // b re-enters
    assert!(f.kinds(Exclusion::Exclusive).is_empty());
    f.grant("c", false, (60, 70, 80), Some(6)); // not above b's
    f.grant("c", false, (71, 75, 80), Some(9)); // a re-entry with another token
    assert_eq!(
        f.kinds(Exclusion::Exclusive),
        ["fence-order", "fence-order", "reentry-fence"]
    );
}

#[test]
fn a_release_says_false_only_when_the_lease_may_have_ended() {
    let f = Fixture::new();
    let a = f.grant("a", false, (0, 10, 100), None);
    f.release(a, (50, 120), false); // answered after the lease ended
    assert!(f.kinds(Exclusion::Exclusive).is_empty());
    let b = f.grant("b", false, (200, 210, 400), None);
    f.release(b, (250, 260), false);
    assert_eq!(f.kinds(Exclusion::Exclusive), ["release-answer"]);
}

#[test]
fn a_guard_proved_lost_at_return_is_reported() {
    let f = Fixture::new();
    let call = Call::Acquire {
        lock: "l".into(),
        owner: "a".into(),
        shared: false,
        permits: 1,
    };
    let grant = Grant {
        fence: None,
        valid_until: f.at(0),
        returned_lost: Some("ran out".into()),
    };
    f.op(call, 0, 10, Outcome::Ok(Reply::Granted(grant)));
    assert_eq!(f.kinds(Exclusion::Exclusive), ["returned-lost"]);
}

fn purchase(n: u64, id: Option<&str>) -> Call {
    Call::Decrement("i".into(), n, id.map(str::to_owned))
}

fn done(replayed: bool) -> Outcome {
    Outcome::Ok(Reply::Purchase(Purchase::Done {
        remaining: 0,
        replayed,
    }))
}

fn unknown() -> Outcome {
    Outcome::Unknown(ErrorSeen {
        text: "Timeout".into(),
        untyped: None,
    })
}

#[test]
fn stock_is_conserved_within_what_unknown_outcomes_allow() {
    let f = Fixture::new();
    f.op(
        Call::Restock("i".into(), 10),
        0,
        1,
        Outcome::Ok(Reply::Restocked(Some(20))),
    );
    f.op(purchase(3, None), 2, 3, done(false));
    f.op(purchase(2, None), 4, 5, unknown());
    f.op(purchase(1, Some("x")), 6, 7, unknown());
    f.op(purchase(1, Some("x")), 8, 9, done(true)); // the retry: it had run
    let check = |remaining| stock::check(&f.history, "i", 10, Some(remaining));
    assert!(check(16).is_empty()); // 10 + 10 - 3 - 1
    assert!(check(14).is_empty()); // and the unknown 2
    let kinds: Vec<_> = check(26).iter().map(|v| v.kind).collect();
    assert_eq!(kinds, ["stock"]); // the restock applied twice
}

#[test]
fn an_operation_id_answers_alike_every_time() {
    let f = Fixture::new();
    f.op(purchase(1, Some("y")), 0, 1, done(true)); // replayed on its first call
    f.op(purchase(1, Some("z")), 2, 3, done(false));
    f.op(purchase(1, Some("z")), 4, 5, done(false)); // applied again
    let kinds: Vec<_> = stock::check(&f.history, "i", 10, Some(8))
        .iter()
        .map(|v| v.kind)
        .collect();
    assert_eq!(kinds, ["op-replayed", "op-applied-twice"]);
}

#[test]
fn rate_bounds_hold_for_each_algorithm() {
    let ten = Quota::per_second(NonZeroU32::new(10).unwrap());
    for (algorithm, admitted, over) in [
        (Algorithm::Gcra, 10, false),
        (Algorithm::Gcra, 11, true),
        (Algorithm::FixedWindow, 20, false),
        (Algorithm::FixedWindow, 21, true),
        (Algorithm::SlidingWindow, 20, false),
        (Algorithm::SlidingWindow, 21, true),
    ] {
        let f = Fixture::new();
        for i in 0..admitted {
            f.op(
                Call::Rate("r".into(), 1),
                i,
                i + 1,
                Outcome::Ok(Reply::Decision(true, 1)),
            );
        }
        let found = rate::check(&f.history, "r", algorithm, std::slice::from_ref(&ten));
        assert_eq!(
            !found.is_empty(),
            over,
            "{algorithm:?} with {admitted} admitted: {found:?}"
        );
    }
}

#[test]
fn errors_are_typed_unless_a_reply_was_misread() {
    let seen = |e: &lock_core::Error| untyped(e);
    let io = std::io::Error::other("Incompatible type - Parse error at 2\nUnexpected end of input");
    let cut = lock_core::Error::Backend(lock_core::BackendError::new(io, None));
    assert_eq!(seen(&cut), None);
    let other = std::io::Error::other("Response was of incompatible type - (response was int(1))");
    let misread = lock_core::Error::Backend(lock_core::BackendError::new(other, None));
    assert!(seen(&misread).is_some());
    assert!(seen(&lock_core::Error::UnexpectedReply("x".into())).is_some());
    assert_eq!(
        seen(&lock_core::Error::Timeout(Duration::from_secs(1))),
        None
    );
}
