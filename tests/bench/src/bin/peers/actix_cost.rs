//! Section 4, in process: our actix-web middleware's time and allocations
//! per request, by key extractor.

use std::net::SocketAddr;
use std::time::Instant;

use lock_bench::Error;
use lock_core::backend::MemoryBackend;
use lock_core::rate::RateLimiter;
use lock_tower::RateLimitLayer;
use lock_tower::key::PeerIp;

use crate::layers::gcra_policy;
use crate::{Allocations, Scale};

/// Times `$n` calls of the actix service `$app` with requests from `$request`;
/// nanoseconds and heap allocations per request (building the request
/// included).
macro_rules! actix_per_request {
    ($app:expr, $request:expr, $n:expr) => {{
        let allocations = Allocations::start();
        let started = Instant::now();
        for _ in 0..$n {
            let response = actix_web::test::call_service($app, $request()).await;
            if !response.status().is_success() {
                return Err(format!("status {}", response.status()));
            }
        }
        let elapsed = started.elapsed();
        let allocations = allocations.stop();
        (
            elapsed.as_nanos() as f64 / $n as f64,
            allocations as f64 / $n as f64,
        )
    }};
}

/// Our actix-web middleware in process (`actix_web::test`, no socket), one
/// request at a time with the ten headers a browser typically sends, from a
/// trusted proxy with `X-Forwarded-For`. actix-web 4 has its own `http`
/// types, so a request is copied into `http` 1 types for the key extractor,
/// with only the header fields the extractor reads.
pub(super) fn actix_layer_cost(scale: &Scale) -> Result<(), Error> {
    use actix_web::{App, HttpResponse, test, web};
    const ROUNDS: usize = 9;
    let n = scale.iterations * 2;
    let rows = std::thread::spawn(move || {
        actix_web::rt::System::new().block_on(async move {
            let limiter = |scope: &str| {
                RateLimiter::new(MemoryBackend::new(), scope, gcra_policy())
                    .map_err(|e| e.to_string())
            };
            let hello = || web::get().to(|| async { HttpResponse::Ok().body("hello") });
            let peer = lock_actix::RateLimitMiddleware::new(RateLimitLayer::new(
                limiter("peer")?,
                PeerIp::new(),
            ));
            let header = lock_actix::RateLimitMiddleware::new(RateLimitLayer::new(
                limiter("header")?,
                lock_tower::key::HeaderKey::new(http::HeaderName::from_static("x-user")),
            ));
            let client = lock_actix::RateLimitMiddleware::new(RateLimitLayer::new(
                limiter("client")?,
                lock_tower::key::ClientIp::new(["10.0.0.0/8".parse().map_err(|_| "a network")?]),
            ));
            // A closure may read any field, so every one is copied.
            let closure = lock_actix::RateLimitMiddleware::new(RateLimitLayer::new(
                limiter("closure")?,
                |request: lock_tower::key::RequestParts<'_>| {
                    Some(request.headers.get("x-user")?.to_str().ok()?.to_owned())
                },
            ));
            let bare = test::init_service(App::new().route("/", hello())).await;
            let peer = test::init_service(App::new().wrap(peer).route("/", hello())).await;
            let header = test::init_service(App::new().wrap(header).route("/", hello())).await;
            let client = test::init_service(App::new().wrap(client).route("/", hello())).await;
            let closure = test::init_service(App::new().wrap(closure).route("/", hello())).await;
            let request = || {
                let mut request = test::TestRequest::get()
                    .uri("/")
                    .peer_addr(SocketAddr::from(([10, 0, 0, 1], 40000)));
                for field in BROWSER_HEADERS {
                    request = request.insert_header(field);
                }
                request
                    .insert_header(("x-forwarded-for", "203.0.113.7"))
                    .insert_header(("x-user", "u-42"))
                    .to_request()
            };
            let mut rows = Vec::with_capacity(ROUNDS);
            for _ in 0..ROUNDS {
                rows.push([
                    actix_per_request!(&bare, request, n),
                    actix_per_request!(&peer, request, n),
                    actix_per_request!(&header, request, n),
                    actix_per_request!(&client, request, n),
                    actix_per_request!(&closure, request, n),
                ]);
            }
            Ok::<_, String>(rows)
        })
    })
    .join()
    .map_err(|_| "the actix table panicked")??;
    let fastest = |i: usize| rows.iter().map(|r| r[i].0).fold(f64::INFINITY, f64::min);
    let allocations = |i: usize| rows[0][i].1;
    let bare = fastest(0);
    println!(
        "actix-web in process (no socket), one request at a time with {} header fields, {n} requests per round, fastest of {ROUNDS} interleaved rounds\n",
        BROWSER_HEADERS.len() + 2
    );
    println!(
        "| app | ns/request | middleware cost (ns) | allocations/request |\n|---|---:|---:|---:|"
    );
    println!(
        "| actix, no middleware | {bare:.0} | 0 | {:.1} |",
        allocations(0)
    );
    for (label, i) in [
        ("actix + ours (memory), key: peer IP (no field copied)", 1),
        (
            "actix + ours (memory), key: a header (that field copied)",
            2,
        ),
        (
            "actix + ours (memory), key: client IP behind a proxy (X-Forwarded-For copied)",
            3,
        ),
        (
            "actix + ours (memory), key: a closure reading a header (every field copied)",
            4,
        ),
    ] {
        println!(
            "| {label} | {:.0} | {:.0} | {:.1} |",
            fastest(i),
            fastest(i) - bare,
            allocations(i)
        );
    }
    Ok(())
}

/// What a browser sends with a page request, besides the key header.
const BROWSER_HEADERS: [(&str, &str); 10] = [
    ("host", "shop.example.com"),
    (
        "user-agent",
        "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36",
    ),
    (
        "accept",
        "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
    ),
    ("accept-language", "en-US,en;q=0.9"),
    ("accept-encoding", "gzip, deflate, br"),
    ("cookie", "session=3f2a9c1e7b; theme=dark; cart=42"),
    ("referer", "https://shop.example.com/sale"),
    ("sec-fetch-mode", "navigate"),
    ("sec-fetch-site", "same-origin"),
    ("upgrade-insecure-requests", "1"),
];
