#![doc = include_str!("../README.md")]

pub mod backend;
pub mod counter;
pub mod error;
pub mod lock;
pub mod name;
pub mod rate;
mod time;

pub use error::{BackendError, Error, Result};
