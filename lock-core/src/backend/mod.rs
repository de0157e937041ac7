//! Backends: Redis (shared across instances) and in-memory (one process).
//!
//! A backend is a cheap-to-clone handle; each primitive is implemented for
//! each backend through its own trait (for locks, [`LockBackend`](crate::lock::LockBackend)).

pub(crate) mod clock;
#[cfg(feature = "redis")]
mod cluster;
#[cfg(feature = "redis")]
mod config;
mod memory;
pub(crate) mod notify;
#[cfg(feature = "redis")]
mod pubsub;
#[cfg(feature = "redis")]
mod redis;
#[cfg(feature = "redis")]
mod replicas;
#[cfg(feature = "redis")]
pub(crate) mod script;
#[cfg(feature = "redis")]
mod sentinel;
#[cfg(feature = "redis")]
mod version;

pub use self::clock::ManualClock;
#[cfg(feature = "redis")]
pub use self::cluster::ClusterBackend;
#[cfg(feature = "redis")]
pub use self::config::RedisConfig;
pub use self::memory::{DEFAULT_MAX_KEYS, MemoryBackend, MemoryBuilder};
pub(crate) use self::memory::{MemoryConfig, MemoryState};
#[cfg(feature = "redis")]
pub(crate) use self::pubsub::Subscription;
#[cfg(feature = "redis")]
pub use self::redis::RedisBackend;
#[cfg(feature = "redis")]
pub use self::sentinel::{SentinelBackend, SentinelConnection};
#[cfg(feature = "redis")]
pub use self::version::MIN_REDIS_VERSION;
pub use crate::any::AnyBackend;
