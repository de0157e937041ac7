//! The five set-up mistakes a newcomer makes first, over real HTTP, and
//! what they see: an axum app served without connect info, one with
//! lock-tower's own layers instead of lock-axum's, an actix-web lock on
//! `App::wrap` instead of its resource, axum's `route_layer` over routes
//! without the key's path parameter, and Redis going away under a rate
//! limit. The first four answer 500 with the fix in the body (for
//! whoever has no log subscriber yet) and log it once at `warn`; the last
//! keeps answering, from this process's memory, and logs that at `warn`.
//!
//! Run with `--nocapture` to see each body and log line.

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::sync::OnceLock;

use axum::Router;
use axum::routing::{get, post};
use http::StatusCode;
use lock_axum::backend::{MemoryBackend, RedisBackend, RedisConfig};
use lock_axum::key::{GlobalKey, PathParam, PeerIp};
use lock_axum::rate::{Algorithm, Policy, Quota, RateBackend, RateLimiter};
use lock_axum::{LockLayer, RateLimitLayer};
use lock_tests::RedisServer;
use lock_tests::http::{Reply, TestClient, TestServer};
use lock_tests::logs::Logged;

/// Everything logged by every test of this file, with a subscriber
/// installed on first use (as `tracing_subscriber::fmt::init()` in an app
/// would).
fn log() -> &'static Logged {
    static LOG: OnceLock<Logged> = OnceLock::new();
    LOG.get_or_init(|| {
        let logged = Logged::default();
        logged.subscriber().init();
        logged
    })
}

/// The `WARN` and `ERROR` lines that name `scope`.
fn warnings(scope: &str) -> Vec<String> {
    log()
        .text()
        .lines()
        .filter(|line| line.contains("WARN") || line.contains("ERROR"))
        .filter(|line| line.contains(&format!("scope={scope}")))
        .map(str::to_owned)
        .collect()
}

fn show(mistake: &str, reply: &Reply, scope: &str) {
    eprintln!(
        "== {mistake}\n-- response: {} {:?}\n-- log:\n{}",
        reply.status,
        reply.text(),
        warnings(scope).join("\n")
    );
}

fn limiter<B: RateBackend>(backend: B, scope: &str) -> RateLimiter<B> {
    let quota = Quota::per_minute(NonZeroU32::new(100).expect("positive"));
    RateLimiter::new(backend, scope, Policy::new(Algorithm::Gcra).quota(quota)).expect("valid")
}

/// Serves `app` as a newcomer might: `axum::serve(listener, app)`.
async fn serve_without_connect_info(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn axum_served_without_connect_info() {
    log();
    let scope = "mistake-connect-info";
    let layer = RateLimitLayer::new(limiter(MemoryBackend::new(), scope), PeerIp::new());
    let addr = serve_without_connect_info(
        Router::new()
            .route("/", get(|| async { "ok" }))
            .layer(layer),
    )
    .await;
    let client = TestClient::new();
    let mut last = None;
    for _ in 0..3 {
        let reply = client.get(&format!("http://{addr}/"), &[]).await;
        assert_eq!(reply.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(
            reply
                .text()
                .contains("into_make_service_with_connect_info::<SocketAddr>()"),
            "the fix is in the body: {:?}",
            reply.text()
        );
        last = Some(reply);
    }
    let warned = warnings(scope);
    assert_eq!(warned.len(), 1, "logged once: {warned:?}");
    assert!(warned[0].contains("into_make_service_with_connect_info"));
    show(
        "axum served without connect info",
        &last.expect("a reply"),
        scope,
    );
}

/// `reply` is the 500 of a layer (`layer`, e.g. "`pay` lock") whose key
/// found nothing, and names lock-axum's layer (`fix`) as the fix.
fn asks_for_lock_axum(reply: &Reply, layer: &str, fix: &str) {
    let text = reply.text();
    assert_eq!(reply.status, StatusCode::INTERNAL_SERVER_ERROR, "{text:?}");
    assert!(text.contains(fix), "names the fix: {text:?}");
    assert!(text.contains(layer), "names {layer}: {text:?}");
}

/// lock-tower reads no axum record itself: its own layers in an axum app
/// (`lock_tower::RateLimitLayer`, not `lock_axum::RateLimitLayer`) find
/// no key by address or path parameter, even served with connect info.
/// Each answers 500 naming lock-axum's layer (never a panic) and logs it
/// once; lock-axum's, in the same places, work with nothing added.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn axum_with_lock_towers_own_layers() {
    log();
    let (peer_scope, param_scope) = ("mistake-tower-peer", "mistake-tower-param");
    let client = TestClient::new();
    let health = || get(|| async { "ok" });

    let per_ip =
        lock_tower::RateLimitLayer::new(limiter(MemoryBackend::new(), peer_scope), PeerIp::new());
    let tower_peer = Router::new().route("/health", health()).layer(per_ip);
    let tower_peer = TestServer::start(tower_peer).await;
    for _ in 0..3 {
        let reply = client.get(&tower_peer.url("/health"), &[]).await;
        let rate_limit = format!("`{peer_scope}` rate limit");
        asks_for_lock_axum(&reply, &rate_limit, "lock_axum::RateLimitLayer");
    }
    let warned = warnings(peer_scope);
    assert_eq!(warned.len(), 1, "logged once: {warned:?}");
    assert!(
        warned[0].contains("lock_axum::RateLimitLayer"),
        "{warned:?}"
    );

    let per_order =
        lock_tower::LockLayer::new(MemoryBackend::new(), PathParam::new("id")).scope(param_scope);
    let pay_route = post(|| async { "paid" }).layer(per_order);
    let tower_param = Router::new().route("/orders/{id}/pay", pay_route);
    let tower_param = TestServer::start(tower_param).await;
    let pay = client
        .send("POST", &tower_param.url("/orders/1/pay"), &[])
        .await;
    asks_for_lock_axum(
        &pay,
        &format!("`{param_scope}` lock"),
        "lock_axum::LockLayer",
    );
    assert_eq!(warnings(param_scope).len(), 1, "logged once");
    show("axum with lock-tower's LockLayer", &pay, param_scope);

    // The same layers from lock-axum.
    let per_ip = RateLimitLayer::new(limiter(MemoryBackend::new(), peer_scope), PeerIp::new());
    let per_order = LockLayer::new(MemoryBackend::new(), PathParam::new("id")).scope(param_scope);
    let fixed = Router::new()
        .route(
            "/orders/{id}/pay",
            post(|| async { "paid" }).layer(per_order),
        )
        .route("/health", health())
        .layer(per_ip);
    let fixed = TestServer::start(fixed).await;
    let reply = client.get(&fixed.url("/health"), &[]).await;
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.text());
    let pay = client.send("POST", &fixed.url("/orders/1/pay"), &[]).await;
    assert_eq!(pay.status, StatusCode::OK, "{:?}", pay.text());
    assert_eq!(pay.text(), "paid");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actix_lock_on_the_app_instead_of_the_resource() {
    use actix_web::web;
    log();
    let scope = "mistake-app-wrap";
    let lock = lock_actix::LockMiddleware::new(
        LockLayer::new(MemoryBackend::new(), PathParam::new("id")).scope(scope),
    );
    let addr = lock_tests::http::actix(move || {
        actix_web::App::new()
            .wrap(lock.clone())
            .route("/orders/{id}/pay", web::post().to(|| async { "paid" }))
            .route("/health", web::get().to(|| async { "ok" }))
    });
    let client = TestClient::new();
    let pay = client
        .send("POST", &format!("http://{addr}/orders/1/pay"), &[])
        .await;
    let health = client.get(&format!("http://{addr}/health"), &[]).await;
    for reply in [&pay, &health] {
        assert_eq!(reply.status, StatusCode::INTERNAL_SERVER_ERROR);
        let text = reply.text();
        assert!(text.contains("`App::wrap`"), "names the mistake: {text:?}");
        assert!(text.contains("web::resource"), "names the fix: {text:?}");
        assert!(
            text.contains(&format!("`{scope}` lock")),
            "names the lock: {text:?}"
        );
    }
    let warned = warnings(scope);
    assert_eq!(warned.len(), 1, "logged once: {warned:?}");
    assert!(warned[0].contains("web::resource"), "{warned:?}");
    show("actix App::wrap(LockMiddleware)", &health, scope);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn axum_route_layer_over_a_route_without_the_parameter() {
    log();
    let scope = "mistake-route-layer";
    let lock = LockLayer::new(MemoryBackend::new(), PathParam::new("id")).scope(scope);
    let app = Router::new()
        .route("/orders/{id}/pay", post(|| async { "paid" }))
        .route("/health", get(|| async { "ok" }))
        .route_layer(lock);
    let server = TestServer::start(app).await;
    let client = TestClient::new();
    let pay = client.send("POST", &server.url("/orders/1/pay"), &[]).await;
    assert_eq!(pay.status, StatusCode::OK);
    let health = client.get(&server.url("/health"), &[]).await;
    assert_eq!(health.status, StatusCode::INTERNAL_SERVER_ERROR);
    let text = health.text();
    assert!(text.contains("`/health`"), "names the route: {text:?}");
    assert!(text.contains("`{id}`"), "names the parameter: {text:?}");
    assert!(text.contains(".layer("), "names the fix: {text:?}");
    assert!(
        text.contains(&format!("`{scope}` lock")),
        "names the lock: {text:?}"
    );
    let warned = warnings(scope);
    assert_eq!(warned.len(), 1, "logged once: {warned:?}");
    show("axum route_layer over /health", &health, scope);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_under_a_rate_limit() {
    log();
    let scope = "mistake-redis-killed";
    let mut server = RedisServer::start();
    let config = RedisConfig::default().response_timeout(std::time::Duration::from_millis(200));
    let redis = RedisBackend::connect_with(server.client(), config)
        .await
        .expect("connect");
    let layer = RateLimitLayer::new(limiter(redis, scope), GlobalKey::new());
    let http = TestServer::start(
        Router::new()
            .route("/", get(|| async { "ok" }))
            .layer(layer),
    )
    .await;
    let client = TestClient::new();
    assert_eq!(client.get(&http.url("/"), &[]).await.status, StatusCode::OK);
    assert!(warnings(scope).is_empty());
    server.kill();
    let mut last = None;
    for _ in 0..3 {
        let reply = client.get(&http.url("/"), &[]).await;
        // Still answered, by this process's own limiter.
        assert_eq!(reply.status, StatusCode::OK);
        assert!(reply.header("ratelimit").starts_with("\"default\";r="));
        last = Some(reply);
    }
    let warned = warnings(scope);
    assert!(!warned.is_empty(), "the fallback is logged");
    assert!(
        warned[0].contains("deciding in this process's memory"),
        "{warned:?}"
    );
    show(
        "Redis killed under a rate limit",
        &last.expect("a reply"),
        scope,
    );
}

/// A connect that fails says which URL it tried, without its password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_connect_names_the_url() {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port();
    for (url, shown) in [
        (
            format!("redis://127.0.0.1:{port}/"),
            format!("redis://127.0.0.1:{port}/"),
        ),
        (
            format!("redis://app:s3cret@127.0.0.1:{port}/0"),
            format!("redis://app:***@127.0.0.1:{port}/0"),
        ),
        ("redis//no-scheme".to_owned(), "redis//no-scheme".to_owned()),
        (
            "redis//app:s3cret@no-scheme".to_owned(),
            "redis//app:***@no-scheme".to_owned(),
        ),
    ] {
        let error = RedisBackend::connect(&url)
            .await
            .err()
            .unwrap_or_else(|| panic!("{url} connected"));
        let text = error.to_string();
        // The same variant as before, with redis-rs's error as its source.
        let lock_axum::Error::Backend(backend) = &error else {
            panic!("{url}: {error:?}");
        };
        let source = std::error::Error::source(backend).expect("a source");
        assert!(
            source.downcast_ref::<redis::RedisError>().is_some(),
            "{url}: {source:?}"
        );
        assert!(text.contains(&shown), "{url}: {text}");
        assert!(!text.contains("s3cret"), "{url}: {text}");
        eprintln!("{url} -> {text}");
    }
}
