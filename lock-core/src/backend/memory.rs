//! The in-memory backend: the embedded default. Everything works with no
//! Redis, for a single process.

use std::sync::Arc;

use super::clock::{Clock, ManualClock};
use crate::counter::memory::CounterTable;
use crate::lock::memory::LockTable;
pub use crate::rate::memory::DEFAULT_MAX_KEYS;
use crate::rate::memory::RateState;

pub(crate) struct MemoryInner {
    pub(crate) locks: LockTable,
    pub(crate) rates: RateState,
    pub(crate) counters: CounterTable,
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
    /// Keep at most `max_keys` live callers per limiter quota (default
    /// [`DEFAULT_MAX_KEYS`]), so memory stays flat under a stream of
    /// distinct keys. Past the cap, callers the backend does not know yet
    /// share one overflow caller with the same quota, while the callers it
    /// knows keep their own state: a client that rotates its keys cannot
    /// reset anyone else's limit, though it shares its room with other
    /// newcomers until idle callers are dropped. Idle callers (whose limit
    /// is whole again) are dropped as new ones come, and the memory they
    /// took is given back. The state is kept in shards, each with its
    /// share of the cap, so newcomers may begin to share a little before
    /// the whole cap is taken.
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
                locks: LockTable::default(),
                rates: RateState::new(clock, self.max_keys),
                counters: CounterTable::default(),
            }),
        }
    }
}

impl std::fmt::Debug for MemoryBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryBackend").finish_non_exhaustive()
    }
}
