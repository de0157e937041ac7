//! Benchmarks against the peers, measured side by side in one run. Every
//! figure comes with a reference measured in the same run, as a ratio.
//!
//! ```text
//! cargo run --release -p lock-bench --features peers --bin peers [-- --quick]
//! ```
//!
//! `-- --only 3,4` runs only the sections named; `4a`, `4i`, `4l`, `4c`,
//! `4t` and `4m` name one table of section 4, and `4h` the HTTP table's
//! servers without Redis, in 25 rounds instead of 5.
//!
//! For a profiler, one work alone: `-- --cpu-loop <work> <seconds>` (a
//! row of section 7), `-- --layer-loop <router> <requests>` (a router of
//! section 4), `-- --redlock-loop ours|raw <rounds>` (section 3's Redlock
//! acquire and release, or its `SET NX PX` and a `DEL` from redis-rs
//! alone).
//!
//! 1. decision throughput vs `redis-benchmark` on the same call;
//! 2. lock latency: uncontended acquire+release vs two round trips
//!    (`redis-benchmark -c 1`), and handoff (release -> next holder) for our
//!    pub/sub wake-up, and our fair lock's direct handoff, vs `rslock`
//!    (retry polling);
//! 3. Redlock over 5 servers: ours vs `rslock`, and vs our single server;
//! 4. HTTP: axum with our layer (memory) vs `tower_governor`, our layer on
//!    Redis vs no layer, actix-web with our middleware vs `actix-limitation`;
//!    in process, the same layers' time, allocations and (under `valgrind`,
//!    when it is installed) instructions and cold cache lines per request,
//!    and in memory the decisions of one thread and of two at once, and
//!    as threads are added, for callers whose state expires between visits
//!    and for callers whose state lives;
//! 5. resident memory of the memory backend after one million distinct keys;
//! 6. Redis Cluster next to one server: rate decisions at 256 callers, and
//!    lock handoff with wake-ups from every master;
//! 7. client CPU per call on Redis: our decision and lock cycle vs
//!    redis-rs alone calling a script on the same connection, on one server
//!    and on a cluster.
//!
//! One module per section: [`locks`] (2), [`redlock`] (3), [`layers`],
//! [`actix_cost`], [`threads`] and [`http`] (4, with the load generator in
//! [`load`]), [`memory`] (5), [`cluster`] (6), [`client_cpu`] (7). Section 1
//! is `lock_bench::throughput`.

mod actix_cost;
mod client_cpu;
mod cluster;
mod http;
mod layers;
mod load;
mod locks;
mod memory;
mod redlock;
mod threads;

use std::process::Command;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use lock_bench::Error;
use lock_bench::throughput::throughput_table;

/// Counts heap allocations while [`Allocations`] is counting, so the layer
/// tables can show allocations per request next to time per request. At
/// other times it only reads a flag: one counter bumped by every thread
/// would be one more cache line that the servers under load pass between
/// cores.
struct Counting;

static ALLOCATIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static COUNTING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn count_allocation() {
    if COUNTING.load(Relaxed) {
        ALLOCATIONS.fetch_add(1, Relaxed);
    }
}

/// Heap allocations counted from [`Allocations::start`] until
/// [`Allocations::stop`] (one measurement at a time).
struct Allocations(u64);

impl Allocations {
    fn start() -> Self {
        COUNTING.store(true, Relaxed);
        Allocations(ALLOCATIONS.load(Relaxed))
    }

    /// The allocations since [`start`](Self::start).
    fn stop(self) -> u64 {
        COUNTING.store(false, Relaxed);
        ALLOCATIONS.load(Relaxed) - self.0
    }
}

// SAFETY: every call is forwarded unchanged to the system allocator.
#[allow(unsafe_code)] // benchmark instrumentation only
unsafe impl std::alloc::GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        count_allocation();
        // SAFETY: the caller upholds `alloc`'s contract.
        unsafe { std::alloc::System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        // SAFETY: the caller upholds `dealloc`'s contract.
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new: usize) -> *mut u8 {
        count_allocation();
        // SAFETY: the caller upholds `realloc`'s contract.
        unsafe { std::alloc::System.realloc(ptr, layout, new) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

struct Scale {
    iterations: usize,
    handoffs: usize,
    http_for: Duration,
    /// Distinct keys per stream of section 5.
    keys: usize,
    /// Streams of `keys` in section 5.
    streams: usize,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Error> {
    let quick = std::env::args().any(|a| a == "--quick");
    let scale = if quick {
        Scale {
            iterations: 2_000,
            handoffs: 100,
            http_for: Duration::from_secs(3),
            keys: 1_000_000,
            streams: 3,
        }
    } else {
        Scale {
            iterations: 10_000,
            handoffs: 300,
            http_for: Duration::from_secs(7),
            keys: 1_000_000,
            streams: 5,
        }
    };
    if std::env::args().any(|a| a == "--memory-probe") {
        return memory::memory(&scale).await;
    }
    let mut layer_loop_args = std::env::args().skip_while(|a| a != "--layer-loop").skip(1);
    if let Some(router) = layer_loop_args.next() {
        let n = layer_loop_args
            .next()
            .ok_or("--layer-loop <router> <requests> [cold]")?
            .parse()?;
        let cold = layer_loop_args.next().as_deref() == Some("cold");
        return layers::layer_loop(&router, n, cold).await;
    }
    if std::env::args().any(|a| a == "--redlock-loop") {
        let args = std::env::args()
            .skip_while(|a| a != "--redlock-loop")
            .skip(1);
        return redlock::redlock_loop(args).await;
    }
    if std::env::args().any(|a| a == "--cpu-loop") {
        let args = std::env::args().skip_while(|a| a != "--cpu-loop").skip(1);
        return client_cpu::cpu_loop(args).await;
    }
    // `--only 3,4` runs just those sections.
    let only: Option<Vec<String>> = std::env::args()
        .skip_while(|a| a != "--only")
        .nth(1)
        .map(|list| list.split(',').map(str::to_owned).collect());
    let run = |section: &str| only.as_ref().is_none_or(|o| o.iter().any(|s| s == section));
    if run("1") {
        println!("## 1. Decision throughput\n");
        throughput_table(quick).await?;
    }
    if run("2") {
        println!("\n## 2. Lock latency\n");
        locks::lock_latency(&scale).await?;
    }
    if run("3") {
        println!("\n## 3. Redlock over 5 servers\n");
        redlock::redlock(&scale).await?;
    }
    if run("4") || run("4a") {
        println!("\n## 4. HTTP\n");
        layers::layer_cost(&scale).await?;
    }
    if run("4") || run("4i") {
        layers::layer_instructions(quick)?;
    }
    if run("4") || run("4l") {
        layers::layer_cold_lines(quick)?;
    }
    if run("4") || run("4c") {
        actix_cost::actix_layer_cost(&scale)?;
    }
    if run("4") || run("4t") {
        threads::two_threads(&scale)?;
    }
    if run("4") || run("4m") {
        threads::scaling(&scale)?;
    }
    if run("4") {
        http::http(&scale, false).await?;
    } else if run("4h") {
        http::http(&scale, true).await?;
    }
    if run("5") {
        println!("\n## 5. Memory\n");
        // In a fresh process, so the heap left by the sections before does
        // not blur the figures.
        let status = Command::new(std::env::current_exe()?)
            .arg("--memory-probe")
            .status()?;
        if !status.success() {
            return Err(format!("memory probe failed: {status}").into());
        }
    }
    if run("6") {
        println!("\n## 6. Redis Cluster\n");
        cluster::cluster(&scale, quick).await?;
    }
    if run("7") {
        println!("\n## 7. Client CPU per call\n");
        client_cpu::client_cpu(quick).await?;
    }
    Ok(())
}

fn micros(d: Duration) -> String {
    format!("{:.0} us", d.as_secs_f64() * 1e6)
}

fn percentile(samples: &mut [Duration], q: f64) -> Duration {
    samples.sort_unstable();
    samples
        .get(((samples.len().max(1) - 1) as f64 * q).round() as usize)
        .copied()
        .unwrap_or_default()
}

/// The median of `ratios` and their lower and upper quartiles.
fn median_and_quartiles(mut ratios: Vec<f64>) -> (f64, f64, f64) {
    ratios.sort_by(f64::total_cmp);
    let at = |q: f64| {
        ratios
            .get(((ratios.len().max(1) - 1) as f64 * q).round() as usize)
            .copied()
            .unwrap_or(f64::NAN)
    };
    (at(0.5), at(0.25), at(0.75))
}

fn mean(samples: &[Duration]) -> Duration {
    samples.iter().sum::<Duration>() / u32::try_from(samples.len().max(1)).unwrap_or(u32::MAX)
}

/// A table row: ours against a reference, and the ratio.
fn ratio_row(measure: &str, ours: Duration, reference: &str, value: Duration) {
    println!(
        "| {measure} | {} | {reference}: {} | {:.2}x |",
        micros(ours),
        micros(value),
        ours.as_secs_f64() / value.as_secs_f64()
    );
}
