//! A lock whose lease is lost mid-request (Redis paused past the lease, so
//! that the watchdog cannot renew it) stops the handler and answers 503,
//! by default, on the tower layer and the actix-web middleware alike: a
//! request that takes the key afterwards never runs beside it.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use http::StatusCode;
use lock_core::backend::{RedisBackend, RedisConfig};
use lock_core::lock::LockOptions;
use lock_tests::RedisServer;
use lock_tests::http::{Reply, TestClient, TestServer};
use lock_tower::LockLayer;
use lock_tower::key::PathKey;

/// Handlers inside at once, and the most seen.
#[derive(Default)]
struct Inside {
    now: AtomicUsize,
    most: AtomicUsize,
}

/// Leaves on drop, so that a stopped handler counts as gone.
struct Visit<'a>(&'a AtomicUsize);

impl Drop for Visit<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Inside {
    /// A handler's work: four seconds holding the key.
    async fn visit(&self) {
        let n = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(n, Ordering::SeqCst);
        let _visit = Visit(&self.now);
        tokio::time::sleep(Duration::from_secs(4)).await;
    }
}

/// `/k`, whose handler holds its key for four seconds.
fn routes(inside: &Arc<Inside>) -> Router {
    let inside = inside.clone();
    let handler = move || {
        let inside = inside.clone();
        async move {
            inside.visit().await;
            "done"
        }
    };
    Router::new().route("/k", get(handler))
}

/// The layer's defaults but for a short watched lease, on a connection
/// that gives up on a paused server quickly.
async fn layer(server: &RedisServer) -> LockLayer<RedisBackend, PathKey> {
    let config = RedisConfig::default()
        .response_timeout(Duration::from_millis(200))
        .connect_timeout(Duration::from_millis(200));
    let backend = RedisBackend::connect_with(server.client(), config)
        .await
        .expect("connect");
    let layer = LockLayer::new(backend, PathKey)
        .lock_options(LockOptions::new().watchdog(Duration::from_millis(900)))
        .wait(Duration::from_secs(5));
    assert!(layer.cancels_on_lease_loss(), "the default");
    layer
}

/// Sends a request to `url` that holds its key, pauses `server` past the
/// lease, then sends a second once Redis is back; checks that the two
/// never ran at once, that the first was told 503, and the second served.
async fn lose_the_lease_mid_request(server: &RedisServer, url: &str, inside: &Inside) {
    let client = TestClient::new();
    let first = {
        let (client, url) = (client.clone(), url.to_owned());
        tokio::spawn(async move { client.get(&url, &[]).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(inside.now.load(Ordering::SeqCst), 1, "the first is inside");
    server.pause();
    tokio::time::sleep(Duration::from_secs(2)).await;
    server.resume();
    // Past the breaker's second after the failures.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let second = client.get(url, &[]).await;
    let first: Reply = first.await.expect("the first request");
    assert_eq!(
        inside.most.load(Ordering::SeqCst),
        1,
        "two handlers of one key ran at once"
    );
    assert_eq!(first.status, StatusCode::SERVICE_UNAVAILABLE, "{first:?}");
    assert!(first.text().contains("lease lost"), "{first:?}");
    assert_eq!(second.status, StatusCode::OK, "{second:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_lost_mid_request_stops_the_handler_on_tower() {
    let server = RedisServer::start();
    let inside = Arc::new(Inside::default());
    let app = routes(&inside).layer(layer(&server).await);
    let http = TestServer::start(app).await;
    lose_the_lease_mid_request(&server, &http.url("/k"), &inside).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_lost_mid_request_stops_the_handler_on_actix() {
    use actix_web::{HttpResponse, web};
    let server = RedisServer::start();
    let inside = Arc::new(Inside::default());
    let lock = lock_actix::LockMiddleware::new(layer(&server).await);
    let addr = {
        let inside = inside.clone();
        lock_tests::http::actix(move || {
            let inside = inside.clone();
            let handler = move || {
                let inside = inside.clone();
                async move {
                    inside.visit().await;
                    HttpResponse::Ok().body("done")
                }
            };
            actix_web::App::new().service(
                web::scope("")
                    .wrap(lock.clone())
                    .route("/k", web::get().to(handler)),
            )
        })
    };
    lose_the_lease_mid_request(&server, &format!("http://{addr}/k"), &inside).await;
}

/// A fixed lease (no watchdog) that runs out while the handler still runs
/// stops it too, in memory as on Redis, and the 503 is the layer's own
/// answer: an outer rate limit adds no `RateLimit` fields to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_lease_that_runs_out_stops_the_handler_with_the_layers_own_503() {
    use lock_core::backend::MemoryBackend;
    use lock_core::rate::{Algorithm, Policy, Quota, RateLimiter};
    use lock_tower::RateLimitLayer;
    use lock_tower::key::GlobalKey;
    let inside = Arc::new(Inside::default());
    let lock = LockLayer::new(MemoryBackend::new(), PathKey)
        .lock_options(LockOptions::new().lease(Duration::from_millis(300)));
    let quota = Quota::per_minute(std::num::NonZeroU32::new(100).expect("100"));
    let limiter = RateLimiter::new(
        MemoryBackend::new(),
        "outer",
        Policy::new(Algorithm::Gcra).quota(quota),
    )
    .expect("limiter");
    let app = routes(&inside)
        .layer(lock)
        .layer(RateLimitLayer::new(limiter, GlobalKey::new()).headers_on_success(true));
    let http = TestServer::start(app).await;
    let reply = TestClient::new().get(&http.url("/k"), &[]).await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE, "{reply:?}");
    assert!(reply.text().contains("lease lost"), "{reply:?}");
    assert!(reply.headers.get("ratelimit").is_none(), "{reply:?}");
    assert_eq!(
        inside.now.load(Ordering::SeqCst),
        0,
        "the handler was stopped"
    );
}
