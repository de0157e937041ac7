//! lock-tower layers over real HTTP (axum on 127.0.0.1:0, a hyper client),
//! on the in-memory backend and on a real redis-server.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use http::StatusCode;
use lock_core::backend::MemoryBackend;
use lock_core::lock::{LockBackend, LockOptions};
use lock_core::rate::{Algorithm, Policy, Quota, RateBackend, RateLimiter};
use lock_tests::http::{TestClient, TestServer};
use lock_tests::within;
use lock_tower::key::{ClientIp, HeaderKey, PathKey, PeerIp};
// The layers as an axum app has them: lock-axum's read axum's records.
use lock_axum::{ConcurrencyLimitLayer, LockLayer, RateLimitLayer};
use lock_tower::MissingKey;

fn limiter<B: RateBackend>(backend: B, scope: &str, limit: u32) -> RateLimiter<B> {
    let quota = Quota::per_minute(NonZeroU32::new(limit).unwrap_or(NonZeroU32::MIN));
    RateLimiter::new(
        backend,
        scope,
        Policy::new(Algorithm::FixedWindow).quota(quota),
    )
    .expect("valid policy")
}

async fn limits_exactly_with_headers<B: RateBackend>(backend: B) {
    let layer =
        RateLimitLayer::new(limiter(backend, "exact", 5), PeerIp::new()).legacy_headers(true);
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer);
    let server = TestServer::start(app).await;
    let client = TestClient::new();
    for remaining in (0..5).rev() {
        let reply = client.get(&server.url("/"), &[]).await;
        assert_eq!(reply.status, StatusCode::OK);
        let ratelimit = reply.header("ratelimit");
        assert!(
            ratelimit.starts_with(&format!("\"default\";r={remaining};t=")),
            "RateLimit: {ratelimit}"
        );
        assert_eq!(reply.header("ratelimit-policy"), "\"default\";q=5;w=60");
        assert_eq!(reply.header("x-ratelimit-limit"), "5");
        assert_eq!(reply.header("x-ratelimit-remaining"), remaining.to_string());
        assert_eq!(reply.header("retry-after"), "");
    }
    let refused = client.get(&server.url("/"), &[]).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = refused
        .header("retry-after")
        .parse()
        .expect("Retry-After seconds");
    assert!((1..=60).contains(&retry), "Retry-After {retry}");
    assert!(
        refused
            .header("ratelimit")
            .starts_with("\"default\";r=0;t=")
    );

    // Under concurrency, exactly the limit gets through.
    let layer = RateLimitLayer::new(limiter(MemoryBackend::new(), "burst", 7), PeerIp::new());
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer);
    let server = TestServer::start(app).await;
    let url = server.url("/");
    let replies = futures_util::future::join_all((0..40).map(|_| client.get(&url, &[]))).await;
    let ok = replies
        .iter()
        .filter(|r| r.status == StatusCode::OK)
        .count();
    assert_eq!(ok, 7);
}

/// A client's limit is one, whether it is reached through the layer (which
/// hands the memory backend the peer's address, or an IPv6 client's
/// network, as it is) or by a direct check of the key's text.
async fn layer_and_direct_checks_share_a_client_limit<B: RateBackend>(backend: B) {
    let limiter = self::limiter(backend.clone(), "shared", 3);
    let layer = RateLimitLayer::new(limiter.clone(), PeerIp::new());
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer);
    let server = TestServer::start(app).await;
    let client = TestClient::new();
    for _ in 0..2 {
        assert_eq!(
            client.get(&server.url("/"), &[]).await.status,
            StatusCode::OK
        );
    }
    let direct = limiter.check("127.0.0.1").await.expect("a decision");
    assert!(direct.allowed);
    assert_eq!(direct.remaining, 0, "the layer's two requests counted");
    let refused = client.get(&server.url("/"), &[]).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(
        !limiter
            .check("127.0.0.1")
            .await
            .expect("a decision")
            .allowed
    );
    // Another text of the same address is another key.
    assert!(
        limiter
            .check("127.000.0.1")
            .await
            .expect("a decision")
            .allowed
    );

    // The same for an IPv6 client behind a trusted proxy, whose key is its
    // /64 network (handed to the memory backend as the network).
    let limiter = self::limiter(backend, "shared-v6", 3);
    let trusted = ClientIp::new(["127.0.0.1/32".parse().expect("cidr")]);
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(RateLimitLayer::new(limiter.clone(), trusted));
    let server = TestServer::start(app).await;
    let get = |xff: &'static str| {
        let (client, url) = (client.clone(), server.url("/"));
        async move { client.get(&url, &[("x-forwarded-for", xff)]).await.status }
    };
    assert_eq!(get("2001:db8:1:2::1").await, StatusCode::OK);
    assert_eq!(get("2001:db8:1:2:ffff::9").await, StatusCode::OK);
    let direct = limiter
        .check("2001:db8:1:2::/64")
        .await
        .expect("a decision");
    assert!(direct.allowed);
    assert_eq!(direct.remaining, 0, "the layer's two requests counted");
    assert_eq!(get("2001:db8:1:2::7").await, StatusCode::TOO_MANY_REQUESTS);
    let other_text = limiter
        .check("2001:db8:1:2:0::/64")
        .await
        .expect("a decision");
    assert!(
        other_text.allowed,
        "another text of the network is another key"
    );
}

/// With fields on refusals only, an allowed response carries none and a
/// refusal all of them: by fixed window, and by GCRA, which the memory
/// backend decides on its short path (no decision built when allowed).
async fn headers_can_be_kept_to_refusals<B: RateBackend>(backend: B) {
    for algorithm in [Algorithm::FixedWindow, Algorithm::Gcra] {
        let quota = Quota::per_minute(NonZeroU32::new(2).unwrap_or(NonZeroU32::MIN));
        let scope = format!("quiet-{algorithm:?}");
        let limiter = RateLimiter::new(backend.clone(), scope, Policy::new(algorithm).quota(quota))
            .expect("valid policy");
        fields_only_on_refusals(limiter, algorithm).await;
    }
}

async fn fields_only_on_refusals<B: RateBackend>(limiter: RateLimiter<B>, algorithm: Algorithm) {
    let layer = RateLimitLayer::new(limiter, PeerIp::new())
        .legacy_headers(true)
        .headers_on_success(false);
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer);
    let server = TestServer::start(app).await;
    let client = TestClient::new();
    for _ in 0..2 {
        let reply = client.get(&server.url("/"), &[]).await;
        assert_eq!(reply.status, StatusCode::OK, "{algorithm:?}");
        for name in [
            "ratelimit",
            "ratelimit-policy",
            "x-ratelimit-limit",
            "retry-after",
        ] {
            assert_eq!(
                reply.header(name),
                "",
                "{name} on an allowed response ({algorithm:?})"
            );
        }
    }
    let refused = client.get(&server.url("/"), &[]).await;
    assert_eq!(
        refused.status,
        StatusCode::TOO_MANY_REQUESTS,
        "{algorithm:?}"
    );
    assert!(
        refused
            .header("ratelimit")
            .starts_with("\"default\";r=0;t=")
    );
    assert_eq!(refused.header("ratelimit-policy"), "\"default\";q=2;w=60");
    assert_eq!(refused.header("x-ratelimit-remaining"), "0");
    assert!(!refused.header("retry-after").is_empty());
}

async fn spoofed_forwarded_for_does_not_change_the_key<B: RateBackend>(backend: B) {
    // The peer (127.0.0.1) is not a trusted proxy: its header is ignored.
    let untrusted = ClientIp::new(["10.0.0.0/8".parse().expect("cidr")]);
    let layer = RateLimitLayer::new(limiter(backend.clone(), "spoof", 3), untrusted);
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer);
    let server = TestServer::start(app).await;
    let client = TestClient::new();
    let mut statuses = Vec::new();
    for i in 0..6 {
        let spoof = format!("198.51.100.{i}");
        let reply = client
            .get(&server.url("/"), &[("x-forwarded-for", spoof.as_str())])
            .await;
        statuses.push(reply.status);
    }
    assert_eq!(
        statuses.iter().filter(|s| **s == StatusCode::OK).count(),
        3,
        "{statuses:?}"
    );

    // Behind a trusted proxy, the forwarded client is the key.
    let trusted = ClientIp::new(["127.0.0.1/32".parse().expect("cidr")]);
    let layer = RateLimitLayer::new(limiter(backend, "proxied", 1), trusted);
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer);
    let server = TestServer::start(app).await;
    let get = |xff: &'static str| {
        let (client, url) = (client.clone(), server.url("/"));
        async move { client.get(&url, &[("x-forwarded-for", xff)]).await.status }
    };
    assert_eq!(get("198.51.100.1").await, StatusCode::OK);
    assert_eq!(get("198.51.100.2").await, StatusCode::OK);
    assert_eq!(get("198.51.100.1").await, StatusCode::TOO_MANY_REQUESTS);
    // IPv6 addresses in one /64 share a bucket; another /64 does not.
    assert_eq!(get("2001:db8:1:2::1").await, StatusCode::OK);
    assert_eq!(
        get("2001:db8:1:2:ffff::9").await,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(get("2001:db8:1:3::1").await, StatusCode::OK);
}

/// Per-key in-flight counters, recording the most seen at once.
#[derive(Default)]
struct Overlap {
    per_key: std::sync::Mutex<std::collections::HashMap<String, usize>>,
    most_per_key: AtomicUsize,
    total: AtomicUsize,
    most_total: AtomicUsize,
}

impl Overlap {
    async fn visit(&self, key: &str, hold: Duration) {
        {
            let mut map = self.per_key.lock().unwrap_or_else(|e| e.into_inner());
            let n = map.entry(key.to_owned()).or_default();
            *n += 1;
            self.most_per_key.fetch_max(*n, Ordering::SeqCst);
        }
        let total = self.total.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_total.fetch_max(total, Ordering::SeqCst);
        tokio::time::sleep(hold).await;
        self.total.fetch_sub(1, Ordering::SeqCst);
        let mut map = self.per_key.lock().unwrap_or_else(|e| e.into_inner());
        *map.entry(key.to_owned()).or_default() -= 1;
    }
}

fn overlap_app(overlap: Arc<Overlap>, hold: Duration) -> Router {
    Router::new().route(
        "/{key}",
        get(
            move |axum::extract::Path(key): axum::extract::Path<String>| {
                let overlap = overlap.clone();
                async move {
                    overlap.visit(&key, hold).await;
                    "done"
                }
            },
        ),
    )
}

async fn lock_serializes_one_key_and_not_others<B: LockBackend>(backend: B) {
    let overlap = Arc::new(Overlap::default());
    let layer = LockLayer::new(backend, PathKey).wait(Duration::from_secs(20));
    let app = overlap_app(overlap.clone(), Duration::from_millis(30)).layer(layer);
    let server = TestServer::start(app).await;
    let client = TestClient::new();
    let requests = (0..8).flat_map(|_| ["/a", "/b"]).map(|path| {
        let (client, url) = (client.clone(), server.url(path));
        async move { client.get(&url, &[]).await.status }
    });
    let statuses = futures_util::future::join_all(requests).await;
    assert!(
        statuses.iter().all(|s| *s == StatusCode::OK),
        "{statuses:?}"
    );
    assert_eq!(
        overlap.most_per_key.load(Ordering::SeqCst),
        1,
        "requests on one key overlapped"
    );
    assert_eq!(
        overlap.most_total.load(Ordering::SeqCst),
        2,
        "different keys did not run in parallel"
    );
}

/// With a fair lock and a wait, requests waiting for one key are served in
/// the order they arrived (on Redis each release hands the lock straight to
/// the next of them).
async fn a_fair_lock_serves_waiting_requests_in_arrival_order<B: LockBackend>(backend: B) {
    let served = Arc::new(std::sync::Mutex::new(Vec::new()));
    let options = LockOptions::new().lease(Duration::from_secs(10)).fair(true);
    let layer = LockLayer::new(backend, PathKey)
        .lock_options(options)
        .wait(Duration::from_secs(20));
    let app = Router::new()
        .route(
            "/k",
            get({
                let served = served.clone();
                move |headers: http::HeaderMap| {
                    let served = served.clone();
                    async move {
                        let id = headers.get("x-id").map(|v| v.as_bytes().to_vec());
                        served.lock().unwrap_or_else(|e| e.into_inner()).push(id);
                        tokio::time::sleep(Duration::from_millis(300)).await;
                        "done"
                    }
                }
            }),
        )
        .layer(layer);
    let server = TestServer::start(app).await;
    let client = TestClient::new();
    // Each request joins the line 150 ms after the one before (a margin for
    // a busy machine), behind requests that hold the key for 300 ms each.
    let ids = ["0", "1", "2", "3", "4"];
    let mut requests = Vec::new();
    for id in ids {
        let (client, url) = (client.clone(), server.url("/k"));
        requests.push(tokio::spawn(async move {
            client.get(&url, &[("x-id", id)]).await.status
        }));
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    for request in requests {
        assert_eq!(request.await.expect("join"), StatusCode::OK);
    }
    let served = served.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let expected: Vec<_> = ids.iter().map(|id| Some(id.as_bytes().to_vec())).collect();
    assert_eq!(served, expected, "not served in arrival order");
}

async fn busy_key_is_refused_or_times_out<B: LockBackend>(backend: B) {
    let overlap = Arc::new(Overlap::default());
    let refuse = LockLayer::new(backend.clone(), PathKey)
        .scope("refuse")
        .wait(Duration::ZERO);
    let app = overlap_app(overlap.clone(), Duration::from_millis(500)).layer(refuse);
    let server = TestServer::start(app).await;
    let client = TestClient::new();
    let first = {
        let (client, url) = (client.clone(), server.url("/k"));
        tokio::spawn(async move { client.get(&url, &[]).await.status })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        client.get(&server.url("/k"), &[]).await.status,
        StatusCode::LOCKED
    );
    assert_eq!(first.await.expect("join"), StatusCode::OK);

    let bounded = LockLayer::new(backend, PathKey)
        .scope("bounded")
        .wait(Duration::from_millis(200));
    let app = overlap_app(overlap, Duration::from_millis(1500)).layer(bounded);
    let server = TestServer::start(app).await;
    let first = {
        let (client, url) = (client.clone(), server.url("/k"));
        tokio::spawn(async move { client.get(&url, &[]).await.status })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let url = server.url("/k");
    let what = "a refusal after a 200 ms wait";
    let reply = within(Duration::from_secs(1), what, client.get(&url, &[])).await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(reply.header("retry-after"), "1");
    assert_eq!(first.await.expect("join"), StatusCode::OK);
}

async fn disconnecting_client_frees_the_lock<B: LockBackend>(backend: B) {
    let overlap = Arc::new(Overlap::default());
    let layer = LockLayer::new(backend, PathKey).wait(Duration::ZERO);
    let app = overlap_app(overlap.clone(), Duration::from_secs(20)).layer(layer);
    let server = TestServer::start(app).await;
    // A raw connection that sends a request and then goes away.
    let mut stream = tokio::net::TcpStream::connect(server.addr())
        .await
        .expect("connect");
    tokio::io::AsyncWriteExt::write_all(&mut stream, b"GET /gone HTTP/1.1\r\nhost: test\r\n\r\n")
        .await
        .expect("write");
    let client = TestClient::new();
    // Probe with a short timeout: a probe that finds the lock free would hold
    // it for 20 s, and is dropped (freeing it) instead.
    let probe = async || {
        let (client, url) = (client.clone(), server.url("/gone"));
        tokio::time::timeout(Duration::from_millis(300), async move {
            client.get(&url, &[]).await.status
        })
        .await
        .ok()
    };
    // The handler runs only under the lock.
    let inside = lock_tests::eventually(Duration::from_secs(5), async || {
        overlap.total.load(Ordering::SeqCst) == 1
    })
    .await;
    assert!(inside, "the first request never reached its handler");
    assert_eq!(probe().await, Some(StatusCode::LOCKED));
    drop(stream);
    let started = Instant::now();
    // A probe that is not refused at once got the lock (and holds it).
    let freed =
        lock_tests::eventually(Duration::from_secs(3), async || probe().await.is_none()).await;
    assert!(
        freed,
        "lock still held {:?} after the client left",
        started.elapsed()
    );
}

async fn concurrency_limit_never_admits_more<B: LockBackend>(backend: B) {
    let overlap = Arc::new(Overlap::default());
    let layer = ConcurrencyLimitLayer::new(backend, PathKey, NonZeroU32::new(3).expect("3"))
        .configure(|l| l.wait(Duration::from_secs(20)));
    let app = overlap_app(overlap.clone(), Duration::from_millis(50)).layer(layer);
    let server = TestServer::start(app).await;
    let client = TestClient::new();
    let url = server.url("/c");
    let replies = futures_util::future::join_all((0..15).map(|_| client.get(&url, &[]))).await;
    assert!(replies.iter().all(|r| r.status == StatusCode::OK));
    assert_eq!(overlap.most_per_key.load(Ordering::SeqCst), 3);
}

fn streaming_app() -> Router {
    Router::new().route(
        "/stream",
        get(|| async {
            // Three chunks, 150 ms apart: the body takes ~300 ms to send.
            let chunks = futures_util::stream::unfold(0u8, |i| async move {
                if i == 3 {
                    return None;
                }
                if i > 0 {
                    tokio::time::sleep(Duration::from_millis(150)).await;
                }
                Some((
                    Ok::<_, std::io::Error>(bytes::Bytes::from_static(b"chunk\n")),
                    i + 1,
                ))
            });
            axum::body::Body::from_stream(chunks)
        }),
    )
}

async fn lock_can_be_held_until_the_body_is_sent<B: LockBackend>(backend: B) {
    let client = TestClient::new();
    for hold in [true, false] {
        let layer = LockLayer::new(backend.clone(), PathKey)
            .scope(if hold { "hold" } else { "nohold" })
            .wait(Duration::ZERO)
            .hold_until_body_sent(hold);
        let server = TestServer::start(streaming_app().layer(layer)).await;
        let first = {
            let (client, url) = (client.clone(), server.url("/stream"));
            tokio::spawn(async move { client.get(&url, &[]).await })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        let during = client.get(&server.url("/stream"), &[]).await.status;
        let first = first.await.expect("join");
        assert_eq!(first.status, StatusCode::OK);
        assert_eq!(first.body.as_ref(), b"chunk\nchunk\nchunk\n");
        let expected = if hold {
            StatusCode::LOCKED
        } else {
            StatusCode::OK
        };
        assert_eq!(during, expected, "hold_until_body_sent({hold})");
    }
}

async fn handler_is_cancelled_when_the_lease_is_lost<B: LockBackend>(backend: B) {
    let layer = LockLayer::new(backend, PathKey)
        .lock_options(lock_core::lock::LockOptions::new().lease(Duration::from_millis(200)))
        .cancel_on_lease_loss(true);
    let finished = Arc::new(AtomicUsize::new(0));
    let done = finished.clone();
    let app = Router::new()
        .route(
            "/slow",
            get(move || {
                let done = done.clone();
                async move {
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    done.fetch_add(1, Ordering::SeqCst);
                    "finished"
                }
            }),
        )
        .layer(layer);
    let server = TestServer::start(app).await;
    let (client, url) = (TestClient::new(), server.url("/slow"));
    let what = "a handler cancelled at its lease loss";
    let reply = within(Duration::from_millis(1500), what, client.get(&url, &[])).await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        finished.load(Ordering::SeqCst),
        0,
        "the handler ran on without the lock"
    );
}

async fn sequential_requests_on_one_key_are_never_refused<B: LockBackend>(backend: B) {
    // The lock is released before the response goes out, so a client that
    // sends its next request at once finds the key free (wait 0: busy = 423).
    let layer = LockLayer::new(backend, PathKey).wait(Duration::ZERO);
    let app = Router::new()
        .route("/seq", get(|| async { "ok" }))
        .layer(layer);
    let server = TestServer::start(app).await;
    let client = TestClient::new();
    for i in 0..50 {
        let status = client.get(&server.url("/seq"), &[]).await.status;
        assert_eq!(status, StatusCode::OK, "request {i} found its own key busy");
    }
}

/// A request without a key, or with one that is not a valid name, gets the
/// layer's missing-key answer: by default 400 with the reason (the
/// client's mistake); one with a key is limited as usual.
async fn requests_without_a_key_follow_the_missing_key_policy<B: RateBackend>(backend: B) {
    let user = http::HeaderName::from_static("x-user");
    let strict = RateLimitLayer::new(
        limiter(backend.clone(), "strict", 5),
        HeaderKey::new(user.clone()),
    );
    let lenient = RateLimitLayer::new(limiter(backend, "lenient", 5), HeaderKey::new(user))
        .on_missing_key(MissingKey::PassThrough);
    let (strict_metrics, lenient_metrics) = (strict.metrics(), lenient.metrics());
    let app = |layer| {
        Router::new()
            .route("/", get(|| async { "ok" }))
            .layer(layer)
    };
    let strict = TestServer::start(app(strict)).await;
    let lenient = TestServer::start(app(lenient)).await;
    let client = TestClient::new();
    for (headers, reason) in [
        (&[][..], "the `x-user` header is missing"),
        (&[("x-user", "a{b}")][..], "must not contain `{` or `}`"),
    ] {
        let refused = client.get(&strict.url("/"), headers).await;
        assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{headers:?}");
        assert!(
            refused.text().contains(reason),
            "{headers:?}: {:?}",
            refused.text()
        );
        assert_eq!(refused.header("ratelimit"), "");
        let passed = client.get(&lenient.url("/"), headers).await;
        assert_eq!(passed.status, StatusCode::OK, "{headers:?}");
        assert_eq!(passed.header("ratelimit"), "", "no decision, no fields");
    }
    for server in [&strict, &lenient] {
        let keyed = client.get(&server.url("/"), &[("x-user", "u1")]).await;
        assert_eq!(keyed.status, StatusCode::OK);
        assert!(keyed.header("ratelimit").starts_with("\"default\";r=4;"));
    }
    for metrics in [strict_metrics, lenient_metrics] {
        assert_eq!(metrics.missing_keys(), 2);
        assert_eq!(metrics.allowed(), 1);
    }
}

macro_rules! on_both_backends {
    ($($case:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case(lock_core::backend::MemoryBackend::new()).await;
                }
            )*
        }
        mod redis {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let (_server, backend) = lock_tests::redis_backend().await;
                    super::$case(backend).await;
                }
            )*
        }
    };
}

on_both_backends!(
    limits_exactly_with_headers,
    layer_and_direct_checks_share_a_client_limit,
    headers_can_be_kept_to_refusals,
    requests_without_a_key_follow_the_missing_key_policy,
    spoofed_forwarded_for_does_not_change_the_key,
    lock_serializes_one_key_and_not_others,
    a_fair_lock_serves_waiting_requests_in_arrival_order,
    busy_key_is_refused_or_times_out,
    disconnecting_client_frees_the_lock,
    concurrency_limit_never_admits_more,
    lock_can_be_held_until_the_body_is_sent,
    handler_is_cancelled_when_the_lease_is_lost,
    sequential_requests_on_one_key_are_never_refused,
);
