//! A server started without what its keys need (axum served without
//! connect info) answers 500 and logs, once, at `warn`, how to fix it;
//! a request that lacks its key is the client's 400 and logs nothing. And
//! lock acquisitions and rate checks run in `tracing` spans.

use std::net::SocketAddr;
use std::num::NonZeroU32;

use axum::Router;
use axum::routing::get;
use http::StatusCode;
use lock_axum::RateLimitLayer;
use lock_axum::backend::MemoryBackend;
use lock_axum::key::{HeaderKey, PeerIp};
use lock_axum::rate::{Algorithm, Policy, Quota, RateLimiter};
use lock_tests::http::TestClient;
use lock_tests::logs::Logged;

fn limiter(scope: &str) -> RateLimiter<MemoryBackend> {
    let quota = Quota::per_minute(NonZeroU32::new(100).expect("positive"));
    RateLimiter::new(
        MemoryBackend::new(),
        scope,
        Policy::new(Algorithm::Gcra).quota(quota),
    )
    .expect("valid")
}

/// Serves `app` the way a newcomer might: without connect info.
async fn serve_plainly(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serving_without_connect_info_is_logged_once_with_the_fix() {
    let logged = Logged::default();
    logged
        .subscriber()
        .with_max_level(tracing::Level::DEBUG)
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
        .init();

    let by_peer = RateLimitLayer::new(limiter("peer"), PeerIp::new());
    let addr = serve_plainly(
        Router::new()
            .route("/", get(|| async { "ok" }))
            .layer(by_peer),
    )
    .await;
    let client = TestClient::new();
    for _ in 0..3 {
        let reply = client.get(&format!("http://{addr}/"), &[]).await;
        assert_eq!(reply.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(reply.text().contains("misconfigured"), "{:?}", reply.text());
    }
    let text = logged.text();
    assert_eq!(text.matches("WARN").count(), 1, "logged once: {text}");
    assert!(
        text.contains("into_make_service_with_connect_info::<SocketAddr>()"),
        "the fix is in the log: {text}"
    );

    // A request without the header its key comes from: 400, not logged.
    let user = http::HeaderName::from_static("x-user-id");
    let by_user = RateLimitLayer::new(limiter("user"), HeaderKey::new(user.clone()));
    let addr = serve_plainly(
        Router::new()
            .route("/", get(|| async { "ok" }))
            .layer(by_user),
    )
    .await;
    let reply = client.get(&format!("http://{addr}/"), &[]).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert!(reply.text().contains("x-user-id"), "{:?}", reply.text());
    let ok = client
        .get(&format!("http://{addr}/"), &[("x-user-id", "ann")])
        .await;
    assert_eq!(ok.status, StatusCode::OK);
    assert_eq!(
        logged.text().matches("WARN").count(),
        1,
        "{}",
        logged.text()
    );

    // A request costing more than the quota ever allows: the client's 400,
    // and one warning in case the cost comes from the set-up.
    let costed = RateLimitLayer::new(limiter("costed"), HeaderKey::new(user)).cost(|request| {
        request
            .headers
            .get("x-cost")
            .and_then(|v| v.to_str().ok()?.parse().ok())
            .unwrap_or(1)
    });
    let addr = serve_plainly(
        Router::new()
            .route("/", get(|| async { "ok" }))
            .layer(costed),
    )
    .await;
    for _ in 0..3 {
        let reply = client
            .get(
                &format!("http://{addr}/"),
                &[("x-user-id", "ann"), ("x-cost", "101")],
            )
            .await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{reply:?}");
    }
    let text = logged.text();
    assert_eq!(text.matches("WARN").count(), 2, "logged once: {text}");
    assert!(
        text.contains("raise the smallest quota's limit or burst"),
        "the fix is in the log: {text}"
    );
}
