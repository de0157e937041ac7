//! Checks of stock histories: conservation (initial plus restocked equals
//! remaining plus sold, once every hold is settled), each operation id and
//! order applied once with the same answer every time.
//!
//! Record every retry of an operation id or order as an operation of its
//! own (same call); settle every order (confirm or cancel until answered)
//! after the faults are healed and before reading the final stock.

use std::collections::BTreeMap;

use lock_core::counter::{Purchase, Reservation, Settle};

use super::{Call, History, Op, Outcome, Reply, Violation};

/// Units an operation took or gave: surely `known`, and up to `unknown`
/// more whose effect is not known.
#[derive(Debug, Default, Clone, Copy)]
struct Units {
    known: u64,
    unknown: u64,
}

/// The conservation check and the once-only checks for `item`, which
/// started with `initial` units and ended with `remaining`.
pub fn check(
    history: &History,
    item: &str,
    initial: u64,
    remaining: Option<u64>,
) -> Vec<Violation> {
    let ops = history.ops();
    let mut out = Vec::new();
    let mut restocked = Units::default();
    let mut decremented = Units::default();
    let mut by_id: BTreeMap<&str, Vec<&Op>> = BTreeMap::new();
    let mut orders: BTreeMap<&str, Vec<&Op>> = BTreeMap::new();
    for op in &ops {
        match &op.call {
            Call::Restock(i, q) if i == item => match &op.outcome {
                Outcome::Ok(Reply::Restocked(Some(_))) => restocked.known += q,
                Outcome::Unknown(_) | Outcome::Pending => restocked.unknown += q,
                _ => {}
            },
            Call::Decrement(i, n, None) if i == item => match &op.outcome {
                Outcome::Ok(Reply::Purchase(Purchase::Done { replayed, .. })) => {
                    decremented.known += n;
                    if *replayed {
                        out.push(once(
                            "op-replayed",
                            history,
                            op,
                            "a decrement without id answered replayed",
                        ));
                    }
                }
                Outcome::Unknown(_) | Outcome::Pending => decremented.unknown += n,
                _ => {}
            },
            Call::Decrement(i, _, Some(id)) if i == item => by_id.entry(id).or_default().push(op),
            Call::Reserve(i, _, order) | Call::Confirm(i, order) | Call::Cancel(i, order)
                if i == item =>
            {
                orders.entry(order).or_default().push(op);
            }
            _ => {}
        }
    }
    for calls in by_id.values() {
        let units = operation_id(history, calls, &mut out);
        decremented.known += units.known;
        decremented.unknown += units.unknown;
    }
    for calls in orders.values() {
        let units = order(history, calls, &mut out);
        decremented.known += units.known;
        decremented.unknown += units.unknown;
    }
    let base = initial + restocked.known;
    let low = base.saturating_sub(decremented.known + decremented.unknown);
    let high = (base + restocked.unknown).saturating_sub(decremented.known);
    let fits = remaining.is_some_and(|r| (low..=high).contains(&r));
    if !fits {
        out.push(Violation::new(
            "stock",
            format!(
                "{item}: {remaining:?} remain, expected {low}..={high}: initial {initial}, restocked \
                 {} (+ up to {} unknown), taken {} (+ up to {} unknown)",
                restocked.known, restocked.unknown, decremented.known, decremented.unknown
            ),
        ));
    }
    out
}

fn once(kind: &'static str, history: &History, op: &Op, what: &str) -> Violation {
    Violation::new(
        kind,
        format!(
            "{:?} at {:.0}..{:.0} ms (worker {}): {what}: {:?}",
            op.call,
            history.ms(op.invoke),
            op.complete.map_or(f64::NAN, |t| history.ms(t)),
            op.worker,
            op.reply()
        ),
    )
}

/// The calls of one operation id, in invoke order: what they took, and
/// whether their answers agree.
fn operation_id(history: &History, calls: &[&Op], out: &mut Vec<Violation>) -> Units {
    let Call::Decrement(_, n, _) = calls[0].call else {
        return Units::default();
    };
    let mut first: Option<&Purchase> = None;
    for (i, op) in calls.iter().enumerate() {
        let Some(Reply::Purchase(p)) = op.reply() else {
            continue;
        };
        let replayed = matches!(p, Purchase::Done { replayed: true, .. });
        if i == 0 && replayed {
            out.push(once(
                "op-replayed",
                history,
                op,
                "the id's first call answered replayed",
            ));
        }
        match first {
            None => first = Some(p),
            Some(earlier) => {
                let done = |p: &Purchase| matches!(p, Purchase::Done { .. });
                if done(earlier) != done(p) {
                    out.push(once(
                        "op-answer",
                        history,
                        op,
                        "a retry answered otherwise than the first call",
                    ));
                } else if done(p) && !replayed {
                    out.push(once(
                        "op-applied-twice",
                        history,
                        op,
                        "a retry was applied again",
                    ));
                }
            }
        }
    }
    match first {
        Some(Purchase::Done { .. }) => Units {
            known: n,
            unknown: 0,
        },
        Some(_) => Units::default(),
        None => Units {
            known: 0,
            unknown: n,
        },
    }
}

/// The calls of one order, in invoke order: what it sold (held units are
/// all settled by then), and whether the answers agree.
fn order(history: &History, calls: &[&Op], out: &mut Vec<Violation>) -> Units {
    let n = calls.iter().find_map(|op| match op.call {
        Call::Reserve(_, n, _) => Some(n),
        _ => None,
    });
    let Some(n) = n else { return Units::default() };
    let mut confirmed = false;
    let mut settled = false; // an answer said the order holds nothing
    let mut reserve_unknown = false;
    for (i, op) in calls.iter().enumerate() {
        match (&op.call, op.reply()) {
            (Call::Reserve(..), None) => reserve_unknown = true,
            (Call::Reserve(..), Some(Reply::Reservation(r))) => {
                let again = matches!(
                    r,
                    Reservation::AlreadyHeld { .. } | Reservation::AlreadyConfirmed
                );
                if again
                    && calls[..i]
                        .iter()
                        .all(|c| !matches!(c.call, Call::Reserve(..)))
                {
                    out.push(once(
                        "op-replayed",
                        history,
                        op,
                        "the order's first reservation answered as a retry",
                    ));
                }
                confirmed |= matches!(r, Reservation::AlreadyConfirmed);
            }
            (_, Some(Reply::Settle(s))) => match s {
                Settle::Confirmed | Settle::AlreadyConfirmed => {
                    if settled && !reserve_unknown {
                        out.push(once(
                            "settle-answer",
                            history,
                            op,
                            "confirmed after an answer said nothing was held",
                        ));
                    }
                    confirmed = true;
                }
                Settle::Cancelled { .. } | Settle::NotHeld => {
                    if confirmed {
                        out.push(once(
                            "settle-answer",
                            history,
                            op,
                            "an order already confirmed",
                        ));
                    }
                    settled = true;
                }
                _ => {}
            },
            _ => {}
        }
    }
    let last_answered = calls
        .last()
        .is_some_and(|op| !matches!(op.call, Call::Reserve(..)) && op.reply().is_some());
    if confirmed {
        Units {
            known: n,
            unknown: 0,
        }
    } else if last_answered {
        Units::default()
    } else {
        Units {
            known: 0,
            unknown: n,
        }
    }
}
