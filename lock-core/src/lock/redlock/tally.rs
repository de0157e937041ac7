//! How Redlock counts its servers' answers: a majority's yes or no, and
//! the holder a majority agrees on.

use crate::error::{Error, Result};
use crate::lock::interface::LockState;

/// Whether `results` already hold a majority of yeses or of noes.
pub(super) fn majority(results: &[Result<bool>], quorum: usize) -> bool {
    let yes = results.iter().filter(|r| matches!(r, Ok(true))).count();
    let no = results.iter().filter(|r| matches!(r, Ok(false))).count();
    yes >= quorum || no >= quorum
}

/// A majority's answer: yes when a majority said yes; no only when the
/// yeses and the servers that did not answer (each of which may have
/// said yes) together fall short of a majority; otherwise unknown, an
/// error. A release that reached two of the three servers holding the
/// lock, while the third did not answer, does not know whether the
/// lock was still held on a majority: it says so rather than "no".
pub(super) fn tally(results: &[Result<bool>], quorum: usize) -> Result<bool> {
    let yes = results.iter().filter(|r| matches!(r, Ok(true))).count();
    let no = results.iter().filter(|r| matches!(r, Ok(false))).count();
    let unanswered = results.len() - yes - no;
    if yes >= quorum {
        Ok(true)
    } else if yes + unanswered < quorum {
        Ok(false)
    } else {
        Err(Error::NoQuorum {
            answered: yes.max(no),
            needed: quorum,
        })
    }
}

/// The state a majority (`quorum`) of servers' `answers` agree on: the
/// same holder, with the shortest of their leases, the one to count on;
/// `None` when no holder has a majority.
pub(super) fn agreed(answers: &[Option<LockState>], quorum: usize) -> Option<LockState> {
    let agreeing = |state: &LockState| {
        answers
            .iter()
            .flatten()
            .filter(|other| other.holder == state.holder)
            .count()
    };
    let held = answers
        .iter()
        .flatten()
        .find(|state| agreeing(state) >= quorum)?;
    let remaining = answers
        .iter()
        .flatten()
        .filter(|other| other.holder == held.holder)
        .filter_map(|other| other.remaining)
        .min();
    Some(LockState {
        remaining,
        ..held.clone()
    })
}
