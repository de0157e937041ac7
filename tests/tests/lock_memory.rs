//! The lock conformance suite on the in-memory backend.

use lock_core::backend::MemoryBackend;

lock_tests::lock_suite!(async { ((), MemoryBackend::new()) });
