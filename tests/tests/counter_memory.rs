//! The stock-counter conformance suite on the in-memory backend.

use lock_core::backend::MemoryBackend;

lock_tests::counter_suite!(async { ((), MemoryBackend::new()) });
