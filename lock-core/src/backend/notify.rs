//! Local wake-up registry: waiters register interest in a name and are woken
//! when a release of that name is observed (in memory directly, on Redis through
//! the shared pub/sub subscriber).
//!
//! Each name has a generation counter in a `watch` channel. A waiter marks the
//! current generation as seen *before* it tries to acquire, then waits for the
//! generation to change; so a wake-up that lands between the attempt and the
//! wait is never lost. A message may also carry a [`Note`] for the waiters
//! of its key, read from its payload by the [`Reader`] the primitive that
//! owns the key registered with it (for a fair lock: the lock was handed
//! over to the waiter); notes are numbered, so that a waiter can tell a
//! note sent after its last attempt from an older one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::watch;

use crate::map::shrink_swept;

/// What a message told the waiters of its key beyond waking them, as its
/// key's [`Reader`] read it. Its sender numbers the notes of a key in
/// the order it sends them: a waiter keeps the note with the highest
/// number, so an older note never replaces a newer one, and a message
/// without a note never takes one back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Note {
    /// The note's number.
    pub(crate) number: u64,
    /// What it says, in the terms of the primitive that sent it.
    pub(crate) value: u64,
}

/// Reads a message's payload: its [`Note`], or `None` for a plain wake-up.
pub(crate) type Reader = fn(&[u8]) -> Option<Note>;

/// What a waiter's channel last said.
#[derive(Clone, Copy, Default)]
struct Signal {
    /// Bumped on every wake-up.
    generation: u64,
    /// The newest note, if any.
    note: Option<Note>,
}

impl Signal {
    fn bump(&mut self, note: Option<Note>) {
        self.generation = self.generation.wrapping_add(1);
        // Messages of one channel come in order; the number decides anyway.
        if let Some(new) = note
            && self.note.is_none_or(|old| new.number > old.number)
        {
            self.note = Some(new);
        }
    }
}

struct Entry {
    refs: usize,
    tx: watch::Sender<Signal>,
    /// How messages for the key are read (set by its first registration).
    #[cfg_attr(not(feature = "redis"), allow(dead_code))] // only Redis sends messages
    reader: Option<Reader>,
}

/// Registry of local waiters, keyed by an arbitrary string (a name or a channel).
#[derive(Clone, Default)]
pub(crate) struct Waiters {
    map: Arc<Mutex<HashMap<String, Entry>>>,
}

impl Waiters {
    /// Registers interest in `key`, whose messages `reader` reads (none:
    /// every message is a plain wake-up); the registration ends when the
    /// handle drops.
    pub(crate) fn register(&self, key: &str, reader: Option<Reader>) -> WaitHandle {
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = map.entry(key.to_owned()).or_insert_with(|| Entry {
            refs: 0,
            tx: watch::channel(Signal::default()).0,
            reader,
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
    /// Wakes the waiters registered for `key` with a message whose
    /// `payload` the key's reader reads.
    pub(crate) fn deliver(&self, key: &str, payload: &[u8]) {
        let map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(entry) = map.get(key) {
            let note = entry.reader.and_then(|read| read(payload));
            entry.tx.send_modify(|signal| signal.bump(note));
        }
    }

    /// Wakes the waiters registered for `key` with `note` (for the tests
    /// of handoffs, which need Redis's reader).
    #[cfg(all(test, feature = "redis"))]
    fn tell(&self, key: &str, note: Note) {
        self.signal(key, Some(note));
    }

    fn signal(&self, key: &str, note: Option<Note>) {
        let map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(entry) = map.get(key) {
            entry.tx.send_modify(|signal| signal.bump(note));
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
    /// The newest note for this waiter's key, if any.
    pub(crate) fn note(&self) -> Option<Note> {
        self.rx.borrow().note
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
        let mut handle = waiters.register("k", None);
        handle.mark_seen();
        waiters.wake("k");
        tokio::time::timeout(Duration::from_secs(1), handle.changed())
            .await
            .expect("wake-up was lost");
    }

    #[cfg(feature = "redis")]
    #[tokio::test]
    async fn a_note_wakes_and_stays_with_the_waiter() {
        async fn woken(handle: &mut WaitHandle) -> bool {
            tokio::time::timeout(Duration::from_secs(1), handle.changed())
                .await
                .is_ok()
        }
        let waiters = Waiters::default();
        let mut handle = waiters.register("k", None);
        handle.mark_seen();
        waiters.wake("k");
        assert!(woken(&mut handle).await, "a plain wake-up was lost");
        assert_eq!(handle.note(), None);
        handle.mark_seen();
        let note = |number, value| Note { number, value };
        waiters.tell("k", note(3, 7));
        assert!(woken(&mut handle).await, "the note did not wake the waiter");
        assert_eq!(handle.note(), Some(note(3, 7)));
        waiters.wake_all();
        assert_eq!(
            handle.note(),
            Some(note(3, 7)),
            "a later wake-up took the note back"
        );
        waiters.tell("k", note(5, 9));
        waiters.tell("k", note(4, 8));
        assert_eq!(
            handle.note(),
            Some(note(5, 9)),
            "an older note replaced a newer one"
        );
    }

    #[cfg(feature = "redis")]
    #[tokio::test]
    async fn a_message_is_read_by_its_keys_reader() {
        fn read(payload: &[u8]) -> Option<Note> {
            let (&number, rest) = payload.split_first()?;
            let value = u64::from(*rest.first()?);
            Some(Note {
                number: u64::from(number),
                value,
            })
        }
        let waiters = Waiters::default();
        let noted = waiters.register("noted", Some(read));
        let plain = waiters.register("plain", None);
        waiters.deliver("noted", &[2, 5]);
        waiters.deliver("plain", &[2, 5]);
        assert_eq!(
            noted.note(),
            Some(Note {
                number: 2,
                value: 5
            })
        );
        assert_eq!(plain.note(), None, "a key without a reader got a note");
        waiters.deliver("noted", b"");
        waiters.deliver("noted", &[1, 9]);
        assert_eq!(
            noted.note(),
            Some(Note {
                number: 2,
                value: 5
            }),
            "a wake-up or an older note replaced the note"
        );
    }

    #[tokio::test]
    async fn entries_go_away_with_their_last_handle() {
        let waiters = Waiters::default();
        let a = waiters.register("k", None);
        let b = waiters.register("k", None);
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
            .map(|i| waiters.register(&format!("k{i}"), None))
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
