//! Every lock kind in memory: the same semantics as on Redis, for one process.

mod backend;
mod fair;
mod read_write;
#[cfg(test)]
mod tests;

pub use self::backend::MemoryWaiter;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use super::backend::{AcquireRequest, Attempt, Kind, LockState, RELEASE_REMEMBERED};
use crate::backend::notify::Waiters;
use crate::backend::{MemoryConfig, MemoryState};
use crate::map::shrink_swept;
use crate::name::Name;
use fair::Fair;
use read_write::ReadWrite;

type Token = Box<str>;

enum Slot {
    Plain {
        token: Token,
        expires: Instant,
    },
    Reentrant {
        owner: Token,
        acquisitions: HashSet<Token>,
        expires: Instant,
        /// The owner's fencing token, once one was asked for: every
        /// re-entry gets it, as the resource has already seen it.
        fence: Option<u64>,
    },
    Fair(Fair),
    Semaphore {
        /// Each holder's lease and how many permits it holds.
        permits: HashMap<Token, (Instant, u32)>,
    },
    ReadWrite(ReadWrite),
}

impl Slot {
    /// Drops what has expired; says whether anything is left.
    fn prune(&mut self, now: Instant) -> bool {
        match self {
            Slot::Plain { expires, .. } | Slot::Reentrant { expires, .. } => *expires > now,
            Slot::Fair(lock) => lock.prune(now),
            Slot::Semaphore { permits } => {
                permits.retain(|_, (e, _)| *e > now);
                !permits.is_empty()
            }
            Slot::ReadWrite(lock) => lock.prune(now),
        }
    }
}

/// A lock's place in the table: its kind's tag and its name.
type SlotKey = (&'static str, Name);

/// Locks of one [`MemoryBackend`]. Expired entries are dropped when touched
/// and swept every [`SWEEP_EVERY`] acquisitions, so the map only holds live
/// locks.
#[derive(Default)]
pub(crate) struct LockTable {
    slots: Mutex<HashMap<SlotKey, Slot>>,
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

fn wake_key(kind: Kind, name: &Name) -> String {
    format!("{}:{name}", kind.tag())
}

fn fair_wake_key(name: &Name, token: &str) -> String {
    format!("flock:{name}:{token}")
}

impl LockTable {
    /// Runs `f` on the live slot of `(kind, name)` (None when free), under the
    /// table lock; removes the slot if `f` leaves nothing in it.
    fn with<T>(
        &self,
        kind: Kind,
        name: &Name,
        f: impl FnOnce(&mut Option<Slot>, Instant) -> T,
    ) -> T {
        let now = Instant::now();
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (kind.tag(), name.clone());
        let mut slot = slots.remove(&key);
        if slot.as_mut().is_some_and(|s| !s.prune(now)) {
            slot = None;
        }
        let out = f(&mut slot, now);
        if let Some(mut s) = slot
            && s.prune(now)
        {
            slots.insert(key, s);
        }
        out
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

    fn fence(&self, fencing: bool) -> Option<u64> {
        // One counter for all names: monotonic overall, so monotonic per name.
        fencing.then(|| self.fence.fetch_add(1, Ordering::Relaxed) + 1)
    }

    fn acquire(&self, request: &AcquireRequest<'_>) -> Attempt {
        self.sweep();
        let token: Token = request.token.into();
        let lease = request.lease;
        let acquired = || Attempt::Acquired {
            fence: self.fence(request.fencing),
        };
        let busy = |until: Option<Instant>, now: Instant| {
            Attempt::busy(until.map(|u| u.saturating_duration_since(now)))
        };
        let mut wake = None;
        let attempt = self.with(request.kind, request.name, |slot, now| {
            match (request.kind, slot.as_mut()) {
                (Kind::Plain, None) => {
                    *slot = Some(Slot::Plain {
                        token,
                        expires: now + lease,
                    });
                    acquired()
                }
                (Kind::Plain, Some(Slot::Plain { expires, .. })) => busy(Some(*expires), now),
                (Kind::Reentrant, None) => {
                    let fence = self.fence(request.fencing);
                    *slot = Some(Slot::Reentrant {
                        owner: request.owner.unwrap_or_default().into(),
                        acquisitions: HashSet::from([token]),
                        expires: now + lease,
                        fence,
                    });
                    Attempt::Acquired { fence }
                }
                (
                    Kind::Reentrant,
                    Some(Slot::Reentrant {
                        owner,
                        acquisitions,
                        expires,
                        fence,
                    }),
                ) => {
                    if Some(&**owner) != request.owner {
                        return busy(Some(*expires), now);
                    }
                    acquisitions.insert(token);
                    *expires = (*expires).max(now + lease);
                    if request.fencing && fence.is_none() {
                        *fence = self.fence(true);
                    }
                    Attempt::Acquired {
                        fence: fence.filter(|_| request.fencing),
                    }
                }
                (Kind::Fair, slot_now) => {
                    let lock = match slot_now {
                        Some(Slot::Fair(lock)) => lock,
                        Some(_) => return busy(None, now),
                        None => {
                            *slot = Some(Slot::Fair(Fair::default()));
                            let Some(Slot::Fair(lock)) = slot.as_mut() else {
                                unreachable!("just set")
                            };
                            lock
                        }
                    };
                    let fair = fair::Request {
                        token: request.token,
                        owner: request.owner,
                        lease,
                    };
                    let (attempt, nudge) = lock.acquire(&fair, now, || self.fence(request.fencing));
                    wake = nudge;
                    attempt
                }
                (Kind::Semaphore { count, .. }, None) => {
                    *slot = Some(Slot::Semaphore {
                        permits: HashMap::from([(token, (now + lease, count.get()))]),
                    });
                    acquired()
                }
                (
                    Kind::Semaphore {
                        permits: max,
                        count,
                    },
                    Some(Slot::Semaphore { permits }),
                ) => {
                    let held = permits.contains_key(&token);
                    let taken: u32 = permits.values().map(|(_, n)| n).sum();
                    if held || taken + count.get() <= max.get() {
                        permits.insert(token, (now + lease, count.get()));
                        return acquired();
                    }
                    busy(permits.values().map(|(e, _)| *e).min(), now)
                }
                (Kind::Read | Kind::Write, slot_now) => {
                    let lock = match slot_now {
                        Some(Slot::ReadWrite(lock)) => lock,
                        Some(_) => return busy(None, now),
                        None => {
                            *slot = Some(Slot::ReadWrite(ReadWrite::default()));
                            let Some(Slot::ReadWrite(lock)) = slot.as_mut() else {
                                unreachable!("just set")
                            };
                            lock
                        }
                    };
                    let write = request.kind == Kind::Write;
                    let rw = read_write::Request {
                        token: request.token,
                        owner: request.owner.unwrap_or_default(),
                        write,
                        lease,
                    };
                    if let Some(busy) = lock.acquire(&rw, now) {
                        return busy;
                    }
                    if write && request.fencing && lock.fence.is_none() {
                        lock.fence = self.fence(true);
                    }
                    Attempt::Acquired {
                        fence: lock.fence.filter(|_| write && request.fencing),
                    }
                }
                // A slot of another kind cannot be under this kind's key.
                (_, Some(_)) => busy(None, now),
            }
        });
        if let Some(head) = wake {
            self.waiters.wake(&fair_wake_key(request.name, &head));
        }
        attempt
    }

    fn release(&self, kind: Kind, name: &Name, token: &str) -> bool {
        let mut wake = None;
        let released = self.with(kind, name, |slot, _| {
            let released = match slot.as_mut() {
                Some(Slot::Plain { token: held, .. }) if &**held == token => {
                    *slot = None;
                    true
                }
                Some(Slot::Reentrant { acquisitions, .. }) => {
                    let released = acquisitions.remove(token);
                    if acquisitions.is_empty() {
                        *slot = None;
                    }
                    released
                }
                Some(Slot::Fair(lock)) => {
                    let (mine, head) = lock.release(token);
                    wake = head.map(|t| fair_wake_key(name, &t));
                    return mine;
                }
                Some(Slot::Semaphore { permits }) => permits.remove(token).is_some(),
                Some(Slot::ReadWrite(lock)) => {
                    let (released, woken) = lock.release(token);
                    if woken {
                        wake = Some(wake_key(kind, name));
                    }
                    return released;
                }
                _ => false,
            };
            if released {
                wake = Some(wake_key(kind, name));
            }
            released
        });
        if let Some(key) = wake {
            self.waiters.wake(&key);
        }
        self.last_release(kind, name, token, released)
    }

    fn inspect(&self, kind: Kind, name: &Name) -> Option<LockState> {
        let ms = |until: Instant, now: Instant| {
            i64::try_from(until.saturating_duration_since(now).as_millis()).unwrap_or(i64::MAX)
        };
        self.with(kind, name, |slot, now| match slot.as_ref()? {
            Slot::Plain { token, expires } => Some(LockState::new(1, ms(*expires, now), token)),
            Slot::Reentrant { owner, expires, .. } => {
                Some(LockState::new(1, ms(*expires, now), owner))
            }
            Slot::Fair(lock) => lock.state(now),
            Slot::Semaphore { permits } => {
                let taken = permits.values().map(|(_, n)| n).sum();
                let (token, (expires, _)) = permits.iter().min_by_key(|(_, (e, _))| *e)?;
                Some(LockState::new(taken, ms(*expires, now), token))
            }
            Slot::ReadWrite(lock) => lock.state(now),
        })
    }

    fn extend(&self, kind: Kind, name: &Name, token: &str, lease: Duration) -> bool {
        self.with(kind, name, |slot, now| match slot.as_mut() {
            Some(Slot::Plain {
                token: held,
                expires,
            }) if &**held == token => {
                *expires = now + lease;
                true
            }
            Some(Slot::Reentrant {
                acquisitions,
                expires,
                ..
            }) if acquisitions.contains(token) => {
                *expires = (*expires).max(now + lease);
                true
            }
            Some(Slot::Fair(lock)) => lock.extend(token, lease, now),
            Some(Slot::Semaphore { permits }) => match permits.get_mut(token) {
                Some((expires, _)) => {
                    *expires = now + lease;
                    true
                }
                None => false,
            },
            Some(Slot::ReadWrite(lock)) => lock.extend(token, lease, now),
            _ => false,
        })
    }

    fn force_release(&self, kind: Kind, name: &Name) -> bool {
        let mut wake = None;
        let released = self.with(kind, name, |slot, _| match slot.as_mut() {
            Some(Slot::Fair(lock)) => {
                let (held, head) = lock.force();
                wake = head.map(|t| fair_wake_key(name, &t));
                held
            }
            Some(Slot::ReadWrite(lock)) => {
                // Writers waiting keep their places.
                wake = Some(wake_key(kind, name));
                lock.clear()
            }
            Some(_) => {
                *slot = None;
                wake = Some(wake_key(kind, name));
                true
            }
            None => false,
        });
        if let Some(key) = wake {
            self.waiters.wake(&key);
        }
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
