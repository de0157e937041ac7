//! Decision throughput of each primitive on Redis, next to `redis-benchmark`
//! running the very same script call in the same run.
//!
//! ```text
//! cargo run --release -p lock-bench --bin throughput [-- --quick]
//! ```
//!
//! Starts its own redis-server through the harness. For each workload it
//! records one real call with MONITOR, measures our client at 1, 16 and 256
//! concurrent callers on one shared connection, then runs `redis-benchmark`
//! with the recorded EVALSHA (unpipelined `-c 50`, pipelined `-P 16`), and
//! prints decisions per second and the ratios.

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), lock_bench::Error> {
    let quick = std::env::args().any(|a| a == "--quick");
    lock_bench::throughput::throughput_table(quick).await
}
