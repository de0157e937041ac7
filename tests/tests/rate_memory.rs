//! The rate-limit conformance suite on the in-memory backend.

use lock_core::backend::MemoryBackend;

lock_tests::rate_suite!(async { ((), MemoryBackend::new()) });
