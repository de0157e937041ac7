//! The message by which a fair lock's release hands the lock to the first
//! in line, on that waiter's own channel: `held:<number>:<fence>`, written
//! by `hand_over` in `fair_prune.lua`. The number is the handoff's (see
//! [`Attempt::Busy::handoffs`](crate::lock::interface::Attempt::Busy)),
//! the fence the fencing token granted (0: none was asked for).

use crate::backend::notify::Note;
use crate::lock::interface::{HANDOFF_CLAIM, Handoff};

/// Reads a handoff message into a [`Note`] (the handoff's number, and the
/// fence as its value); `None` for any other message, a plain wake-up.
pub(super) fn read(payload: &[u8]) -> Option<Note> {
    let text = std::str::from_utf8(payload.strip_prefix(b"held:")?).ok()?;
    let (number, fence) = text.split_once(':')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(number) || !digits(fence) {
        return None;
    }
    Some(Note {
        number: number.parse().ok()?,
        value: fence.parse().ok()?,
    })
}

/// The handoff a note [`read`] announces.
pub(super) fn handoff(note: Note) -> Handoff {
    let fence = note.value;
    // The scripts' `hand_over` sets the lock for at most the claim.
    Handoff::new((fence != 0).then_some(fence), HANDOFF_CLAIM)
}

#[cfg(test)]
mod tests {
    use super::{Note, read};

    #[test]
    fn only_a_well_formed_handoff_message_hands_over() {
        assert_eq!(
            read(b"held:3:0"),
            Some(Note {
                number: 3,
                value: 0
            })
        );
        assert_eq!(
            read(b"held:1732800000000007:1732800000000001"),
            Some(Note {
                number: 1_732_800_000_000_007,
                value: 1_732_800_000_000_001
            })
        );
        for other in [
            &b"wake"[..],
            b"released",
            b"held:",
            b"held:0",
            b"held:1:",
            b"held::1",
            b"held:-1:2",
            b"held:1:+2",
            b"held:1e15:0",
            b"held:1:2:3",
            b"xheld:1:1",
        ] {
            assert_eq!(read(other), None, "{:?}", String::from_utf8_lossy(other));
        }
    }
}
