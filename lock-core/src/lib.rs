#![doc = include_str!("../README.md")]
// Where links from other crates' docs to this one go when this crate's
// docs are not (yet) in the same directory: `cargo doc --workspace
// --no-deps` documents the crates in parallel, and rustdoc writes a link to
// a crate it has not seen documented as its bare path, which goes nowhere.
// Keep the version in step with Cargo.toml's (major.minor).
#![doc(html_root_url = "https://docs.rs/lock-core/0.1/")]

mod any;
pub mod backend;
pub mod counter;
pub mod error;
pub mod lock;
mod map;
pub mod name;
pub mod rate;
mod time;

pub use error::{BackendError, Error, Result};
