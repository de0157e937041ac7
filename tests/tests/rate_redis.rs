//! The rate-limit conformance suite on a real redis-server.

use lock_core::backend::RedisBackend;
use lock_tests::RedisServer;

async fn setup() -> (RedisServer, RedisBackend) {
    let server = RedisServer::start();
    let backend = RedisBackend::connect(&server.url())
        .await
        .unwrap_or_else(|e| panic!("cannot connect to {}: {e}", server.url()));
    (server, backend)
}

lock_tests::rate_suite!(setup());
