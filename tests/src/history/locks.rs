//! Checks of lock histories: exclusion, fencing order, guards returned
//! already lost, release answers.

use std::collections::BTreeMap;
use std::time::Instant;

use super::{Call, History, Op, OpId, Outcome, Reply, Violation};

/// How holders of one lock may share it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exclusion {
    /// One owner at a time (plain, fair, reentrant; a multi-lock's parts).
    Exclusive,
    /// Shared acquisitions (readers) together, or one owner's.
    ReadWrite,
    /// At most this many permits held at once.
    Permits(u32),
}

/// A guard's span of validity, as the history shows it.
#[derive(Debug, Clone)]
struct Held {
    op: OpId,
    worker: usize,
    owner: String,
    shared: bool,
    permits: u32,
    invoke: Instant,
    /// After the acquire returned.
    from: Instant,
    /// The earliest of its release's invoke and its reported lease end.
    until: Instant,
    fence: Option<u64>,
}

/// The guards of each lock, by lock, in the order their acquires returned.
fn holds(ops: &[Op]) -> BTreeMap<String, Vec<Held>> {
    let mut released: BTreeMap<OpId, Instant> = BTreeMap::new();
    for op in ops {
        if let Call::Release(grants) = &op.call {
            for &g in grants {
                let at = released.entry(g).or_insert(op.invoke);
                *at = (*at).min(op.invoke);
            }
        }
    }
    let mut locks: BTreeMap<String, Vec<Held>> = BTreeMap::new();
    for (id, op) in ops.iter().enumerate() {
        let (
            Call::Acquire {
                lock,
                owner,
                shared,
                permits,
            },
            Some(Reply::Granted(grant)),
            Some(from),
        ) = (&op.call, op.reply(), op.complete)
        else {
            continue;
        };
        let mut until = grant.valid_until;
        if let Some(&release) = released.get(&id) {
            until = until.min(release);
        }
        locks.entry(lock.clone()).or_default().push(Held {
            op: id,
            worker: op.worker,
            owner: owner.clone(),
            shared: *shared,
            permits: *permits,
            invoke: op.invoke,
            from,
            until,
            fence: grant.fence,
        });
    }
    for held in locks.values_mut() {
        held.sort_by_key(|h| h.from);
    }
    locks
}

/// Every lock check over `history`; `exclusion` says how each lock (by
/// the identity its acquires were recorded with) may be shared.
pub fn check(history: &History, exclusion: impl Fn(&str) -> Exclusion) -> Vec<Violation> {
    let ops = history.ops();
    let mut found = Vec::new();
    for (lock, held) in holds(&ops) {
        let ms = |t: Instant| history.ms(t);
        let describe = |h: &Held| {
            format!(
                "op {} (worker {}, owner {}, fence {:?}) valid {:.0}..{:.0} ms",
                h.op,
                h.worker,
                short(&h.owner),
                h.fence,
                ms(h.from),
                ms(h.until)
            )
        };
        let mut out = Vec::new();
        match exclusion(&lock) {
            Exclusion::Permits(n) => permits(&held, n, &mut out, &describe),
            mode => {
                for (i, a) in held.iter().enumerate() {
                    for b in &held[i + 1..] {
                        if b.from >= a.until {
                            continue; // sorted by `from`: b starts after a ended
                        }
                        let shared = mode == Exclusion::ReadWrite && a.shared && b.shared;
                        if b.from < b.until && a.owner != b.owner && !shared {
                            out.push(Violation::new(
                                "overlap",
                                format!("{lock}: {} and {} both held it", describe(a), describe(b)),
                            ));
                        }
                    }
                }
            }
        }
        fences(&held, &lock, &mut out, &describe);
        found.extend(out);
    }
    found.extend(returned_lost(&ops, history));
    found.extend(release_answers(&ops, history));
    found
}

fn short(owner: &str) -> &str {
    &owner[..owner.len().min(8)]
}

/// A semaphore's permits held at once never exceed `n`.
fn permits(held: &[Held], n: u32, out: &mut Vec<Violation>, describe: &dyn Fn(&Held) -> String) {
    // Ends sort before starts at the same instant: the library's favour.
    let mut events: Vec<(Instant, bool, usize)> = Vec::new();
    for (i, h) in held.iter().enumerate().filter(|(_, h)| h.from < h.until) {
        events.push((h.from, true, i));
        events.push((h.until, false, i));
    }
    events.sort_by_key(|&(at, start, _)| (at, start));
    let mut open: Vec<usize> = Vec::new();
    for (_, start, i) in events {
        if !start {
            open.retain(|&o| o != i);
            continue;
        }
        open.push(i);
        let taken: u32 = open.iter().map(|&o| held[o].permits).sum();
        if taken > n {
            let who: Vec<String> = open.iter().map(|&o| describe(&held[o])).collect();
            out.push(Violation::new(
                "permits",
                format!("{taken} of {n} permits held at once: {}", who.join("; ")),
            ));
        }
    }
}

/// Fencing tokens rise in grant order; a re-entry carries its holding's.
fn fences(held: &[Held], lock: &str, out: &mut Vec<Violation>, describe: &dyn Fn(&Held) -> String) {
    let fenced: Vec<&Held> = held.iter().filter(|h| h.fence.is_some()).collect();
    for a in &fenced {
        for b in &fenced {
            // `a` was granted before `b` was asked for.
            if a.from >= b.invoke {
                continue;
            }
            let (fa, fb) = (a.fence.unwrap_or(0), b.fence.unwrap_or(0));
            if a.owner != b.owner {
                if fa >= fb {
                    out.push(Violation::new(
                        "fence-order",
                        format!(
                            "{lock}: {} granted before {} was asked for",
                            describe(a),
                            describe(b)
                        ),
                    ));
                }
            } else if a.until >= b.from && fa != fb {
                out.push(Violation::new(
                    "reentry-fence",
                    format!(
                        "{lock}: re-entry {} while {} held it: tokens differ",
                        describe(b),
                        describe(a)
                    ),
                ));
            } else if fa > fb {
                out.push(Violation::new(
                    "fence-order",
                    format!(
                        "{lock}: {} granted before {} (same owner)",
                        describe(a),
                        describe(b)
                    ),
                ));
            }
        }
    }
}

/// Guards the [`Recorded`](super::Recorded) backend proved lost before return.
fn returned_lost(ops: &[Op], history: &History) -> Vec<Violation> {
    let found = ops.iter().enumerate().filter_map(|(id, op)| match (&op.call, op.reply()) {
        (Call::Acquire { lock, .. }, Some(Reply::Granted(grant))) => {
            grant.returned_lost.as_ref().map(|why| {
                Violation::new(
                    "returned-lost",
                    format!(
                        "{lock}: op {id} (worker {}) asked at {:.0} ms, returned at {:.0} ms: {why}",
                        op.worker,
                        history.ms(op.invoke),
                        op.complete.map_or(f64::NAN, |t| history.ms(t)),
                    ),
                )
            })
        }
        _ => None,
    });
    found.collect()
}

/// A release answers `false` only when a lease may have ended by the time
/// it was answered.
fn release_answers(ops: &[Op], history: &History) -> Vec<Violation> {
    let mut out = Vec::new();
    for (id, op) in ops.iter().enumerate() {
        let (Call::Release(grants), Outcome::Ok(Reply::Released(false)), Some(done)) =
            (&op.call, &op.outcome, op.complete)
        else {
            continue;
        };
        let valid = grants.iter().all(|&g| match ops[g].reply() {
            Some(Reply::Granted(grant)) => grant.valid_until > done,
            _ => false,
        });
        if valid {
            let lock = match &ops[grants[0]].call {
                Call::Acquire { lock, .. } => lock.as_str(),
                _ => "?",
            };
            out.push(Violation::new(
                "release-answer",
                format!(
                    "{lock}: release op {id} (worker {}, {:.0}..{:.0} ms) answered false, though \
                     the lease of op {:?} was reported valid past the answer",
                    op.worker,
                    history.ms(op.invoke),
                    history.ms(done),
                    grants
                ),
            ));
        }
    }
    out
}
