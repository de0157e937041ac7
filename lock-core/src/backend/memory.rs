//! The in-memory backend: the embedded default. Everything works with no
//! Redis, for a single process.
//!
//! The backend is a store that knows none of the primitives (as
//! `governor`'s state store knows nothing of its algorithm): each
//! primitive keeps its in-memory state type in its own module, implements
//! [`MemoryState`] for it, and asks [`MemoryBackend::state`] for it. The
//! store makes one of each type on first use, from the backend's
//! [`MemoryConfig`], and hands out the same one after that, without a lock.

use std::any::{Any, TypeId};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use super::clock::{Clock, ManualClock};

/// Default cap on live callers per limiter quota in a memory backend.
pub const DEFAULT_MAX_KEYS: usize = 100_000;

/// What the primitives' in-memory states read of the backend's settings.
#[derive(Debug)]
pub(crate) struct MemoryConfig {
    /// The clock rate limits read.
    pub(crate) clock: Clock,
    /// The cap on live callers per limiter quota, at least 1.
    pub(crate) max_keys: usize,
}

/// A primitive's in-memory state: one per backend, made on first use.
pub(crate) trait MemoryState: Send + Sync + 'static {
    /// A new, empty state under the backend's settings.
    fn new(config: &MemoryConfig) -> Self;
}

/// How many state types one backend can hold: room to spare over the
/// primitives of this crate (three today) and the tests' own.
const SLOTS: usize = 8;

/// One primitive's state, and its type.
struct Entry {
    id: TypeId,
    state: Arc<dyn Any + Send + Sync>,
}

pub(crate) struct MemoryInner {
    config: MemoryConfig,
    /// Filled in order, each once; read without a lock.
    slots: [OnceLock<Entry>; SLOTS],
    /// Taken only to fill a slot, so two types never race for one.
    filling: Mutex<()>,
}

impl MemoryInner {
    /// The entry of `T`, made on first use.
    #[inline]
    fn entry<T: MemoryState>(&self) -> &Entry {
        let id = TypeId::of::<T>();
        for slot in &self.slots {
            match slot.get() {
                Some(entry) if entry.id == id => return entry,
                Some(_) => {}
                None => break,
            }
        }
        self.fill::<T>()
    }

    #[cold]
    fn fill<T: MemoryState>(&self) -> &Entry {
        let id = TypeId::of::<T>();
        let _filling = self.filling.lock().unwrap_or_else(PoisonError::into_inner);
        for slot in &self.slots {
            if let Some(entry) = slot.get() {
                if entry.id == id {
                    return entry;
                }
                continue;
            }
            return slot.get_or_init(|| Entry {
                id,
                state: Arc::new(T::new(&self.config)),
            });
        }
        panic!("more than {SLOTS} in-memory state types: raise SLOTS")
    }
}

/// In-memory backend. Cloning shares the state.
///
/// Rate limits read Unix time (so windows begin where they do on Redis),
/// or a [`ManualClock`] in tests. Each limiter quota keeps at most
/// [`DEFAULT_MAX_KEYS`] live callers (see [`MemoryBuilder::max_keys`]).
///
/// ```
/// use lock_core::backend::MemoryBackend;
/// let backend = MemoryBackend::new();
/// let same = backend.clone();
/// ```
#[derive(Clone)]
pub struct MemoryBackend {
    pub(crate) inner: Arc<MemoryInner>,
}

impl Default for MemoryBackend {
    fn default() -> Self {
        Self::builder().build()
    }
}

impl MemoryBackend {
    /// The state of type `T` (a primitive's), made on first use.
    #[inline]
    pub(crate) fn state<T: MemoryState>(&self) -> &T {
        let state = &*self.inner.entry::<T>().state;
        state
            .downcast_ref()
            .expect("a slot holds the type it names")
    }

    /// [`state`](Self::state), shared, for a handle to keep.
    pub(crate) fn shared_state<T: MemoryState>(&self) -> Arc<T> {
        let state = Arc::clone(&self.inner.entry::<T>().state);
        state.downcast().expect("a slot holds the type it names")
    }

    /// A new, empty backend.
    pub fn new() -> Self {
        Self::default()
    }

    /// A backend with a different cap on live callers or a different
    /// clock.
    pub fn builder() -> MemoryBuilder {
        MemoryBuilder {
            max_keys: DEFAULT_MAX_KEYS,
            clock: None,
        }
    }

    /// A backend that keeps at most `max_keys` live callers per limiter
    /// quota (see [`MemoryBuilder::max_keys`]).
    pub fn with_max_keys(max_keys: usize) -> Self {
        Self::builder().max_keys(max_keys).build()
    }
}

/// Settings of a [`MemoryBackend`], from [`MemoryBackend::builder`].
#[derive(Debug, Clone)]
#[must_use = "call build() to make the backend"]
pub struct MemoryBuilder {
    max_keys: usize,
    clock: Option<ManualClock>,
}

impl MemoryBuilder {
    /// Keep at most `max_keys` live callers (default [`DEFAULT_MAX_KEYS`])
    /// for each GCRA quota of a scope, and as many new callers' window
    /// entries (one per caller and quota) for all fixed- and sliding-window
    /// limiters together, so memory stays flat under a stream of distinct
    /// keys. (A caller the table holds also gets entries for the other
    /// quotas its policies name, so the table may hold up to `max_keys`
    /// times the number of window quotas of one scope.)
    /// Past the cap, callers the backend does not know yet share one
    /// overflow caller with the same quota, while the callers it knows
    /// keep their own state: a client that rotates its keys cannot reset
    /// anyone else's limit, though it shares its room with other
    /// newcomers until idle callers are dropped. Idle callers (whose limit
    /// is whole again) are dropped as new ones come, and the memory they
    /// took is given back. A newcomer given a place while the overflow
    /// caller's limit is not whole starts from it: what a caller took
    /// while it shared the overflow does not come back with a place of
    /// its own. The state is kept in shards, each with its share of the
    /// cap, so newcomers may begin to share a little before the whole cap
    /// is taken.
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys.max(1);
        self
    }

    /// Read rate-limit time from `clock` instead of the system's.
    pub fn clock(mut self, clock: ManualClock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// The backend.
    pub fn build(self) -> MemoryBackend {
        let clock = self.clock.map_or_else(Clock::default, Clock::Manual);
        MemoryBackend {
            inner: Arc::new(MemoryInner {
                config: MemoryConfig {
                    clock,
                    max_keys: self.max_keys.max(1),
                },
                slots: Default::default(),
                filling: Mutex::new(()),
            }),
        }
    }
}

impl std::fmt::Debug for MemoryBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryBackend").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Counting(std::sync::atomic::AtomicU32);

    impl MemoryState for Counting {
        fn new(_: &MemoryConfig) -> Self {
            Counting::default()
        }
    }

    struct MaxKeys(usize);

    impl MemoryState for MaxKeys {
        fn new(config: &MemoryConfig) -> Self {
            MaxKeys(config.max_keys)
        }
    }

    /// Each type gets one state, shared by the backend's clones, made from
    /// the backend's settings.
    #[test]
    fn one_state_per_type_shared_by_clones() {
        use std::sync::atomic::Ordering;
        let backend = MemoryBackend::with_max_keys(7);
        let clone = backend.clone();
        backend
            .state::<Counting>()
            .0
            .fetch_add(1, Ordering::Relaxed);
        assert_eq!(clone.state::<Counting>().0.load(Ordering::Relaxed), 1);
        assert_eq!(clone.state::<MaxKeys>().0, 7);
        let shared = backend.shared_state::<Counting>();
        assert!(std::ptr::eq(&*shared, backend.state::<Counting>()));
        assert_eq!(
            MemoryBackend::new()
                .state::<Counting>()
                .0
                .load(Ordering::Relaxed),
            0
        );
    }
}
