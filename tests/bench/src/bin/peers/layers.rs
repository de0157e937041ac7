//! Section 4, in process: the axum layers' time, allocations and
//! instructions per request, without a socket.

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::process::Command;
use std::time::Instant;

use axum::Router;
use axum::routing::get;
use lock_bench::Error;
use lock_core::backend::MemoryBackend;
use lock_core::rate::{Algorithm, Policy, Quota, RateLimiter};
// lock-axum's layer: these routers are axum apps.
use lock_axum::RateLimitLayer;
use lock_tower::key::PeerIp;

use crate::{Allocations, Scale, median_and_quartiles};

pub(super) fn huge() -> NonZeroU32 {
    NonZeroU32::new(1_000_000_000).unwrap_or(NonZeroU32::MAX)
}

pub(super) fn gcra_policy() -> Policy {
    Policy::new(Algorithm::Gcra).quota(Quota::per_hour(huge()))
}

/// Our memory layer by peer address, as configured by default.
pub(super) fn memory_layer() -> Result<RateLimitLayer<MemoryBackend, PeerIp>, Error> {
    let limiter = RateLimiter::new(MemoryBackend::new(), "http", gcra_policy())?;
    Ok(RateLimitLayer::new(limiter, PeerIp::new()))
}

/// Our memory layer sending rate-limit fields on refusals only, as
/// `tower_governor` does by default.
pub(super) fn quiet_layer() -> Result<RateLimitLayer<MemoryBackend, PeerIp>, Error> {
    Ok(memory_layer()?.headers_on_success(false))
}

/// The client address of the in-process requests.
const PEER_V4: &str = "10.1.2.3:4567";
/// The same, for the routers whose name ends in [`V6`].
const PEER_V6: &str = "[2001:db8:85a3:42:1234:5678:9abc:def0]:4567";
/// The suffix of a router name that gives its requests an IPv6 peer.
const V6: &str = "-v6";

/// Nanoseconds per request through `app`, called in process (no socket),
/// one request at a time, as the peer address arrives from axum.
async fn per_request(
    app: Router,
    peer: &str,
    n: usize,
    mut between: impl FnMut(),
) -> Result<(f64, f64), Error> {
    use tower::{Service, ServiceExt};
    let peer: SocketAddr = peer.parse()?;
    // `with_state` turns every route into a service once, as `axum::serve`
    // does (`into_make_service`); without it axum rebuilds each route, and
    // applies its layers again, on every request.
    let mut app = app.with_state(()).into_service::<axum::body::Body>();
    let request = || {
        let mut request = http::Request::new(axum::body::Body::empty());
        request
            .extensions_mut()
            .insert(axum::extract::ConnectInfo(peer));
        request
    };
    // Warm up, then measure.
    for _ in 0..n / 10 {
        between();
        app.ready().await?.call(request()).await?;
    }
    let allocations = Allocations::start();
    let started = Instant::now();
    for _ in 0..n {
        between();
        let response = app.ready().await?.call(request()).await?;
        if !response.status().is_success() {
            return Err(format!("refused: {}", response.status()).into());
        }
    }
    let elapsed = started.elapsed();
    let allocations = allocations.stop();
    Ok((
        elapsed.as_nanos() as f64 / n as f64,
        allocations as f64 / n as f64,
    ))
}

/// What the rate-limit layers cost per request without HTTP around them.
pub(super) async fn layer_cost(scale: &Scale) -> Result<(), Error> {
    let n = scale.iterations * 5;
    let mut rows = Vec::new();
    // Interleaved rounds; each router's fastest round is reported (on a
    // shared machine, interference only ever adds time). Columns in the
    // order of `LAYER_ROUTERS`.
    const ROUNDS: usize = 9;
    for _ in 0..ROUNDS {
        let mut row = [(0.0, 0.0); LAYER_ROUTERS.len()];
        for (cell, name) in row.iter_mut().zip(LAYER_ROUTERS) {
            *cell = per_request(layer_router(name)?, PEER_V4, n, || {}).await?;
        }
        rows.push(row);
    }
    let fastest = |i: usize| {
        rows.iter()
            .map(|r: &[(f64, f64); LAYER_ROUTERS.len()]| r[i].0)
            .fold(f64::INFINITY, f64::min)
    };
    let allocations = |i: usize| rows[0][i].1;
    let bare = fastest(0);
    println!(
        "In process (no socket), one request at a time, {n} requests per round, fastest of {ROUNDS} interleaved rounds\n"
    );
    println!("| router | ns/request | layer cost (ns) | allocations/request |");
    println!("|---|---:|---:|---:|");
    println!("| axum, no layer | {bare:.0} | 0 | {:.1} |", allocations(0));
    for (i, label) in LAYER_LABELS.iter().enumerate().skip(1) {
        println!(
            "| {label} | {:.0} | {:.0} | {:.1} |",
            fastest(i),
            fastest(i) - bare,
            allocations(i)
        );
    }
    // Each round's own layer costs, paired as the fastest rounds are: a
    // slow spell that spans every round of one router (the bare one, say)
    // skews the fastest rounds' ratios, but not the median of these.
    println!(
        "\n| like for like | ratio of layer cost, fastest rounds | median of the ratios within a round (quartiles) |\n|---|---:|---:|"
    );
    for (label, ours, theirs) in LIKE_FOR_LIKE {
        let (median, low, high) = median_and_quartiles(
            rows.iter()
                .map(|r| (r[ours].0 - r[0].0) / (r[theirs].0 - r[0].0))
                .collect(),
        );
        println!(
            "| {label} | {:.2}x | {median:.2}x ({low:.2} to {high:.2}) |",
            (fastest(ours) - bare) / (fastest(theirs) - bare),
        );
    }
    println!();
    Ok(())
}

/// The like-for-like pairs of routers: ours, then the peer's, by position
/// in [`LAYER_ROUTERS`].
const LIKE_FOR_LIKE: [(&str, usize, usize); 2] = [
    (
        "fields on every response: ours / tower_governor with headers",
        1,
        4,
    ),
    (
        "no fields on allowed responses: ours / tower_governor",
        2,
        3,
    ),
];

/// The like-for-like ratios of a per-router measure of the layers, given by
/// position in [`LAYER_ROUTERS`]; the table's last line is left open.
fn like_for_like(measure: &str, layer: impl Fn(usize) -> f64) {
    println!("\n| like for like | ratio of {measure} |\n|---|---:|");
    for (label, ours, theirs) in LIKE_FOR_LIKE {
        println!("| {label} | {:.2}x |", layer(ours) / layer(theirs));
    }
}

/// The axum routers whose layers are compared in process, by name.
const LAYER_ROUTERS: [&str; 5] = ["bare", "ours", "ours-quiet", "governor", "governor-headers"];
/// How the tables name [`LAYER_ROUTERS`].
const LAYER_LABELS: [&str; 5] = [
    "axum, no layer",
    "axum + ours (memory)",
    "axum + ours (memory), fields on refusals only",
    "axum + tower_governor",
    "axum + tower_governor with headers",
];

fn layer_router(name: &str) -> Result<Router, Error> {
    use tower_governor::governor::GovernorConfigBuilder;
    let hello = Router::new().route("/", get(|| async { "hello" }));
    Ok(match name {
        "bare" => hello,
        "ours" => hello.layer(memory_layer()?),
        "ours-quiet" => hello.layer(quiet_layer()?),
        "governor" => hello.layer(tower_governor::GovernorLayer::new(
            GovernorConfigBuilder::default()
                .per_nanosecond(1)
                .burst_size(u32::MAX)
                .finish()
                .ok_or("governor config")?,
        )),
        // `use_headers` changes the builder's type: it must be chained.
        "governor-headers" => hello.layer(tower_governor::GovernorLayer::new(
            GovernorConfigBuilder::default()
                .per_nanosecond(1)
                .burst_size(u32::MAX)
                .use_headers()
                .finish()
                .ok_or("governor config")?,
        )),
        other => return Err(format!("no router named {other}").into()),
    })
}

/// Calls the router `name` in process `n` times, after a warm-up of a tenth
/// as many; run under `valgrind` by [`layer_instructions`] and
/// [`layer_cold_lines`]. A name ending in [`V6`] names the same router,
/// called from an IPv6 address. With `cold`, every request starts with
/// [`ColdCaches::evict`]ed caches.
pub(super) async fn layer_loop(name: &str, n: usize, cold: bool) -> Result<(), Error> {
    let (router, peer) = match name.strip_suffix(V6) {
        Some(router) => (router, PEER_V6),
        None => (name, PEER_V4),
    };
    let mut caches = cold.then(ColdCaches::new);
    per_request(layer_router(router)?, peer, n, || {
        if let Some(caches) = &mut caches {
            caches.evict();
        }
    })
    .await?;
    Ok(())
}

/// The size of each first-level cache that [`layer_cold_lines`] has
/// `valgrind` simulate.
const FIRST_LEVEL_BYTES: usize = 32 * 1024;
/// The size of the simulated last level (a core's second-level cache).
const LAST_LEVEL_BYTES: usize = 512 * 1024;

/// `valgrind`'s options for the simulated caches: the sizes above, 8-way,
/// in 64-byte lines.
fn simulated_caches() -> [String; 3] {
    [
        format!("--I1={FIRST_LEVEL_BYTES},8,64"),
        format!("--D1={FIRST_LEVEL_BYTES},8,64"),
        format!("--LL={LAST_LEVEL_BYTES},8,64"),
    ]
}

/// Evicts the caches of [`simulated_caches`] between two
/// requests, as the kernel's network work and the HTTP server's do
/// between two requests of a real server: it reads and writes every line
/// of twice the last level's size, and runs more than twice the
/// first-level instruction cache's size of straight-line code.
struct ColdCaches {
    data: Vec<u64>,
}

impl ColdCaches {
    const BYTES: usize = 2 * LAST_LEVEL_BYTES;

    fn new() -> Self {
        ColdCaches {
            data: vec![1; Self::BYTES / 8],
        }
    }

    fn evict(&mut self) {
        // One word of every 64-byte line.
        for word in self.data.iter_mut().step_by(8) {
            *word = std::hint::black_box(*word).wrapping_add(1);
        }
        std::hint::black_box(straight_line_code(std::hint::black_box(1)));
    }
}

/// About 100 KiB of code without a loop (more than twice the simulated
/// first-level instruction cache): 16,384 steps of a few instructions, each
/// kept apart by `black_box`.
#[inline(never)]
fn straight_line_code(mut x: u64) -> u64 {
    macro_rules! step {
        () => {
            x = std::hint::black_box(x.rotate_left(5) ^ 0x9e37_79b9).wrapping_mul(3);
        };
    }
    macro_rules! times4 {
        ($m:ident) => {
            $m!();
            $m!();
            $m!();
            $m!();
        };
    }
    macro_rules! s16 {
        () => {
            times4!(step)
        };
    }
    macro_rules! s64 {
        () => {
            times4!(s16)
        };
    }
    macro_rules! s256 {
        () => {
            times4!(s64)
        };
    }
    macro_rules! s1024 {
        () => {
            times4!(s256)
        };
    }
    macro_rules! s4096 {
        () => {
            times4!(s1024)
        };
    }
    times4!(s4096);
    x
}

/// The routers counted again with an IPv6 peer, and how the table names them.
const V6_ROUTERS: [(&str, &str); 2] = [
    (
        "ours-quiet",
        "axum + ours (memory), fields on refusals only, IPv6 peer",
    ),
    ("governor", "axum + tower_governor, IPv6 peer"),
];

/// Instructions per request of each layer, counted by `valgrind`'s
/// cachegrind: unlike time, the count barely moves with the load on a
/// shared machine. Each router runs `n` and `2n` requests in a child
/// process; the difference, divided by `n`, leaves out start-up and
/// warm-up (which also scales with `n`, hence the 1.1).
pub(super) fn layer_instructions(quick: bool) -> Result<(), Error> {
    if valgrind_missing("Instructions per request") {
        return Ok(());
    }
    let n: usize = if quick { 20_000 } else { 100_000 };
    let mut per = Vec::new();
    let v6_names: Vec<String> = V6_ROUTERS.iter().map(|(r, _)| format!("{r}{V6}")).collect();
    for router in LAYER_ROUTERS
        .iter()
        .copied()
        .chain(v6_names.iter().map(String::as_str))
    {
        per.push(counts_per_request(router, n, false)?.instructions);
    }
    let bare = per[0];
    println!(
        "In process under valgrind (cachegrind), instructions per request: {n} and {} requests per router, difference divided\n",
        2 * n
    );
    println!("| router | instructions/request | layer (instructions) |\n|---|---:|---:|");
    let labels = LAYER_LABELS.iter().chain(V6_ROUTERS.iter().map(|(_, l)| l));
    for (label, per) in labels.zip(&per) {
        println!("| {label} | {per:.0} | {:.0} |", per - bare);
    }
    like_for_like("layer instructions", |i| per[i] - bare);
    let v6 = LAYER_ROUTERS.len();
    println!(
        "| IPv6 peer, no fields on allowed responses: ours / tower_governor | {:.2}x |\n",
        (per[v6] - bare) / (per[v6 + 1] - bare)
    );
    Ok(())
}

/// Whether `valgrind` is missing; if so, says that `table` is skipped.
fn valgrind_missing(table: &str) -> bool {
    let missing = Command::new("valgrind").arg("--version").output().is_err();
    if missing {
        println!("{table}: skipped, `valgrind` is not installed (`apt-get install valgrind`).\n");
    }
    missing
}

/// What `valgrind`'s cachegrind counted over one `--layer-loop` run.
struct Counts {
    instructions: f64,
    /// Misses in the simulated first-level instruction cache.
    code_lines: f64,
    /// Misses in the simulated first-level data cache.
    data_lines: f64,
    /// Misses in the simulated last level.
    last_level: f64,
}

/// Runs `--layer-loop router requests` under cachegrind; with `cold`, in
/// the [`simulated_caches`], evicted before every request.
fn cachegrind(router: &str, requests: usize, cold: bool) -> Result<Counts, Error> {
    let mut command = Command::new("valgrind");
    command
        .arg("--tool=cachegrind")
        .arg("--cachegrind-out-file=/dev/null");
    if cold {
        command.arg("--cache-sim=yes").args(simulated_caches());
    } else {
        command.arg("--cache-sim=no");
    }
    let output = command
        .arg(std::env::current_exe()?)
        .args(["--layer-loop", router, &requests.to_string()])
        .args(cold.then_some("cold"))
        .output()?;
    if !output.status.success() {
        return Err(format!("valgrind on {router}: {}", output.status).into());
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    let field = |name: &str| valgrind_field(&stderr, name);
    Ok(Counts {
        instructions: field("I refs")?,
        code_lines: if cold { field("I1 misses")? } else { 0.0 },
        data_lines: if cold { field("D1 misses")? } else { 0.0 },
        last_level: if cold { field("LL misses")? } else { 0.0 },
    })
}

/// `router`'s counts per request under [`cachegrind`]: runs of `n` and `2n`
/// requests, the difference divided, which leaves out start-up and warm-up
/// (`per_request` warms up with a tenth of its requests, hence the 1.1).
fn counts_per_request(router: &str, n: usize, cold: bool) -> Result<Counts, Error> {
    let once = cachegrind(router, n, cold)?;
    let twice = cachegrind(router, 2 * n, cold)?;
    let each = |f: fn(&Counts) -> f64| (f(&twice) - f(&once)) / (1.1 * n as f64);
    Ok(Counts {
        instructions: each(|c| c.instructions),
        code_lines: each(|c| c.code_lines),
        data_lines: each(|c| c.data_lines),
        last_level: each(|c| c.last_level),
    })
}

/// The first figure of the summary line `name` (its words, however spaced)
/// in valgrind's output, such as `==12== D1  misses:  1,234  (1,000 rd + 234 wr)`.
fn valgrind_field(stderr: &str, name: &str) -> Result<f64, Error> {
    let value = stderr
        .lines()
        .find_map(|line| {
            let (_, rest) = line.split_once("== ")?;
            let (label, value) = rest.split_once(':')?;
            (label.split_whitespace().eq(name.split_whitespace())).then_some(value)
        })
        .and_then(|value| value.split_whitespace().next())
        .ok_or_else(|| format!("no `{name}` in valgrind's output"))?;
    Ok(value.replace(',', "").parse::<u64>()? as f64)
}

/// The cache lines each layer brings in per request when it starts cold,
/// as a real server's request does after the kernel's network work: under
/// cachegrind, in the [`simulated_caches`], evicted by [`ColdCaches`]
/// before every request. Each router runs `n` and `2n` requests; the
/// difference, divided, leaves out start-up, and the router without a
/// layer is subtracted as in [`layer_instructions`].
pub(super) fn layer_cold_lines(quick: bool) -> Result<(), Error> {
    if valgrind_missing("Cold cache lines per request") {
        return Ok(());
    }
    let n: usize = if quick { 1_000 } else { 4_000 };
    let mut per = Vec::new();
    for router in LAYER_ROUTERS {
        let counts = counts_per_request(router, n, true)?;
        per.push([counts.code_lines, counts.data_lines, counts.last_level]);
    }
    let bare = per[0];
    println!(
        "In process under valgrind (cachegrind), caches evicted before every request: lines missed per request by the layer (the router's, less the router without a layer's), {n} and {} requests per router, difference divided\n",
        2 * n
    );
    println!(
        "| router | code lines (first level) | data lines (first level) | last level, code and data |\n|---|---:|---:|---:|"
    );
    println!(
        "| axum, no layer (its lines and the eviction's) | {:.0} | {:.0} | {:.0} |",
        bare[0], bare[1], bare[2]
    );
    for (label, per) in LAYER_LABELS.iter().zip(&per).skip(1) {
        println!(
            "| {label} | {:.0} | {:.0} | {:.0} |",
            per[0] - bare[0],
            per[1] - bare[1],
            per[2] - bare[2]
        );
    }
    println!(
        "\n| like for like: ratio of lines | code | data | last level, code and data |\n|---|---:|---:|---:|"
    );
    for (label, ours, theirs) in LIKE_FOR_LIKE {
        let ratio = |k: usize| (per[ours][k] - bare[k]) / (per[theirs][k] - bare[k]);
        println!(
            "| {label} | {:.2}x | {:.2}x | {:.2}x |",
            ratio(0),
            ratio(1),
            ratio(2)
        );
    }
    println!();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::valgrind_field;

    /// The summary lines that `valgrind --tool=cachegrind --cache-sim=yes`
    /// prints, read by their words whatever their spacing, and not
    /// confused with their neighbours (`LL misses` is not `LLi misses`).
    #[test]
    fn valgrind_summary_fields() {
        let stderr = "\
==2673== I   refs:      1,220,310,785
==2673== I1  misses:        6,104,203
==2673== LLi misses:        6,104,001
==2673== D   refs:       77,970,009  (39,254,611 rd   + 38,715,398 wr)
==2673== D1  misses:     18,237,673  (18,124,852 rd   +    112,821 wr)
==2673== LL refs:        19,118,990  (19,006,169 rd   +    112,821 wr)
==2673== LL misses:      19,117,525  (19,004,863 rd   +    112,662 wr)
";
        let field = |name| valgrind_field(stderr, name).unwrap();
        assert_eq!(field("I refs"), 1_220_310_785.0);
        assert_eq!(field("I1 misses"), 6_104_203.0);
        assert_eq!(field("D1 misses"), 18_237_673.0);
        assert_eq!(field("LL misses"), 19_117_525.0);
        assert!(valgrind_field(stderr, "L2 misses").is_err());
    }
}
