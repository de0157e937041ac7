//! Section 4 over HTTP: axum and actix-web servers with and without the
//! layers, under the load generator.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use lock_bench::Error;
use lock_core::backend::RedisBackend;
use lock_core::rate::{Algorithm, Policy, Quota, RateLimiter};
use lock_tests::RedisServer;
use lock_tests::http::TestServer;
// lock-axum's layer: these routers are axum apps.
use lock_axum::RateLimitLayer;
use lock_tower::key::{GlobalKey, PeerIp};

use crate::layers::{gcra_policy, huge, memory_layer, quiet_layer};
use crate::load::{Round, load};
use crate::{Scale, median_and_quartiles, micros};

/// Section 4's servers under load. With `memory_only`, just the axum
/// servers without Redis (`--only 4h`), in [`MEMORY_ROUNDS`] rounds rather
/// than [`ROUNDS`], for a closer look at ours against `tower_governor`.
pub(super) async fn http(scale: &Scale, memory_only: bool) -> Result<(), Error> {
    let hello = || Router::new().route("/", get(|| async { "hello" }));
    let bare = TestServer::start(hello()).await;
    let ours_memory = TestServer::start(hello().layer(memory_layer()?)).await;
    let governor = || {
        tower_governor::governor::GovernorConfigBuilder::default()
            .per_nanosecond(1)
            .burst_size(u32::MAX)
            .finish()
            .ok_or("governor config")
    };
    let theirs_memory =
        TestServer::start(hello().layer(tower_governor::GovernorLayer::new(governor()?))).await;
    // The same server again: how far two identical servers' requests/s
    // differ here, measured as every comparison is.
    let theirs_memory_again =
        TestServer::start(hello().layer(tower_governor::GovernorLayer::new(governor()?))).await;
    let ours_quiet = TestServer::start(hello().layer(quiet_layer()?)).await;
    // The same with rate-limit headers on every response, as ours sends.
    let governor_headers = tower_governor::governor::GovernorConfigBuilder::default()
        .per_nanosecond(1)
        .burst_size(u32::MAX)
        .use_headers()
        .finish()
        .ok_or("governor config")?;
    let theirs_memory_headers =
        TestServer::start(hello().layer(tower_governor::GovernorLayer::new(governor_headers)))
            .await;
    let mut targets = vec![
        (BARE, bare.addr()),
        (OURS_MEMORY, ours_memory.addr()),
        (GOVERNOR, theirs_memory.addr()),
        (GOVERNOR_AGAIN, theirs_memory_again.addr()),
        (GOVERNOR_HEADERS, theirs_memory_headers.addr()),
        (OURS_QUIET, ours_quiet.addr()),
    ];
    // Kept until the end of the function: the servers stop when dropped.
    let mut _redis_servers = None;
    if !memory_only {
        let redis = RedisServer::start();
        let backend = RedisBackend::connect(&redis.url()).await?;
        let ours_redis = TestServer::start(hello().layer(RateLimitLayer::new(
            RateLimiter::new(backend.clone(), "http", gcra_policy())?,
            PeerIp::new(),
        )))
        .await;
        let ours_actix = actix_server(ActixVariant::Ours(redis.url(), true))?;
        // actix-limitation sends no rate-limit fields at all.
        let ours_actix_quiet = actix_server(ActixVariant::Ours(redis.url(), false))?;
        let theirs_actix = actix_server(ActixVariant::Limitation(redis.url()))?;
        let bare_actix = actix_server(ActixVariant::Bare)?;
        targets.extend([
            (OURS_REDIS, ours_redis.addr()),
            (OURS_ACTIX, ours_actix.0),
            (LIMITATION, theirs_actix.0),
            (BARE_ACTIX, bare_actix.0),
            (OURS_ACTIX_QUIET, ours_actix_quiet.0),
        ]);
        _redis_servers = Some((
            redis,
            ours_redis,
            [ours_actix, ours_actix_quiet, theirs_actix, bare_actix],
        ));
    }
    targets.sort_by_key(|(label, _)| ORDER.iter().position(|o| o == label));
    // Each level of concurrency in interleaved rounds, so drift on a shared
    // machine hits every server alike; each server's median round is
    // reported. Each round visits the servers in another order (see
    // `visit_order`). At 32 connections a server that waits on Redis round
    // trips is partly idle; at 128 every server here is saturated.
    let rounds = if memory_only { MEMORY_ROUNDS } else { ROUNDS };
    const LEVELS: [usize; 2] = [32, 128];
    let mut results: Vec<Vec<Vec<Round>>> = vec![vec![Vec::new(); targets.len()]; LEVELS.len()];
    for (&concurrency, level) in LEVELS.iter().zip(results.iter_mut()) {
        for round in 0..rounds {
            for i in visit_order(targets.len(), round) {
                let result = load(targets[i].1, concurrency, scale.http_for / ROUNDS).await?;
                level[i].push(result);
            }
        }
    }
    let index = |label: &str| targets.iter().position(|(l, _)| *l == label);
    // Each comparison is the median over rounds of the two servers' ratio
    // in the same round: drift between rounds cancels out. The spread of
    // those ratios (their lower and upper quartiles) comes with it.
    let paired = |level: &[Vec<Round>], a: usize, b: usize, of: Measure| {
        median_and_quartiles(
            level[a]
                .iter()
                .zip(&level[b])
                .map(|(x, y)| of(x) / of(y))
                .collect(),
        )
    };
    println!(
        "\nKeep-alive connections over loopback; at each level, {rounds} interleaved rounds of {:?} per server, median round\n",
        scale.http_for / ROUNDS
    );
    let header: String = LEVELS
        .iter()
        .map(|c| {
            format!(" requests/s, {c} conns | p99, {c} conns | server CPU/request, {c} conns |")
        })
        .collect();
    println!("| server |{header}");
    println!("|---|{}", "---:|".repeat(3 * LEVELS.len()));
    for (i, (label, _)) in targets.iter().enumerate() {
        let cells: String = results
            .iter()
            .map(|level| {
                // The median round by requests/s, and the median CPU time
                // per request over the rounds.
                let mut rounds = level[i].clone();
                rounds.sort_by(|a, b| a.rps.total_cmp(&b.rps));
                let Round { rps, p99, .. } = rounds[rounds.len() / 2];
                let mut cpu: Vec<f64> = rounds.iter().map(|r| r.server_cpu_ns).collect();
                cpu.sort_by(f64::total_cmp);
                let cpu = cpu[cpu.len() / 2] / 1000.0;
                format!(" {rps:.0} | {} | {cpu:.2} us |", micros(p99))
            })
            .collect();
        println!("| {label} |{cells}");
    }
    let header: String = LEVELS.iter().map(|c| format!(" {c} conns |")).collect();
    let measures: [(&str, Measure); 2] = [
        ("requests/s", |r| r.rps),
        (
            "the servers' CPU time per request (above 1: the first costs more)",
            |r| r.server_cpu_ns,
        ),
    ];
    for (measure, of) in measures {
        println!(
            "\n| comparison of {measure}: median of the ratios within a round (quartiles) |{header}"
        );
        println!("|---|{}", "---:|".repeat(LEVELS.len()));
        for (label, a, b) in COMPARISONS {
            let (Some(a), Some(b)) = (index(a), index(b)) else {
                continue;
            };
            let cells: String = results
                .iter()
                .map(|level| {
                    let (median, low, high) = paired(level, a, b, of);
                    format!(" {median:.2}x ({low:.2} to {high:.2}) |")
                })
                .collect();
            println!("| {label} |{cells}");
        }
    }
    Ok(())
}

/// One figure of a [`Round`], compared between servers.
type Measure = fn(&Round) -> f64;

/// The order in which round `round` visits `n` servers: [`ORDER`] turned
/// by one place every two rounds, and backwards in every other round. Over
/// the rounds each server takes each place alike, and follows each of its
/// neighbours as often as it precedes it, so neither the place in a round
/// nor what ran just before (a busier server's closed connections, say)
/// favours one server.
fn visit_order(n: usize, round: u32) -> impl Iterator<Item = usize> {
    let turn = (round / 2) as usize;
    let backwards = round % 2 == 1;
    (0..n).map(move |place| {
        let place = if backwards { n - 1 - place } else { place };
        (place + turn) % n
    })
}

/// Interleaved rounds at each level of concurrency, of `http_for / ROUNDS`
/// each.
const ROUNDS: u32 = 5;
/// Rounds of `--only 4h`, which runs fewer servers.
const MEMORY_ROUNDS: u32 = 25;

const BARE: &str = "axum, no layer";
const OURS_MEMORY: &str = "axum + ours (memory)";
const GOVERNOR: &str = "axum + tower_governor";
const GOVERNOR_AGAIN: &str = "axum + tower_governor, a second server";
const GOVERNOR_HEADERS: &str = "axum + tower_governor with headers";
const OURS_QUIET: &str = "axum + ours (memory), fields on refusals only";
const OURS_REDIS: &str = "axum + ours (redis)";
const OURS_ACTIX: &str = "actix + ours (redis)";
const LIMITATION: &str = "actix + actix-limitation (redis)";
const BARE_ACTIX: &str = "actix, no layer";
const OURS_ACTIX_QUIET: &str = "actix + ours (redis), fields on refusals only";

/// The servers in the order of a round that [`visit_order`] leaves as is.
const ORDER: [&str; 11] = [
    BARE,
    OURS_MEMORY,
    GOVERNOR,
    GOVERNOR_AGAIN,
    GOVERNOR_HEADERS,
    OURS_REDIS,
    OURS_ACTIX,
    LIMITATION,
    OURS_QUIET,
    BARE_ACTIX,
    OURS_ACTIX_QUIET,
];

/// The ratios reported: a label, and the two servers compared.
const COMPARISONS: [(&str, &str, &str); 12] = [
    (
        "one server against the same again (how far identical servers differ): tower_governor / tower_governor",
        GOVERNOR,
        GOVERNOR_AGAIN,
    ),
    (
        "fields on every response: ours (memory) / tower_governor with headers",
        OURS_MEMORY,
        GOVERNOR_HEADERS,
    ),
    (
        "no fields on allowed responses: ours (memory) / tower_governor",
        OURS_QUIET,
        GOVERNOR,
    ),
    (
        "ours (memory, default) / tower_governor (default)",
        OURS_MEMORY,
        GOVERNOR,
    ),
    ("ours (memory) / no layer", OURS_MEMORY, BARE),
    // What a whole layer costs over HTTP: the most any layer could gain.
    (
        "no fields on allowed responses: ours (memory) / no layer",
        OURS_QUIET,
        BARE,
    ),
    ("tower_governor / no layer", GOVERNOR, BARE),
    ("ours (redis) / no layer", OURS_REDIS, BARE),
    (
        "actix: ours (redis, default) / actix-limitation",
        OURS_ACTIX,
        LIMITATION,
    ),
    (
        "actix, no fields on allowed responses (actix-limitation sends none): ours (redis) / actix-limitation",
        OURS_ACTIX_QUIET,
        LIMITATION,
    ),
    ("actix: ours (redis) / no layer", OURS_ACTIX, BARE_ACTIX),
    ("actix: actix-limitation / no layer", LIMITATION, BARE_ACTIX),
];

enum ActixVariant {
    Bare,
    /// Our middleware; whether allowed responses carry rate-limit fields.
    Ours(String, bool),
    Limitation(String),
}

/// An actix-web hello server with one worker on its own thread; stops with
/// the process. Our backend connects inside the actix system, as it would in
/// an `#[actix_web::main]` application, so its connection is driven there.
fn actix_server(
    variant: ActixVariant,
) -> Result<(SocketAddr, actix_web::dev::ServerHandle), Error> {
    use actix_web::{App, HttpServer, web};
    fn hello() -> actix_web::Route {
        web::get().to(|| async { "hello" })
    }
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        actix_web::rt::System::new().block_on(async move {
            // One worker, any free port: the address and the running server.
            macro_rules! start {
                ($factory:expr) => {{
                    let bound = HttpServer::new($factory)
                        .workers(1)
                        .disable_signals()
                        .bind(("127.0.0.1", 0))?;
                    let addr = bound.addrs().first().copied().ok_or("no address")?;
                    (addr, bound.run())
                }};
            }
            let server = async {
                let started = match variant {
                    ActixVariant::Bare => start!(|| App::new().route("/", hello())),
                    ActixVariant::Ours(url, fields_on_success) => {
                        let limiter = RateLimiter::new(
                            RedisBackend::connect(&url).await?,
                            "actix",
                            Policy::new(Algorithm::FixedWindow).quota(Quota::per_hour(huge())),
                        )?;
                        let middleware = lock_actix::RateLimitMiddleware::new(
                            RateLimitLayer::new(limiter, GlobalKey::new())
                                .headers_on_success(fields_on_success),
                        );
                        start!(move || App::new().wrap(middleware.clone()).route("/", hello()))
                    }
                    ActixVariant::Limitation(url) => {
                        let limiter = actix_limitation::Limiter::builder(url)
                            .key_by(|_req: &actix_web::dev::ServiceRequest| {
                                Some("global".to_owned())
                            })
                            .limit(1_000_000_000)
                            .period(Duration::from_secs(3600))
                            .build()?;
                        let limiter = web::Data::new(limiter);
                        start!(move || {
                            App::new()
                                .wrap(actix_limitation::RateLimiter::default())
                                .app_data(limiter.clone())
                                .route("/", hello())
                        })
                    }
                };
                Ok::<_, Error>(started)
            };
            match server.await {
                Ok((addr, server)) => {
                    let _ = tx.send(Ok((addr, server.handle())));
                    let _ = server.await;
                }
                Err(e) => {
                    let _ = tx.send(Err(e.to_string()));
                }
            }
        });
    });
    Ok(rx.recv()??)
}

#[cfg(test)]
mod tests {
    use super::visit_order;

    /// Over `2 * n` rounds, every round visits every server once, each
    /// server takes each place twice, and each ordered pair of neighbours
    /// occurs as often as the reverse pair.
    #[test]
    fn rounds_spread_places_and_neighbours() {
        let n = 6;
        let mut places = vec![vec![0; n]; n];
        let mut follows = vec![vec![0i32; n]; n];
        for round in 0..2 * n as u32 {
            let order: Vec<usize> = visit_order(n, round).collect();
            let mut sorted = order.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, (0..n).collect::<Vec<_>>(), "round {round}");
            for (place, &server) in order.iter().enumerate() {
                places[server][place] += 1;
            }
            for pair in order.windows(2) {
                follows[pair[0]][pair[1]] += 1;
                follows[pair[1]][pair[0]] -= 1;
            }
        }
        assert!(
            places.iter().flatten().all(|&count| count == 2),
            "{places:?}"
        );
        assert!(follows.iter().flatten().all(|&net| net == 0), "{follows:?}");
    }
}
