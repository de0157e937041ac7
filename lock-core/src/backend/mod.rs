//! Backends: Redis (shared across instances) and in-memory (one process).
//!
//! A backend is a cheap-to-clone handle; each primitive is implemented for
//! each backend through its own trait (for locks, [`LockBackend`](crate::lock::LockBackend)).

mod any;
pub(crate) mod clock;
mod cluster;
mod config;
mod memory;
pub(crate) mod notify;
mod pubsub;
mod redis;
mod replicas;
pub(crate) mod script;
mod sentinel;
mod version;

pub use self::any::{AnyBackend, AnyWaiter};
pub use self::clock::ManualClock;
pub use self::cluster::ClusterBackend;
pub use self::config::RedisConfig;
pub(crate) use self::memory::shrink_swept;
pub use self::memory::{DEFAULT_MAX_KEYS, MemoryBackend, MemoryBuilder};
pub(crate) use self::pubsub::Subscription;
pub use self::redis::RedisBackend;
pub use self::sentinel::{SentinelBackend, SentinelConnection};
pub use self::version::MIN_REDIS_VERSION;
