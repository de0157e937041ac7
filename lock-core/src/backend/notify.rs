//! Local wake-up registry: waiters register interest in a name and are woken
//! when a release of that name is observed (in memory directly, on Redis through
//! the shared pub/sub subscriber).
//!
//! Each name has a generation counter in a `watch` channel. A waiter marks the
//! current generation as seen *before* it tries to acquire, then waits for the
//! generation to change; so a wake-up that lands between the attempt and the
//! wait is never lost. A wake-up may also say that the lock was handed over
//! to the waiter (a fair lock's release gives it to the head of the line),
//! with the handoff's number, so that the waiter can tell a handoff made
//! after its last attempt from one that has since lapsed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::watch;

use crate::map::shrink_swept;

/// A lock handed over to a waiter, as its message said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Handed {
    /// The handoff's number (see `Attempt::Busy::handoffs`).
    pub(crate) number: u64,
    /// The fencing token, 0 for none.
    pub(crate) fence: u64,
}

/// What a waiter's channel last said.
#[derive(Clone, Copy, Default)]
struct Signal {
    /// Bumped on every wake-up.
    generation: u64,
    /// The latest handoff to the waiter, if any.
    handed: Option<Handed>,
}

impl Signal {
    fn bump(&mut self, handed: Option<Handed>) {
        self.generation = self.generation.wrapping_add(1);
        // Messages of one channel come in order; the number decides anyway.
        if let Some(new) = handed
            && self.handed.is_none_or(|old| new.number > old.number)
        {
            self.handed = Some(new);
        }
    }
}

struct Entry {
    refs: usize,
    tx: watch::Sender<Signal>,
}

/// Registry of local waiters, keyed by an arbitrary string (a name or a channel).
#[derive(Clone, Default)]
pub(crate) struct Waiters {
    map: Arc<Mutex<HashMap<String, Entry>>>,
}

impl Waiters {
    /// Registers interest in `key`; the registration ends when the handle drops.
    pub(crate) fn register(&self, key: &str) -> WaitHandle {
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = map.entry(key.to_owned()).or_insert_with(|| Entry {
            refs: 0,
            tx: watch::channel(Signal::default()).0,
        });
        entry.refs += 1;
        WaitHandle {
            rx: entry.tx.subscribe(),
            key: key.to_owned(),
            waiters: self.clone(),
        }
    }

    /// Wakes every waiter registered for `key`.
    pub(crate) fn wake(&self, key: &str) {
        self.signal(key, None);
    }

    #[cfg(feature = "redis")]
    /// Wakes the waiter registered for `key` and tells it that the lock was
    /// handed to it.
    pub(crate) fn hand_over(&self, key: &str, handed: Handed) {
        self.signal(key, Some(handed));
    }

    fn signal(&self, key: &str, handed: Option<Handed>) {
        let map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(entry) = map.get(key) {
            entry.tx.send_modify(|signal| signal.bump(handed));
        }
    }

    #[cfg(feature = "redis")]
    /// Wakes every waiter (after a lost connection, so that they retry).
    pub(crate) fn wake_all(&self) {
        let map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        for entry in map.values() {
            entry.tx.send_modify(|signal| signal.bump(None));
        }
    }

    #[cfg_attr(not(feature = "redis"), allow(dead_code))] // Redis and the tests use it
    /// Whether anyone is registered for `key`.
    pub(crate) fn is_registered(&self, key: &str) -> bool {
        let map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        map.contains_key(key)
    }

    /// Number of keys with at least one waiter.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    fn unregister(&self, key: &str) {
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(entry) = map.get_mut(key) {
            entry.refs -= 1;
            if entry.refs == 0 {
                map.remove(key);
                shrink_swept(&mut map);
            }
        }
    }
}

/// One waiter's registration.
pub(crate) struct WaitHandle {
    rx: watch::Receiver<Signal>,
    key: String,
    waiters: Waiters,
}

impl WaitHandle {
    /// Marks every wake-up so far as seen.
    pub(crate) fn mark_seen(&mut self) {
        self.rx.borrow_and_update();
    }

    #[cfg(feature = "redis")]
    /// The latest handoff of the lock to this waiter, if any.
    pub(crate) fn handed(&self) -> Option<Handed> {
        self.rx.borrow().handed
    }

    /// Waits for a wake-up after the last [`mark_seen`](Self::mark_seen).
    pub(crate) async fn changed(&mut self) {
        // The sender lives in the map entry, which lives as long as this handle.
        if self.rx.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

impl Drop for WaitHandle {
    fn drop(&mut self) {
        self.waiters.unregister(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn wake_between_mark_and_wait_is_not_lost() {
        let waiters = Waiters::default();
        let mut handle = waiters.register("k");
        handle.mark_seen();
        waiters.wake("k");
        tokio::time::timeout(Duration::from_secs(1), handle.changed())
            .await
            .expect("wake-up was lost");
    }

    #[cfg(feature = "redis")]
    #[tokio::test]
    async fn a_handoff_wakes_and_stays_with_the_waiter() {
        async fn woken(handle: &mut WaitHandle) -> bool {
            tokio::time::timeout(Duration::from_secs(1), handle.changed())
                .await
                .is_ok()
        }
        let waiters = Waiters::default();
        let mut handle = waiters.register("k");
        handle.mark_seen();
        waiters.wake("k");
        assert!(woken(&mut handle).await, "a plain wake-up was lost");
        assert_eq!(handle.handed(), None);
        handle.mark_seen();
        let handed = |number, fence| Handed { number, fence };
        waiters.hand_over("k", handed(3, 7));
        assert!(
            woken(&mut handle).await,
            "the handoff did not wake the waiter"
        );
        assert_eq!(handle.handed(), Some(handed(3, 7)));
        waiters.wake_all();
        assert_eq!(
            handle.handed(),
            Some(handed(3, 7)),
            "a later wake-up took the handoff back"
        );
        waiters.hand_over("k", handed(5, 9));
        waiters.hand_over("k", handed(4, 8));
        assert_eq!(
            handle.handed(),
            Some(handed(5, 9)),
            "an older handoff replaced a newer one"
        );
    }

    #[tokio::test]
    async fn entries_go_away_with_their_last_handle() {
        let waiters = Waiters::default();
        let a = waiters.register("k");
        let b = waiters.register("k");
        assert_eq!(waiters.len(), 1);
        drop(a);
        assert!(waiters.is_registered("k"));
        drop(b);
        assert_eq!(waiters.len(), 0);
    }

    /// After a burst of waiters on distinct names, the registry gives back
    /// the room their entries took.
    #[test]
    fn the_registry_shrinks_as_waiters_leave() {
        let waiters = Waiters::default();
        let handles: Vec<_> = (0..2000)
            .map(|i| waiters.register(&format!("k{i}")))
            .collect();
        let room = || waiters.map.lock().unwrap().capacity();
        let peak = room();
        drop(handles);
        assert_eq!(waiters.len(), 0);
        assert!(
            peak >= 2000 && room() <= 16,
            "room for {} entries, {peak} with every waiter",
            room()
        );
    }
}
