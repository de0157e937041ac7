//! The in-memory backend: the embedded default. Everything works with no
//! Redis, for a single process.

use std::sync::Arc;

use crate::lock::memory::LockTable;

#[derive(Default)]
pub(crate) struct MemoryInner {
    pub(crate) locks: LockTable,
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
}

impl std::fmt::Debug for MemoryBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryBackend").finish_non_exhaustive()
    }
}
