//! lock-tower failure policies with Redis paused or stopped mid-run, over
//! real HTTP: each policy behaves as configured, no request waits past the
//! decision timeout (with a generous margin), and service recovers by itself.

use std::num::NonZeroU32;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use http::StatusCode;
use lock_core::backend::{RedisBackend, RedisConfig};
use lock_core::rate::{Algorithm, Policy, Quota, RateLimiter};
use lock_tests::RedisServer;
use lock_tests::http::{Reply, TestClient, TestServer};
use lock_tests::within;
use lock_tower::key::{GlobalKey, PathKey};
use lock_tower::{LockLayer, OnBackendFailure, RateLimitLayer};

const DECISION: Duration = Duration::from_millis(300);

async fn app(
    backend: &RedisBackend,
    scope: &str,
    policy: OnBackendFailure,
) -> (TestServer, std::sync::Arc<lock_tower::Metrics>) {
    let quota = Quota::per_minute(NonZeroU32::new(2).expect("2"));
    let limiter = RateLimiter::new(
        backend.clone(),
        scope,
        Policy::new(Algorithm::FixedWindow).quota(quota),
    )
    .expect("valid");
    let layer = RateLimitLayer::new(limiter, GlobalKey::new())
        .on_backend_failure(policy)
        .decision_timeout(DECISION);
    let metrics = layer.metrics();
    let router = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer);
    (TestServer::start(router).await, metrics)
}

async fn timed(client: &TestClient, server: &TestServer) -> Reply {
    let what = format!("a request (decision timeout {DECISION:?})");
    within(DECISION * 5, &what, client.get(&server.url("/"), &[])).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policies_hold_while_redis_is_down_and_service_recovers() {
    let mut server = RedisServer::start();
    let config = RedisConfig::default()
        .response_timeout(Duration::from_millis(200))
        .connect_timeout(Duration::from_millis(200));
    let backend = RedisBackend::connect_with(server.client(), config)
        .await
        .expect("connect");
    let (open, open_metrics) = app(&backend, "open", OnBackendFailure::FailOpen).await;
    let (closed, _) = app(&backend, "closed", OnBackendFailure::FailClosed).await;
    let (fallback, _) = app(&backend, "fallback", OnBackendFailure::Fallback).await;
    let client = TestClient::new();
    assert_eq!(timed(&client, &closed).await.status, StatusCode::OK);

    for outage in ["paused", "stopped"] {
        if outage == "paused" {
            server.pause();
        } else {
            server.stop();
        }
        for i in 0..3 {
            // After the first failure the layer stops asking for a while.
            // (A paused server costs the 200 ms response timeout a request.)
            let reply = if i == 0 {
                timed(&client, &open).await
            } else {
                let what = format!("{outage}: request {i}, with a backend known to be down");
                within(Duration::from_millis(100), &what, timed(&client, &open)).await
            };
            assert_eq!(reply.status, StatusCode::OK, "{outage}: fail open");
            assert_eq!(
                reply.header("ratelimit"),
                "",
                "{outage}: no decision, no headers"
            );
        }
        let reply = timed(&client, &closed).await;
        assert_eq!(
            reply.status,
            StatusCode::SERVICE_UNAVAILABLE,
            "{outage}: fail closed"
        );
        assert_eq!(reply.header("retry-after"), "1");
        // The local fallback limiter enforces 2 per minute on its own.
        let statuses: Vec<StatusCode> = {
            let mut v = Vec::new();
            for _ in 0..3 {
                v.push(timed(&client, &fallback).await.status);
            }
            v
        };
        if outage == "paused" {
            assert_eq!(
                statuses,
                [
                    StatusCode::OK,
                    StatusCode::OK,
                    StatusCode::TOO_MANY_REQUESTS
                ],
                "{outage}: fallback"
            );
        } else {
            assert!(
                statuses.iter().all(|s| *s == StatusCode::TOO_MANY_REQUESTS),
                "{statuses:?}"
            );
        }
        if outage == "paused" {
            server.resume();
        } else {
            server.restart();
        }
        let recovered = lock_tests::eventually(Duration::from_secs(15), async || {
            let reply = client.get(&closed.url("/"), &[]).await;
            reply.status != StatusCode::SERVICE_UNAVAILABLE && !reply.header("ratelimit").is_empty()
        })
        .await;
        assert!(
            recovered,
            "{outage}: the service did not recover once Redis was back"
        );
    }
    // Counted once per outage (and per interval the layer asks again in),
    // not once per request.
    let failures = open_metrics.backend_failures();
    assert!(
        (2..6).contains(&failures),
        "{failures} backend failures counted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_layer_policies_while_redis_is_paused() {
    let server = RedisServer::start();
    let config = RedisConfig::default().response_timeout(Duration::from_millis(200));
    let backend = RedisBackend::connect_with(server.client(), config)
        .await
        .expect("connect");
    let start = |policy| {
        let layer = LockLayer::new(backend.clone(), PathKey)
            .on_backend_failure(policy)
            .decision_timeout(DECISION);
        TestServer::start(
            Router::new()
                .route("/", get(|| async { "ok" }))
                .layer(layer),
        )
    };
    let open = start(OnBackendFailure::FailOpen).await;
    let closed = start(OnBackendFailure::FailClosed).await;
    let fallback = start(OnBackendFailure::Fallback).await;
    let client = TestClient::new();
    server.pause();
    assert_eq!(timed(&client, &open).await.status, StatusCode::OK);
    assert_eq!(
        timed(&client, &closed).await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert_eq!(timed(&client, &fallback).await.status, StatusCode::OK);
    server.resume();
    let recovered = lock_tests::eventually(Duration::from_secs(10), async || {
        client.get(&closed.url("/"), &[]).await.status == StatusCode::OK
    })
    .await;
    assert!(recovered);
}
