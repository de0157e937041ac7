//! The layers' defaults and the route-derived keys, over real HTTP: a busy
//! key waits, a lock's refusal carries no rate-limit fields, a rate limit
//! falls back to memory when Redis is down while a lock fails closed,
//! path-parameter keys survive `Router::nest` and work in actix-web
//! resources, and several lock configurations share one router.

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::FromRef;
use axum::routing::{get, post};
use http::StatusCode;
use lock_axum::backend::{MemoryBackend, RedisBackend, RedisConfig};
use lock_axum::key::{GlobalKey, HeaderKey, MatchedRoute, PathParam, PeerIp};
use lock_axum::lock::LockOptions;
use lock_axum::rate::{Algorithm, Policy, Quota, RateLimiter};
use lock_axum::{LockLayer, Locked, RateLimitLayer, RouteLock};
use lock_tests::RedisServer;
use lock_tests::http::{TestClient, TestServer};
use lock_tests::within;

fn per_minute<B: lock_axum::rate::RateBackend>(backend: B, scope: &str, n: u32) -> RateLimiter<B> {
    let quota = Quota::per_minute(NonZeroU32::new(n).expect("positive"));
    RateLimiter::new(
        backend,
        scope,
        Policy::new(Algorithm::FixedWindow).quota(quota),
    )
    .expect("valid")
}

/// A handler that takes `hold` to answer.
fn slow(hold: Duration) -> axum::routing::MethodRouter {
    get(move || async move {
        tokio::time::sleep(hold).await;
        "done"
    })
}

/// Two requests to `url`, the second while the first holds the lock: the
/// first carries the rate-limit fields, the lock's refusal of the second
/// carries none.
async fn a_lock_refusal_has_no_rate_fields(client: &TestClient, url: &str) {
    let (first, second) = tokio::join!(client.get(url, &[]), async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        client.get(url, &[]).await
    });
    assert_eq!(first.status, StatusCode::OK);
    assert!(first.header("ratelimit").starts_with("\"default\";r="));
    assert_eq!(second.status, StatusCode::LOCKED);
    assert_eq!(second.header("ratelimit"), "", "{second:?}");
    assert_eq!(second.header("ratelimit-policy"), "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_key_waits_by_default_and_is_served_after() {
    let layer = LockLayer::new(MemoryBackend::new(), GlobalKey::new());
    let server = TestServer::start(
        Router::new()
            .route("/", slow(Duration::from_millis(300)))
            .layer(layer),
    )
    .await;
    let client = TestClient::new();
    let url = server.url("/");
    let started = Instant::now();
    let (a, b) = tokio::join!(client.get(&url, &[]), client.get(&url, &[]));
    assert_eq!((a.status, b.status), (StatusCode::OK, StatusCode::OK));
    assert!(
        started.elapsed() >= Duration::from_millis(600),
        "served together in {:?}",
        started.elapsed()
    );
}

/// A lock's 423 (or 503) goes out as the lock layer made it, without the
/// `RateLimit` fields of a rate limit around it; allowed responses keep them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_refusal_carries_no_rate_limit_fields() {
    let backend = MemoryBackend::new();
    let lock = LockLayer::new(backend.clone(), GlobalKey::new()).wait(Duration::ZERO);
    let limit = RateLimitLayer::new(per_minute(backend, "outer", 100), PeerIp::new());
    let app = Router::new()
        .route("/", slow(Duration::from_millis(300)))
        .layer(lock)
        .layer(limit);
    let server = TestServer::start(app).await;
    let client = TestClient::new();
    a_lock_refusal_has_no_rate_fields(&client, &server.url("/")).await;

    // The same on actix-web.
    use actix_web::{HttpResponse, web};
    let backend = MemoryBackend::new();
    let lock = lock_actix::LockMiddleware::new(
        LockLayer::new(backend.clone(), GlobalKey::new()).wait(Duration::ZERO),
    );
    let limit = lock_actix::RateLimitMiddleware::new(RateLimitLayer::new(
        per_minute(backend, "outer", 100),
        PeerIp::new(),
    ));
    let addr = lock_tests::http::actix(move || {
        actix_web::App::new()
            .wrap(lock.clone())
            .wrap(limit.clone())
            .route(
                "/",
                web::get().to(|| async {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    HttpResponse::Ok().body("done")
                }),
            )
    });
    a_lock_refusal_has_no_rate_fields(&client, &format!("http://{addr}/")).await;
}

/// With Redis paused, a rate limit built with its defaults still decides
/// (in this process's memory, with the same policy), quickly after the
/// first failure; a lock built with its defaults refuses with 503; an
/// exempt path is never limited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limits_fall_back_and_locks_fail_closed_by_default() {
    let server = RedisServer::start();
    let config = RedisConfig::default().response_timeout(Duration::from_millis(200));
    let redis = RedisBackend::connect_with(server.client(), config)
        .await
        .expect("connect");
    let limit = RateLimitLayer::new(per_minute(redis.clone(), "fallback", 3), PeerIp::new())
        .exempt_paths(["/health"]);
    let lock = LockLayer::new(redis, GlobalKey::new());
    let app = Router::new()
        .route("/locked", get(|| async { "ok" }).layer(lock))
        .route("/", get(|| async { "ok" }))
        .route("/health", get(|| async { "ok" }))
        .layer(limit);
    let server_http = TestServer::start(app).await;
    let client = TestClient::new();
    assert_eq!(
        client.get(&server_http.url("/"), &[]).await.status,
        StatusCode::OK
    );
    server.pause();
    // The lock refuses; the rate limit around it decided locally (its first).
    let locked = client.get(&server_http.url("/locked"), &[]).await;
    assert_eq!(locked.status, StatusCode::SERVICE_UNAVAILABLE);
    let mut statuses = Vec::new();
    let url = server_http.url("/");
    for _ in 0..3 {
        let reply = within(Duration::from_secs(3), "a request", client.get(&url, &[])).await;
        statuses.push(reply.status);
    }
    // The local limiter starts afresh: 3 a minute of its own.
    assert_eq!(
        statuses,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );
    for _ in 0..5 {
        let health = client.get(&server_http.url("/health"), &[]).await;
        assert_eq!(health.status, StatusCode::OK);
        assert_eq!(health.header("ratelimit"), "");
    }
    server.resume();
}

/// Keys from the matched route under `Router::nest`: a path parameter
/// serializes one order and not another, the matched route is one key for
/// all orders; a layer around the whole router (before routing) answers
/// 500, and a path parameter that is not UTF-8 is the client's 400.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route_keys_survive_nesting() {
    let backend = MemoryBackend::new();
    let hold = Duration::from_millis(300);
    let by_order = LockLayer::new(backend.clone(), PathParam::new("id")).scope("order");
    let by_route = LockLayer::new(backend.clone(), MatchedRoute)
        .scope("route")
        .wait(Duration::ZERO);
    let orders = Router::new()
        .route("/orders/{id}/pay", slow(hold).layer(by_order))
        .route("/orders/{id}/ship", slow(hold).layer(by_route));
    let app = Router::new().nest("/api/v1", orders);
    let server = TestServer::start(app).await;
    let client = TestClient::new();
    let pay = |id: &str| server.url(&format!("/api/v1/orders/{id}/pay"));

    let started = Instant::now();
    let one = pay("1");
    let (a, b) = tokio::join!(client.get(&one, &[]), client.get(&one, &[]));
    assert_eq!((a.status, b.status), (StatusCode::OK, StatusCode::OK));
    let one_order = started.elapsed();
    assert!(
        one_order >= hold * 2,
        "one order, served together: {one_order:?}"
    );
    let (two, three) = (pay("2"), pay("3"));
    let both = async { tokio::join!(client.get(&two, &[]), client.get(&three, &[])) };
    let (a, b) = within(one_order, "two orders (waiting for each other?)", both).await;
    assert_eq!((a.status, b.status), (StatusCode::OK, StatusCode::OK));

    // One key for the route: the second order's shipping is refused.
    let ship = |id: &str| server.url(&format!("/api/v1/orders/{id}/ship"));
    let (four, five) = (ship("4"), ship("5"));
    let (a, b) = tokio::join!(client.get(&four, &[]), async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        client.get(&five, &[]).await
    });
    assert_eq!((a.status, b.status), (StatusCode::OK, StatusCode::LOCKED));

    let bad = client
        .send_bytes("GET", &server.url("/api/v1/orders/%FF%FE/pay"), &[])
        .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST, "{:?}", bad.text());
    assert!(bad.text().contains("not valid UTF-8"), "{:?}", bad.text());

    // Around the whole router nothing is matched yet: the server's fault.
    let outside = tower::ServiceBuilder::new()
        .layer(LockLayer::new(backend, PathParam::new("id")))
        .service(Router::new().route("/orders/{id}", get(|| async { "ok" })));
    let app = Router::new().fallback_service(outside);
    let server = TestServer::start(app).await;
    let reply = client.get(&server.url("/orders/1"), &[]).await;
    assert_eq!(reply.status, StatusCode::INTERNAL_SERVER_ERROR);
}

struct Orders;
struct Users;

#[derive(Clone)]
struct TwoLocks {
    orders: RouteLock<Orders>,
    users: RouteLock<Users>,
}

impl FromRef<TwoLocks> for RouteLock<Orders> {
    fn from_ref(state: &TwoLocks) -> Self {
        state.orders.clone()
    }
}

impl FromRef<TwoLocks> for RouteLock<Users> {
    fn from_ref(state: &TwoLocks) -> Self {
        state.users.clone()
    }
}

/// Two lock configurations in one router, told apart by marker types; the
/// order's fencing token reaches the handler.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_lock_configurations_in_one_router() {
    let backend = MemoryBackend::new();
    let user = http::HeaderName::from_static("x-user");
    let state = TwoLocks {
        orders: RouteLock::new(
            LockLayer::new(backend.clone(), PathParam::new("id"))
                .scope("order")
                .wait(Duration::ZERO)
                .lock_options(LockOptions::new().fencing(true)),
        )
        .marked(),
        users: RouteLock::new(
            LockLayer::new(backend, HeaderKey::new(user))
                .scope("user")
                .wait(Duration::ZERO),
        )
        .marked(),
    };
    async fn pay(order: Locked<Orders>, _user: Locked<Users>) -> String {
        tokio::time::sleep(Duration::from_millis(300)).await;
        format!("{:?}", order.fencing_token())
    }
    let app = Router::new()
        .route("/orders/{id}/pay", post(pay))
        .with_state(state);
    let server = TestServer::start(app).await;
    let client = TestClient::new();
    let pay = |id: &str, who: &'static str| {
        let (client, url) = (client.clone(), server.url(&format!("/orders/{id}/pay")));
        async move { client.send("POST", &url, &[("x-user", who)]).await }
    };
    // Another order of the same user: the user's lock refuses it.
    let (a, b) = tokio::join!(pay("1", "ann"), async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        pay("2", "ann").await
    });
    assert_eq!((a.status, b.status), (StatusCode::OK, StatusCode::LOCKED));
    assert!(a.text().starts_with("Some("), "{:?}", a.text());
    // The same order for another user: the order's lock refuses it.
    let (a, b) = tokio::join!(pay("3", "bob"), async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        pay("3", "cat").await
    });
    assert_eq!((a.status, b.status), (StatusCode::OK, StatusCode::LOCKED));
    // Tokens grow from one holder to the next.
    let token = |text: String| -> u64 {
        let number = text.trim_start_matches("Some(").trim_end_matches(')');
        number
            .parse()
            .unwrap_or_else(|_| panic!("a token, not {text:?}"))
    };
    let first = token(pay("4", "dan").await.text());
    let second = token(pay("4", "dan").await.text());
    assert!(second > first, "{first} then {second}");
}

/// actix-web: a lock keyed by a path parameter on a resource, the
/// `RateLimited` extractor, a concurrency limit by `RouteLock`, and a lock
/// held until the body has been sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actix_route_keys_and_extractors() {
    use actix_web::{HttpResponse, web};
    let backend = MemoryBackend::new();
    let by_order = lock_actix::LockMiddleware::new(
        LockLayer::new(backend.clone(), PathParam::new("id")).wait(Duration::ZERO),
    );
    let limited = lock_actix::RouteRateLimit::new(RateLimitLayer::new(
        per_minute(backend.clone(), "limited", 2),
        GlobalKey::new(),
    ));
    let two_at_once = lock_actix::RouteLock::concurrency(lock_axum::ConcurrencyLimitLayer::new(
        backend.clone(),
        GlobalKey::new(),
        NonZeroU32::new(2).expect("2"),
    ));
    let streamed = lock_actix::LockMiddleware::new(
        LockLayer::new(backend, GlobalKey::new())
            .scope("stream")
            .wait(Duration::ZERO)
            .hold_until_body_sent(true),
    );
    let addr: SocketAddr = lock_tests::http::actix(move || {
        actix_web::App::new()
            .app_data(limited.clone())
            .app_data(two_at_once.clone())
            .service(
                web::resource("/orders/{id}/pay")
                    .wrap(by_order.clone())
                    .route(web::post().to(|id: web::Path<String>| async move {
                        tokio::time::sleep(Duration::from_millis(300)).await;
                        format!("paid {id}")
                    })),
            )
            .route(
                "/limited",
                web::get().to(|_: lock_actix::RateLimited| async { "go" }),
            )
            .route(
                "/busy",
                web::get().to(|held: lock_actix::Locked| async move {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    drop(held); // held until here
                    "done"
                }),
            )
            .service(
                web::resource("/stream")
                    .wrap(streamed.clone())
                    .route(web::get().to(|| async {
                        let chunks = futures_util::stream::unfold(0u8, |i| async move {
                            if i == 3 {
                                return None;
                            }
                            tokio::time::sleep(Duration::from_millis(150)).await;
                            Some((
                                Ok::<_, std::io::Error>(bytes::Bytes::from_static(b"chunk\n")),
                                i + 1,
                            ))
                        });
                        HttpResponse::Ok().streaming(chunks)
                    })),
            )
    });
    let client = TestClient::new();
    let url = |path: &str| format!("http://{addr}{path}");
    let pay_one = url("/orders/1/pay");
    let (a, b, c) = tokio::join!(
        client.send("POST", &pay_one, &[]),
        async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            client.send("POST", &url("/orders/1/pay"), &[]).await
        },
        async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            client.send("POST", &url("/orders/2/pay"), &[]).await
        }
    );
    assert_eq!(
        (a.status, b.status, c.status),
        (StatusCode::OK, StatusCode::LOCKED, StatusCode::OK)
    );
    assert_eq!(a.text(), "paid 1");

    let mut statuses = Vec::new();
    for _ in 0..3 {
        statuses.push(client.get(&url("/limited"), &[]).await.status);
    }
    assert_eq!(
        statuses,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );

    let busy = url("/busy");
    let replies = futures_util::future::join_all((0..3).map(|_| client.get(&busy, &[]))).await;
    let mut statuses: Vec<u16> = replies.iter().map(|r| r.status.as_u16()).collect();
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 200, 503], "two at once, the third refused");

    // The lock is held while the body streams (about 450 ms).
    let stream = url("/stream");
    let (first, during) = tokio::join!(client.get(&stream, &[]), async {
        tokio::time::sleep(Duration::from_millis(250)).await;
        client.get(&stream, &[]).await
    });
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(first.text(), "chunk\nchunk\nchunk\n");
    assert_eq!(
        during.status,
        StatusCode::LOCKED,
        "freed before the body was sent"
    );
}
