//! With lock-tower's `metrics` feature, each layer's decisions and its
//! locks' wait and hold times reach the application's `metrics` recorder,
//! labelled by layer, scope and outcome.

use std::num::NonZeroU32;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use http::StatusCode;
use lock_axum::backend::MemoryBackend;
use lock_axum::key::{GlobalKey, HeaderKey};
use lock_axum::rate::{Algorithm, Policy, Quota, RateLimiter};
use lock_axum::{LockLayer, RateLimitLayer};
use lock_tests::http::{TestClient, TestServer};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

/// The value of the metric `name` whose labels include all of `labels`.
fn value(
    snapshot: &[(metrics_util::CompositeKey, DebugValue)],
    name: &str,
    labels: &[(&str, &str)],
) -> Option<String> {
    snapshot.iter().find_map(|(key, value)| {
        let key = key.key();
        let matches = key.name() == name
            && labels.iter().all(|(k, v)| {
                key.labels()
                    .any(|label| label.key() == *k && label.value() == *v)
            });
        matches.then(|| match value {
            DebugValue::Counter(n) => n.to_string(),
            DebugValue::Histogram(values) => format!("{} samples", values.len()),
            DebugValue::Gauge(g) => g.to_string(),
        })
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_and_lock_times_are_exported() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this test binary");

    let backend = MemoryBackend::new();
    let quota = Quota::per_minute(NonZeroU32::new(2).expect("2"));
    let limiter = RateLimiter::new(
        backend.clone(),
        "api",
        Policy::new(Algorithm::FixedWindow).quota(quota),
    )
    .expect("valid");
    let user = http::HeaderName::from_static("x-user");
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(LockLayer::new(backend, GlobalKey::new()).scope("orders"))
        .layer(RateLimitLayer::new(limiter, HeaderKey::new(user)));
    let server = TestServer::start(app).await;
    let client = TestClient::new();
    let mut statuses = Vec::new();
    for headers in [
        &[("x-user", "a")][..],
        &[("x-user", "a")],
        &[("x-user", "a")],
        &[],
    ] {
        statuses.push(client.get(&server.url("/"), headers).await.status);
    }
    assert_eq!(
        statuses,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS,
            StatusCode::BAD_REQUEST
        ]
    );
    // Holds are recorded as the locks go, just after the responses.
    tokio::time::sleep(Duration::from_millis(100)).await;

    let snapshot: Vec<_> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| (key, value))
        .collect();
    let requests = |layer, scope, outcome| {
        value(
            &snapshot,
            "lock_tower_requests_total",
            &[("layer", layer), ("scope", scope), ("outcome", outcome)],
        )
    };
    assert_eq!(
        requests("rate_limit", "api", "allowed").as_deref(),
        Some("2")
    );
    assert_eq!(
        requests("rate_limit", "api", "refused").as_deref(),
        Some("1")
    );
    assert_eq!(
        requests("rate_limit", "api", "missing_key").as_deref(),
        Some("1")
    );
    assert_eq!(requests("lock", "orders", "allowed").as_deref(), Some("2"));
    let lock = [("layer", "lock"), ("scope", "orders")];
    assert_eq!(
        value(&snapshot, "lock_tower_lock_wait_seconds", &lock).as_deref(),
        Some("2 samples")
    );
    assert_eq!(
        value(&snapshot, "lock_tower_lock_held_seconds", &lock).as_deref(),
        Some("2 samples")
    );
}
