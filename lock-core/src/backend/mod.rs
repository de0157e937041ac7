//! Backends: Redis (shared across instances) and in-memory (one process).
//!
//! A backend is a cheap-to-clone handle; each primitive is implemented for
//! each backend through its own trait (for locks, [`LockBackend`](crate::lock::LockBackend)).

pub(crate) mod clock;
mod memory;
pub(crate) mod notify;
mod pubsub;
mod redis;
pub(crate) mod script;

pub use self::clock::ManualClock;
pub(crate) use self::memory::shrink_swept;
pub use self::memory::{DEFAULT_MAX_KEYS, MemoryBackend, MemoryBuilder};
pub(crate) use self::pubsub::Subscription;
pub use self::redis::{MIN_REDIS_VERSION, RedisBackend, RedisConfig};
