#![doc = include_str!("../README.md")]

pub mod adapter;
pub mod body;
mod failure;
pub mod headers;
pub mod key;
pub mod lock;
mod metrics;
pub mod rate_limit;
mod response;

pub use failure::{BREAKER_OPEN, MissingKey, OnBackendFailure};
pub use lock::{
    ConcurrencyLimitLayer, DEFAULT_LOCK_TIMEOUT, DEFAULT_LOCK_WAIT, HeldLock, LockLayer,
    LockRefusal,
};
pub use metrics::Metrics;
pub use rate_limit::{DEFAULT_DECISION_TIMEOUT, RateLimitLayer};
