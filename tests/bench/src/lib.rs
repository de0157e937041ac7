//! Benchmarks of the workspace, kept apart from the test harness.
//!
//! Two programs, each starting its own `redis-server` through the harness:
//!
//! ```text
//! cargo run --release -p lock-bench --bin throughput [-- --quick]
//! cargo run --release -p lock-bench --features peers --bin peers [-- --quick]
//! ```
//!
//! `throughput` prints decisions per second next to `redis-benchmark` running
//! the very same script call; `peers` prints that table and then every
//! comparison with the peer crates (see `BENCHMARKS.md`).

pub mod throughput;

/// Error type of the benchmark programs.
pub type Error = Box<dyn std::error::Error + Send + Sync>;
