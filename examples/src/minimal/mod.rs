//! The smallest services of each adapter, the ones their READMEs show: a
//! per-IP rate limit on every route, one payment at a time per order (a
//! lock keyed by a path parameter), and a stock that never oversells. The
//! READMEs write each in one `main`; here they are split into functions,
//! so that the end-to-end tests serve the same service. Run
//! them with `cargo run -p lock-examples --bin axum-app` (or `actix-app`,
//! `tower-app`); `REDIS_URL` puts their state on Redis.

pub mod actix_app;
pub mod axum_app;
pub mod tower_app;

use lock_core::backend::{AnyBackend, MemoryBackend, RedisBackend};

/// Redis at `REDIS_URL`, or memory without it.
///
/// # Errors
/// When Redis cannot be reached.
pub async fn backend_from_env() -> lock_core::Result<AnyBackend> {
    Ok(match std::env::var("REDIS_URL") {
        Ok(url) => RedisBackend::connect(&url).await?.into(),
        Err(_) => MemoryBackend::new().into(),
    })
}
