#![doc = include_str!("../README.md")]
// Where links from other crates' docs to this one go when this crate's
// docs are not (yet) in the same directory: `cargo doc --workspace
// --no-deps` documents the crates in parallel, and rustdoc writes a link to
// a crate it has not seen documented as its bare path, which goes nowhere.
// Keep the version in step with Cargo.toml's (major.minor).
#![doc(html_root_url = "https://docs.rs/lock-tower/0.1/")]

pub mod adapter;
pub mod body;
mod failure;
pub mod headers;
pub mod key;
pub mod lock;
mod metrics;
pub mod rate_limit;
mod request;
mod response;

pub use failure::{BREAKER_OPEN, MissingKey, OnBackendFailure};
pub use lock::{
    ConcurrencyLimitLayer, DEFAULT_LOCK_TIMEOUT, DEFAULT_LOCK_WAIT, HeldLock, LockLayer,
};
pub use metrics::Metrics;
pub use rate_limit::{DEFAULT_DECISION_TIMEOUT, RateLimitLayer};
pub use response::Refusal;
