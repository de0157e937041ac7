//! The in-memory backend: the embedded default. Everything works with no
//! Redis, for a single process.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};
use std::sync::Arc;

use crate::counter::memory::CounterTable;
use crate::lock::memory::LockTable;
pub use crate::rate::memory::DEFAULT_MAX_KEYS;
use crate::rate::memory::RateTable;

/// Gives back most of a map's room once a sweep (or a removal) has left it
/// mostly empty (a hash map never shrinks by itself): after a burst of
/// distinct names, the memory their entries took. Room for four times the
/// live entries is kept, so that a map does not shrink and grow back in
/// turn; a map that needs no shrinking costs a few instructions.
pub(crate) fn shrink_swept<K: Eq + Hash, V, S: BuildHasher>(map: &mut HashMap<K, V, S>) {
    map.shrink_to(map.len().saturating_mul(4));
}

#[derive(Default)]
pub(crate) struct MemoryInner {
    pub(crate) locks: LockTable,
    pub(crate) rates: RateTable,
    pub(crate) counters: CounterTable,
}

/// In-memory backend. Cloning shares the state.
///
/// ```
/// use lock_core::backend::MemoryBackend;
/// let backend = MemoryBackend::new();
/// let same = backend.clone();
/// ```
#[derive(Clone, Default)]
pub struct MemoryBackend {
    pub(crate) inner: Arc<MemoryInner>,
}

impl MemoryBackend {
    /// A new, empty backend.
    pub fn new() -> Self {
        Self::default()
    }

    /// A backend whose rate limits are kept in `rates` (for tests that set
    /// the table's clock).
    #[cfg(test)]
    pub(crate) fn with_rate_table(rates: RateTable) -> Self {
        MemoryBackend {
            inner: Arc::new(MemoryInner {
                rates,
                ..MemoryInner::default()
            }),
        }
    }

    /// A backend that keeps at most `max_keys` live rate-limit keys (default
    /// [`DEFAULT_MAX_KEYS`]). Past the cap, expired keys are dropped first, then
    /// arbitrary live ones (their limits start afresh), so memory stays flat.
    /// Once idle keys have expired and been swept, the tables shrink again:
    /// a burst of distinct keys does not keep its memory.
    ///
    /// Rate-limit state is split into shards with a lock each (more on
    /// machines with more threads; one below 2,048 keys), so that callers
    /// with different keys rarely wait for each other. The cap is divided
    /// evenly among them: a shard that fills evicts on its own, so eviction
    /// may start a little before the table as a whole is full.
    pub fn with_max_keys(max_keys: usize) -> Self {
        MemoryBackend {
            inner: Arc::new(MemoryInner {
                rates: RateTable::new(max_keys),
                ..MemoryInner::default()
            }),
        }
    }
}

impl std::fmt::Debug for MemoryBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryBackend").finish_non_exhaustive()
    }
}
