//! Locks in memory, for one process: a table of every live lock's state,
//! whose steps are its kind's (see [`kinds`](super::kinds)).

mod backend;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use super::interface::{AcquireRequest, Attempt, Kind, LockState, RELEASE_REMEMBERED};
use super::kinds::{Held, Wake};
use crate::backend::notify::Waiters;
use crate::backend::{MemoryConfig, MemoryState};
use crate::map::shrink_swept;
use crate::name::Name;

type Token = Box<str>;

/// A lock's place in the table: its kind's tag and its name.
type SlotKey = (&'static str, Name);

/// Locks of one [`MemoryBackend`]. Expired entries are dropped when touched
/// and swept every [`SWEEP_EVERY`] acquisitions, so the map only holds live
/// locks.
#[derive(Default)]
pub(crate) struct LockTable {
    slots: Mutex<HashMap<SlotKey, Box<dyn Held>>>,
    /// The tokens each lock released, until when each is remembered (see
    /// [`RELEASE_REMEMBERED`]): every one, not only the last, so a release
    /// retried after others gets its own first answer.
    last_releases: Mutex<HashMap<(SlotKey, Token), Instant>>,
    fence: AtomicU64,
    acquisitions: AtomicU64,
    waiters: Waiters,
}

impl MemoryState for LockTable {
    fn new(_: &MemoryConfig) -> Self {
        LockTable::default()
    }
}

const SWEEP_EVERY: u64 = 1024;

impl LockTable {
    /// Runs `f` on the live state of `(kind, name)`, under the table lock:
    /// a free lock's, when `free` (else `None` for a free lock). Drops the
    /// state if `f` leaves nothing in it.
    fn with<T>(
        &self,
        kind: Kind,
        name: &Name,
        free: bool,
        f: impl FnOnce(&mut dyn Held, Instant) -> T,
    ) -> Option<T> {
        let now = Instant::now();
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (kind.tag(), name.clone());
        // The state is changed where it lies, never taken out of the table
        // for the step: a step that panicked would otherwise take the
        // lock's holders with it, and the lock would look free.
        if !slots.get_mut(&key).is_some_and(|s| s.prune(now)) {
            slots.remove(&key);
            if !free {
                return None;
            }
            slots.insert(key.clone(), kind.module(|k| k.memory_state()));
        }
        let slot = slots.get_mut(&key)?;
        let out = f(&mut **slot, now);
        if !slot.prune(now) {
            slots.remove(&key);
        }
        Some(out)
    }

    /// Wakes whom a step of `(kind, name)` said to wake.
    fn wake(&self, kind: Kind, name: &Name, wake: Wake) {
        let key = match wake {
            Wake::Nobody => return,
            Wake::Everyone => kind.module(|k| k.memory_channel(name, None)),
            Wake::Waiter(token) => kind.module(|k| k.memory_channel(name, Some(&token))),
        };
        self.waiters.wake(&key);
    }

    fn sweep(&self) {
        if self.acquisitions.fetch_add(1, Ordering::Relaxed) % SWEEP_EVERY == SWEEP_EVERY - 1 {
            let now = Instant::now();
            let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
            slots.retain(|_, s| s.prune(now));
            shrink_swept(&mut slots);
            drop(slots);
            let mut last = self
                .last_releases
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            last.retain(|_, until| *until > now);
            shrink_swept(&mut last);
        }
    }

    /// Remembers `token` as a release of `(kind, name)`, or, for a token
    /// whose lock was not held, says whether it is such a release retried.
    fn last_release(&self, kind: Kind, name: &Name, token: &str, released: bool) -> bool {
        let now = Instant::now();
        let mut last = self
            .last_releases
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let key = ((kind.tag(), name.clone()), Token::from(token));
        if released {
            last.insert(key, now + RELEASE_REMEMBERED);
            return true;
        }
        last.get(&key).is_some_and(|until| *until > now)
    }

    fn acquire(&self, request: &AcquireRequest<'_>) -> Attempt {
        self.sweep();
        // One counter for all names: monotonic overall, so monotonic per name.
        let fence = || self.fence.fetch_add(1, Ordering::Relaxed) + 1;
        let (attempt, wake) = self
            .with(request.kind, request.name, true, |held, now| {
                held.acquire(request, now, &fence)
            })
            .expect("a free lock has a state");
        self.wake(request.kind, request.name, wake);
        attempt
    }

    fn release(&self, kind: Kind, name: &Name, token: &str) -> bool {
        let (released, wake) = self
            .with(kind, name, false, |held, _| held.release(token))
            .unwrap_or((false, Wake::Nobody));
        self.wake(kind, name, wake);
        self.last_release(kind, name, token, released)
    }

    fn inspect(&self, kind: Kind, name: &Name) -> Option<LockState> {
        self.with(kind, name, false, |held, now| held.state(now))
            .flatten()
    }

    fn extend(&self, kind: Kind, name: &Name, token: &str, lease: Duration) -> bool {
        self.with(kind, name, false, |held, now| {
            held.extend(token, lease, now)
        })
        .unwrap_or(false)
    }

    fn force_release(&self, kind: Kind, name: &Name) -> bool {
        let (released, wake) = self
            .with(kind, name, false, |held, _| held.force())
            .unwrap_or((false, Wake::Nobody));
        self.wake(kind, name, wake);
        released
    }

    /// Live locks, for tests of eviction.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        let now = Instant::now();
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        slots
            .values_mut()
            .filter_map(|s| s.prune(now).then_some(()))
            .count()
    }
}
