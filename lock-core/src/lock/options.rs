//! How a lock is held: its lease, fencing tokens and fairness.

use std::time::Duration;

use crate::error::{Error, Result};

/// How long a lock is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lease {
    /// The lock expires this long after it was taken unless extended by hand.
    Fixed(Duration),
    /// The lock is held for this long and renewed every third of it while the
    /// guard lives.
    Watchdog(Duration),
}

impl Lease {
    /// The lease duration.
    pub fn duration(self) -> Duration {
        match self {
            Lease::Fixed(d) | Lease::Watchdog(d) => d,
        }
    }
}

pub use crate::time::MAX_LEASE;
/// Default watchdog lease.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// Options of a [`Lock`](super::Lock) (also used by [`ReentrantLock`](super::ReentrantLock) and [`Semaphore`](super::Semaphore)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockOptions {
    pub(super) lease: Lease,
    pub(super) fencing: bool,
    pub(super) fair: bool,
}

impl Default for LockOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl LockOptions {
    /// Watchdog lease of [`DEFAULT_LEASE`], no fencing tokens, not fair.
    pub const fn new() -> Self {
        LockOptions {
            lease: Lease::Watchdog(DEFAULT_LEASE),
            fencing: false,
            fair: false,
        }
    }

    /// A fixed lease: the lock expires `ttl` after it was taken.
    pub const fn lease(mut self, ttl: Duration) -> Self {
        self.lease = Lease::Fixed(ttl);
        self
    }

    /// A watchdog lease: held for `lease`, renewed every `lease / 3` while the
    /// guard lives.
    pub const fn watchdog(mut self, lease: Duration) -> Self {
        self.lease = Lease::Watchdog(lease);
        self
    }

    /// Whether each acquisition returns a fencing token.
    pub const fn fencing(mut self, on: bool) -> Self {
        self.fencing = on;
        self
    }

    /// A fair [`Lock`](super::Lock): waiters get it in arrival order, and a release wakes
    /// only the first of them. A waiter that gives up or is cancelled leaves
    /// the line at once; a crashed one is dropped after [`FAIR_SLOT`](super::backend::FAIR_SLOT).
    ///
    /// On Redis a release hands the lock straight to the first waiter, with
    /// the fencing token it asked for, and tells it so on its own channel: it
    /// holds the lock one message after the release, with no attempt of its
    /// own. The lock is set for the waiter's lease but at most
    /// [`HANDOFF_CLAIM`](super::backend::HANDOFF_CLAIM) until the waiter confirms its lease (its guard
    /// extends it at once, in the background), so a waiter that crashed or
    /// was stopped while first in line blocks the lock no longer than that.
    /// The guard counts the lease from the waiter's last attempt, which came
    /// before the handoff, so it never counts on more lease than it has. Each
    /// handoff is numbered, and each busy answer says how far the numbers
    /// had got: a handoff message that arrives after an answer that came
    /// after it (the handoff lapsed, and someone else took the lock) is
    /// ignored, and one whose claim has already run out when it arrives is
    /// given back, so the waiter never holds a guard while another client
    /// holds the lock.
    pub const fn fair(mut self, on: bool) -> Self {
        self.fair = on;
        self
    }

    /// The lease.
    pub const fn get_lease(&self) -> Lease {
        self.lease
    }

    pub(super) fn validate(&self) -> Result<()> {
        let (d, min) = match self.lease {
            Lease::Fixed(d) => (d, Duration::from_millis(1)),
            Lease::Watchdog(d) => (d, Duration::from_millis(3)),
        };
        if d < min {
            return Err(Error::invalid_argument(
                "lease",
                "must be at least 1 ms (3 ms with a watchdog)",
            ));
        }
        if d > MAX_LEASE {
            return Err(Error::invalid_argument("lease", "must be at most a year"));
        }
        Ok(())
    }
}
