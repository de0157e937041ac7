//! What every kind's state in memory answers to the memory table.

use std::time::Duration;

use tokio::time::Instant;

use crate::lock::interface::{AcquireRequest, Attempt, LockState};

/// A token or an owner, as a memory state keeps it.
pub(super) type Token = Box<str>;

/// Whom a step wakes.
pub(crate) enum Wake {
    /// Nobody.
    Nobody,
    /// Every waiter of the lock.
    Everyone,
    /// The waiter of this token only (the head of a fair lock's line).
    Waiter(Token),
}

/// One lock's state in memory, of one kind: the same rules as its
/// scripts on Redis, for one process. Each step runs under the table's
/// lock, with the lock's expired parts already dropped.
pub(crate) trait Held: Send {
    /// Drops what has expired; says whether anything is left.
    fn prune(&mut self, now: Instant) -> bool;

    /// Takes the lock for `request` if its rules let it; `fence` gives a
    /// new fencing token, for a request that asks for one.
    fn acquire(
        &mut self,
        request: &AcquireRequest<'_>,
        now: Instant,
        fence: &dyn Fn() -> u64,
    ) -> (Attempt, Wake);

    /// Releases `token`'s acquisition (or takes a waiter that gave up out
    /// of the line); says whether it held the lock.
    fn release(&mut self, token: &str) -> (bool, Wake);

    /// Sets `token`'s lease to `lease` from now, if it holds the lock.
    fn extend(&mut self, token: &str, lease: Duration, now: Instant) -> bool;

    /// Releases the lock whoever holds it; says whether someone did.
    fn force(&mut self) -> (bool, Wake);

    /// Who holds it, for operators.
    fn state(&self, now: Instant) -> Option<LockState>;
}

/// Milliseconds from `now` until `until` (0 once past).
pub(super) fn ms(until: Instant, now: Instant) -> i64 {
    i64::try_from(until.saturating_duration_since(now).as_millis()).unwrap_or(i64::MAX)
}

/// Busy until `until`, if known.
pub(super) fn busy(until: Option<Instant>, now: Instant) -> Attempt {
    Attempt::busy(until.map(|u| u.saturating_duration_since(now)))
}
