//! The axum extractors and the actix-web middleware and extractors over real
//! HTTP, beyond what the flash-sale demo exercises.

use std::num::NonZeroU32;
use std::time::Duration;

use axum::Router;
use axum::extract::FromRef;
use axum::routing::get;
use http::StatusCode;
use lock_core::backend::MemoryBackend;
use lock_core::rate::{Algorithm, Policy, Quota, RateLimiter};
use lock_tests::http::{TestClient, TestServer};
use lock_tower::key::{ClientIp, GlobalKey, HeaderKey, HeadersRead, PathKey, PeerIp};
use lock_tower::{LockLayer, RateLimitLayer};

fn per_minute(scope: &str, limit: u32) -> RateLimiter<MemoryBackend> {
    let quota = Quota::per_minute(NonZeroU32::new(limit).expect("positive"));
    RateLimiter::new(
        MemoryBackend::new(),
        scope,
        Policy::new(Algorithm::FixedWindow).quota(quota),
    )
    .expect("valid")
}

fn two_per_minute(scope: &str) -> RateLimitLayer<MemoryBackend, GlobalKey> {
    RateLimitLayer::new(per_minute(scope, 2), GlobalKey::new())
}

#[derive(Clone)]
struct State {
    decide: lock_axum::RouteRateLimit,
}

impl FromRef<State> for lock_axum::RouteRateLimit {
    fn from_ref(state: &State) -> Self {
        state.decide.clone()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn axum_rate_extractors() {
    async fn decide(decision: lock_axum::RateDecision) -> axum::response::Response {
        let text = if decision.allowed() {
            "go"
        } else {
            "handler says no"
        };
        decision.with_headers(text)
    }
    async fn limited(_ok: lock_axum::RateLimited) -> &'static str {
        "go"
    }
    let decide_app = Router::new().route("/", get(decide)).with_state(State {
        decide: lock_axum::RouteRateLimit::new(two_per_minute("decide")),
    });
    let limited_app = Router::new().route("/", get(limited)).with_state(State {
        decide: lock_axum::RouteRateLimit::new(two_per_minute("limited")),
    });
    let (decide_server, limited_server) = (
        TestServer::start(decide_app).await,
        TestServer::start(limited_app).await,
    );
    let client = TestClient::new();
    let mut bodies = Vec::new();
    for _ in 0..3 {
        let reply = client.get(&decide_server.url("/"), &[]).await;
        assert_eq!(
            reply.status,
            StatusCode::OK,
            "RateDecision never rejects on the limit"
        );
        assert!(reply.header("ratelimit").starts_with("\"default\";r="));
        bodies.push(String::from_utf8_lossy(&reply.body).into_owned());
    }
    assert_eq!(bodies, ["go", "go", "handler says no"]);
    let statuses: Vec<StatusCode> = {
        let mut v = Vec::new();
        for _ in 0..3 {
            v.push(client.get(&limited_server.url("/"), &[]).await.status);
        }
        v
    };
    assert_eq!(
        statuses,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actix_key_lock_middleware_and_rate_decision() {
    use actix_web::{HttpResponse, web};
    let lock = lock_actix::LockMiddleware::new(
        LockLayer::new(MemoryBackend::new(), PathKey).wait(Duration::ZERO),
    );
    let addr = lock_tests::http::actix(move || {
        actix_web::App::new().wrap(lock.clone()).route(
            "/slow",
            web::get().to(|| async {
                tokio::time::sleep(Duration::from_millis(400)).await;
                HttpResponse::Ok().body("done")
            }),
        )
    });
    let client = TestClient::new();
    let url = format!("http://{addr}/slow");
    let first = {
        let (client, url) = (client.clone(), url.clone());
        tokio::spawn(async move { client.get(&url, &[]).await.status })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(client.get(&url, &[]).await.status, StatusCode::LOCKED);
    assert_eq!(first.await.expect("join"), StatusCode::OK);

    let decide = lock_actix::RouteRateLimit::new(two_per_minute("actix-decide"));
    let addr = lock_tests::http::actix(move || {
        actix_web::App::new().app_data(decide.clone()).route(
            "/",
            web::get().to(|decision: lock_actix::RateDecision| async move {
                let text = if decision.allowed() {
                    "go"
                } else {
                    "handler says no"
                };
                decision.with_headers(HttpResponse::Ok().body(text))
            }),
        )
    });
    let mut bodies = Vec::new();
    for _ in 0..3 {
        let reply = client.get(&format!("http://{addr}/"), &[]).await;
        assert_eq!(reply.status, StatusCode::OK);
        assert!(reply.header("ratelimit").starts_with("\"default\";r="));
        bodies.push(String::from_utf8_lossy(&reply.body).into_owned());
    }
    assert_eq!(bodies, ["go", "go", "handler says no"]);
}

/// actix-web requests are copied into `http` types for the key extractors,
/// with only the header fields the extractor or a cost function reads: keys
/// and costs taken from headers must still see them, repeated fields
/// included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actix_keys_and_costs_still_see_the_headers_they_read() {
    use actix_web::{HttpResponse, web};
    let by_header = RateLimitLayer::new(
        per_minute("by-header", 2),
        HeaderKey::new(http::HeaderName::from_static("x-user")),
    );
    let by_peer = RateLimitLayer::new(per_minute("by-peer", 5), PeerIp::new());
    let costed = by_peer.clone().cost(|request| {
        request
            .headers
            .get("x-cost")
            .and_then(|v| v.to_str().ok()?.parse().ok())
            .unwrap_or(1)
    });
    let behind_proxy = RateLimitLayer::new(
        per_minute("behind-proxy", 2),
        ClientIp::new(["127.0.0.0/8".parse().expect("a network")]),
    );
    let x_user = [http::HeaderName::from_static("x-user")];
    assert_eq!(by_header.headers_read(), HeadersRead::Only(&x_user));
    assert_eq!(by_peer.headers_read(), HeadersRead::None);
    assert_eq!(costed.headers_read(), HeadersRead::All);
    let x_forwarded_for = [http::HeaderName::from_static("x-forwarded-for")];
    assert_eq!(
        behind_proxy.headers_read(),
        HeadersRead::Only(&x_forwarded_for)
    );
    let path_lock = LockLayer::new(MemoryBackend::new(), PathKey);
    assert_eq!(path_lock.headers_read(), HeadersRead::None);

    let (by_header, costed, behind_proxy) = (
        lock_actix::RateLimitMiddleware::new(by_header),
        lock_actix::RateLimitMiddleware::new(costed),
        lock_actix::RateLimitMiddleware::new(behind_proxy),
    );
    let addr = lock_tests::http::actix(move || {
        let ok = || web::get().to(|| async { HttpResponse::Ok().body("ok") });
        actix_web::App::new()
            .service(web::scope("/user").wrap(by_header.clone()).route("", ok()))
            .service(web::scope("/cost").wrap(costed.clone()).route("", ok()))
            .service(
                web::scope("/proxied")
                    .wrap(behind_proxy.clone())
                    .route("", ok()),
            )
    });
    let client = TestClient::new();
    let user = format!("http://{addr}/user");
    let mut statuses = Vec::new();
    for who in ["a", "a", "a", "b"] {
        let reply = client.get(&user, &[("x-user", who)]).await;
        // Every response carries its own layer's policy, the same each time
        // (the middleware converts it once and reuses it).
        assert_eq!(reply.header("ratelimit-policy"), "\"default\";q=2;w=60");
        statuses.push(reply.status);
    }
    let (ok, limited) = (StatusCode::OK, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(statuses, [ok, ok, limited, ok]);

    let cost = format!("http://{addr}/cost");
    let reply = client.get(&cost, &[("x-cost", "5")]).await;
    assert_eq!(reply.status, ok);
    assert!(reply.header("ratelimit").contains(";r=0"), "{reply:?}");
    assert_eq!(reply.header("ratelimit-policy"), "\"default\";q=5;w=60");
    assert_eq!(client.get(&cost, &[("x-cost", "1")]).await.status, limited);

    // Behind a trusted proxy (the loopback peer) the client is the last
    // untrusted hop, read from the right across repeated fields; other
    // fields the request carries are not needed.
    let proxied = format!("http://{addr}/proxied");
    let mut statuses = Vec::new();
    for hops in [
        &[("x-forwarded-for", "203.0.113.7")][..],
        &[
            ("x-forwarded-for", "198.51.100.1, 203.0.113.7"),
            ("cookie", "a=b"),
        ],
        &[
            ("x-forwarded-for", "198.51.100.1"),
            ("x-forwarded-for", "203.0.113.7"),
        ],
        &[
            ("x-forwarded-for", "203.0.113.7"),
            ("x-forwarded-for", "198.51.100.1"),
        ],
    ] {
        statuses.push(client.get(&proxied, hops).await.status);
    }
    assert_eq!(statuses, [ok, ok, limited, ok]);
}

/// The `Locked` and `RateLimited` extractors record the route and the
/// client's address themselves, on axum (with lock-tower's own layers
/// behind their configuration) as on actix-web: a lock keyed by a path parameter holds per id, and a
/// rate limit keyed by the peer address counts per client, through
/// lock-tower's neutral extensions on both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extractors_key_by_path_parameter_and_peer_on_both() {
    use lock_tower::key::PathParam;

    #[derive(Clone)]
    struct Keyed {
        lock: lock_axum::RouteLock,
        limit: lock_axum::RouteRateLimit,
    }
    impl FromRef<Keyed> for lock_axum::RouteLock {
        fn from_ref(state: &Keyed) -> Self {
            state.lock.clone()
        }
    }
    impl FromRef<Keyed> for lock_axum::RouteRateLimit {
        fn from_ref(state: &Keyed) -> Self {
            state.limit.clone()
        }
    }
    let slow = || Duration::from_millis(400);
    let lock = || {
        let layer = LockLayer::new(MemoryBackend::new(), PathParam::new("id"));
        lock_axum::RouteLock::new(layer.wait(Duration::ZERO))
    };
    let limit = |scope: &str| {
        lock_axum::RouteRateLimit::new(RateLimitLayer::new(per_minute(scope, 2), PeerIp::new()))
    };
    async fn pay(locked: lock_axum::Locked) -> String {
        tokio::time::sleep(Duration::from_millis(400)).await;
        format!("held={}", locked.held().is_some())
    }
    async fn hello(_ok: lock_axum::RateLimited) -> &'static str {
        "hello"
    }
    let app = Router::new()
        .route("/orders/{id}/pay", get(pay))
        .route("/hello", get(hello))
        .with_state(Keyed {
            lock: lock(),
            limit: limit("axum-extract-peer"),
        });
    let axum = TestServer::start(app).await;

    let (actix_lock, actix_limit) = (lock(), limit("actix-extract-peer"));
    let actix = lock_tests::http::actix(move || {
        use actix_web::web;
        actix_web::App::new()
            .app_data(actix_lock.clone())
            .app_data(actix_limit.clone())
            .route(
                "/orders/{id}/pay",
                web::get().to(move |locked: lock_actix::Locked| async move {
                    tokio::time::sleep(slow()).await;
                    format!("held={}", locked.held().is_some())
                }),
            )
            .route(
                "/hello",
                web::get().to(|_ok: lock_actix::RateLimited| async { "hello" }),
            )
    });

    let client = TestClient::new();
    for base in [axum.url(""), format!("http://{actix}")] {
        let first = {
            let (client, url) = (client.clone(), format!("{base}/orders/1/pay"));
            tokio::spawn(async move { client.get(&url, &[]).await })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        let same = client.get(&format!("{base}/orders/1/pay"), &[]).await;
        assert_eq!(same.status, StatusCode::LOCKED, "{base}: {:?}", same.text());
        let other = client.get(&format!("{base}/orders/2/pay"), &[]).await;
        assert_eq!(other.status, StatusCode::OK, "{base}: {:?}", other.text());
        assert_eq!(other.text(), "held=true");
        let first = first.await.expect("join");
        assert_eq!(first.status, StatusCode::OK, "{base}: {:?}", first.text());

        let mut statuses = Vec::new();
        for _ in 0..3 {
            statuses.push(client.get(&format!("{base}/hello"), &[]).await.status);
        }
        assert_eq!(
            statuses,
            [
                StatusCode::OK,
                StatusCode::OK,
                StatusCode::TOO_MANY_REQUESTS
            ],
            "{base}: two a minute per client address"
        );
    }
}

/// One HTTP/1.1 request from the local address `from` (any of 127/8) to
/// `server`, on a connection of its own: the response's status.
async fn status_from(from: [u8; 4], server: std::net::SocketAddr, method: &str, path: &str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.bind((from, 0).into()).expect("bind the client");
    let mut stream = socket.connect(server).await.expect("connect");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nhost: {server}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut response = String::new();
    stream.read_to_string(&mut response).await.expect("read");
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok());
    status.unwrap_or_else(|| panic!("not a response: {response:?}"))
}

/// The README's first service as an axum app writes it from lock-axum's
/// prelude, and nothing more: a `RateLimitLayer` keyed by `PeerIp` on the
/// router, a `LockLayer` keyed by `PathParam` on the route that has
/// `{id}`, served with connect info, on Redis. Over real HTTP from two
/// client addresses, the lock holds per job id and the rate limit counts
/// per address (no request answers 500).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_axum_service_keys_by_peer_and_path_parameter() {
    use std::net::SocketAddr;

    use axum::routing::post;
    use lock_axum::prelude::*;

    let (_redis, backend) = lock_tests::redis_backend().await;
    let five = Quota::per_minute(NonZeroU32::new(5).expect("positive"));
    let policy = Policy::new(Algorithm::Gcra).quota(five);
    let limiter = RateLimiter::new(backend.clone(), "readme-api", policy).expect("valid");
    let per_ip = RateLimitLayer::new(limiter, PeerIp::new()).exempt_paths(["/health"]);
    // A zero wait, so that a busy job is refused (423) rather than waited for.
    let per_job = LockLayer::new(backend, PathParam::new("id"))
        .scope("readme-job")
        .wait(Duration::ZERO);
    let run = || async {
        tokio::time::sleep(Duration::from_millis(400)).await;
        "done"
    };
    let app = Router::new()
        .route("/jobs/{id}/run", post(run).layer(per_job))
        .route("/health", get(|| async { "ok" }))
        .layer(per_ip);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let server = listener.local_addr().expect("address");
    let serving = tokio::spawn(async move {
        let app = app.into_make_service_with_connect_info::<SocketAddr>();
        axum::serve(listener, app).await.expect("serve");
    });

    let (one, two) = ([127, 0, 0, 1], [127, 0, 0, 2]);
    let first = tokio::spawn(status_from(one, server, "POST", "/jobs/1/run"));
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Job 1 is running: the same id is refused, another id runs.
    assert_eq!(status_from(one, server, "POST", "/jobs/1/run").await, 423);
    assert_eq!(status_from(one, server, "POST", "/jobs/2/run").await, 200);
    assert_eq!(first.await.expect("join"), 200);
    // Five a minute from 127.0.0.1 (the three above count), then 429.
    assert_eq!(status_from(one, server, "POST", "/jobs/3/run").await, 200);
    assert_eq!(status_from(one, server, "POST", "/jobs/4/run").await, 200);
    assert_eq!(status_from(one, server, "POST", "/jobs/5/run").await, 429);
    assert_eq!(status_from(one, server, "GET", "/health").await, 200);
    // Another address has its own five.
    assert_eq!(status_from(two, server, "POST", "/jobs/5/run").await, 200);
    serving.abort();
}

/// A request whose cost (here read from the client's `x-cost` field) is
/// more than the policy ever allows at once is the client's to fix: a 400
/// that says why, on axum and actix-web alike, counting nothing against
/// the caller.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_costing_more_than_the_quota_is_a_400_saying_why() {
    use actix_web::{HttpResponse, web};
    let costed = |scope: &str| {
        RateLimitLayer::new(per_minute(scope, 5), GlobalKey::new()).cost(|request| {
            request
                .headers
                .get("x-cost")
                .and_then(|v| v.to_str().ok()?.parse().ok())
                .unwrap_or(1)
        })
    };
    let axum_app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(costed("costed-axum"));
    let axum = TestServer::start(axum_app).await;
    let actix = lock_actix::RateLimitMiddleware::new(costed("costed-actix"));
    let actix = lock_tests::http::actix(move || {
        actix_web::App::new().service(web::scope("").wrap(actix.clone()).route(
            "/",
            web::get().to(|| async { HttpResponse::Ok().body("ok") }),
        ))
    });
    let client = TestClient::new();
    for url in [axum.url("/"), format!("http://{actix}/")] {
        for cost in ["6", "4294967295"] {
            let reply = client.get(&url, &[("x-cost", cost)]).await;
            assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{url}: {reply:?}");
            let text = reply.text();
            assert!(
                text.contains(&format!("costs {cost}")) && text.contains("(5)"),
                "{url}: {text:?}"
            );
        }
        // Nothing was counted: the whole quota is there.
        let reply = client.get(&url, &[("x-cost", "5")]).await;
        assert_eq!(reply.status, StatusCode::OK, "{url}: {reply:?}");
        let reply = client.get(&url, &[("x-cost", "1")]).await;
        assert_eq!(
            reply.status,
            StatusCode::TOO_MANY_REQUESTS,
            "{url}: {reply:?}"
        );
    }
}
