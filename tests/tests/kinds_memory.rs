//! Reentrant, fair, semaphore and fencing suite on the in-memory backend.

use lock_core::backend::MemoryBackend;

lock_tests::kinds_suite!(async { ((), MemoryBackend::new()) });
