//! Local wake-up registry: waiters register interest in a name and are woken
//! when a release of that name is observed (in memory directly, on Redis through
//! the shared pub/sub subscriber).
//!
//! Each name has a generation counter in a `watch` channel. A waiter marks the
//! current generation as seen *before* it tries to acquire, then waits for the
//! generation to change; so a wake-up that lands between the attempt and the
//! wait is never lost.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::watch;

use super::shrink_swept;

struct Entry {
    refs: usize,
    tx: watch::Sender<u64>,
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
            tx: watch::channel(0).0,
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
        let map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(entry) = map.get(key) {
            entry
                .tx
                .send_modify(|generation| *generation = generation.wrapping_add(1));
        }
    }

    /// Wakes every waiter (after a lost connection, so that they retry).
    pub(crate) fn wake_all(&self) {
        let map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        for entry in map.values() {
            entry
                .tx
                .send_modify(|generation| *generation = generation.wrapping_add(1));
        }
    }

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
    rx: watch::Receiver<u64>,
    key: String,
    waiters: Waiters,
}

impl WaitHandle {
    /// Marks every wake-up so far as seen.
    pub(crate) fn mark_seen(&mut self) {
        self.rx.borrow_and_update();
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
