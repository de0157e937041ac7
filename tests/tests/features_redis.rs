//! The features conformance suite on a real redis-server.

lock_tests::features_suite!(lock_tests::redis_backend());
