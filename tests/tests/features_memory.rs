//! The features conformance suite on the in-memory backend.

use lock_core::backend::MemoryBackend;

lock_tests::features_suite!(async { ((), MemoryBackend::new()) });
