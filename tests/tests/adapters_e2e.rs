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
