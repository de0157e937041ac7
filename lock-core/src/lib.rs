//! Redis-backed and in-memory concurrency primitives for services that run as
//! several instances.
//!
//! * [`lock`]: distributed mutual exclusion (SET NX PX + token, compare-and-delete
//!   release, watchdog leases, pub/sub wake-ups, fencing tokens).
//! * [`rate`]: rate limiting (fixed window, sliding window, GCRA), several quotas
//!   in one atomic call, a cost per call.
//! * [`counter`]: stock counters that never oversell, idempotent decrements,
//!   reservations whose holds expire and give stock back.
//! * [`backend`]: the Redis backend (one shared multiplexed connection, scripts by
//!   `EVALSHA`) and the in-memory backend, the embedded default.
//! * [`name`]: validated names and hash-tagged keys (`<prefix>{<name>}:<suffix>`).
//! * [`error`]: the one error type. Busy and limited are values, never errors.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> lock_core::Result<()> {
//! use std::time::Duration;
//! use lock_core::{backend::MemoryBackend, lock::Lock};
//!
//! let lock = Lock::new(MemoryBackend::new(), "report:daily")?;
//! if let Some(guard) = lock.try_lock().await? {
//!     // ... only one instance runs this at a time ...
//!     guard.release().await?;
//! }
//! # Ok(()) }
//! ```

pub mod backend;
pub mod counter;
pub mod error;
pub mod lock;
pub mod name;
pub mod rate;

pub use error::{BackendError, Error, Result};
