//! The lock layer's read-write mode over real HTTP, on memory and on
//! Redis, in axum and actix-web: `GET`s of one key run side by side, a
//! `PUT` runs alone, and a `PUT` that waits is served before `GET`s that
//! came after it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use http::StatusCode;
use lock_axum::LockLayer;
use lock_axum::backend::{MemoryBackend, RedisBackend};
use lock_axum::key::PathKey;
use lock_axum::lock::LockBackend;
use lock_tests::RedisServer;
use lock_tests::http::{TestClient, TestServer};
use lock_tests::within;

const HOLD: Duration = Duration::from_millis(300);

/// Who is inside a handler: readers, writers, and the most of each seen
/// together, and whether a writer was ever in with anyone.
#[derive(Default)]
struct Inside {
    readers: AtomicU32,
    writers: AtomicU32,
    most_readers: AtomicU32,
    overlaps: AtomicU32,
    /// The order in which handlers started: 'r' or 'w' each.
    order: std::sync::Mutex<String>,
}

impl Inside {
    async fn visit(&self, write: bool) -> &'static str {
        self.order
            .lock()
            .expect("order")
            .push(if write { 'w' } else { 'r' });
        if write {
            if self.writers.fetch_add(1, Ordering::SeqCst) > 0
                || self.readers.load(Ordering::SeqCst) > 0
            {
                self.overlaps.fetch_add(1, Ordering::SeqCst);
            }
        } else {
            let now = self.readers.fetch_add(1, Ordering::SeqCst) + 1;
            self.most_readers.fetch_max(now, Ordering::SeqCst);
            if self.writers.load(Ordering::SeqCst) > 0 {
                self.overlaps.fetch_add(1, Ordering::SeqCst);
            }
        }
        tokio::time::sleep(HOLD).await;
        let counter = if write { &self.writers } else { &self.readers };
        counter.fetch_sub(1, Ordering::SeqCst);
        "done"
    }
}

fn app<B: LockBackend>(backend: B, inside: Arc<Inside>) -> Router {
    let (r, w) = (inside.clone(), inside);
    Router::new()
        .route(
            "/doc",
            get(move || {
                let r = r.clone();
                async move { r.visit(false).await }
            })
            .put(move || {
                let w = w.clone();
                async move { w.visit(true).await }
            }),
        )
        .layer(
            LockLayer::new(backend, PathKey)
                .read_write()
                .wait(Duration::from_secs(10)),
        )
}

/// Three `GET`s together, then a `PUT` with two `GET`s behind it.
async fn readers_share_and_a_writer_goes_first(url: String, inside: Arc<Inside>) {
    let client = TestClient::new();
    let three = async {
        tokio::join!(
            client.get(&url, &[]),
            client.get(&url, &[]),
            client.get(&url, &[])
        )
    };
    let what = "three GETs (not side by side?)";
    let (a, b, c) = within(3 * HOLD, what, three).await;
    assert!(
        [a.status, b.status, c.status]
            .iter()
            .all(|s| *s == StatusCode::OK)
    );
    assert!(inside.most_readers.load(Ordering::SeqCst) >= 2);

    // A GET holds the document; a PUT waits; GETs that come after it wait
    // for the PUT.
    inside.order.lock().expect("order").clear();
    let first = tokio::spawn({
        let (client, url) = (client.clone(), url.clone());
        async move { client.get(&url, &[]).await }
    });
    tokio::time::sleep(HOLD / 3).await;
    let put = tokio::spawn({
        let (client, url) = (client.clone(), url.clone());
        async move { client.send("PUT", &url, &[]).await }
    });
    tokio::time::sleep(HOLD / 3).await;
    let (late_a, late_b) = tokio::join!(client.get(&url, &[]), client.get(&url, &[]));
    let (first, put) = (first.await.expect("task"), put.await.expect("task"));
    for reply in [&first, &put, &late_a, &late_b] {
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    }
    assert_eq!(
        inside.overlaps.load(Ordering::SeqCst),
        0,
        "a PUT ran with others"
    );
    let order = inside.order.lock().expect("order").clone();
    assert_eq!(
        order, "rwrr",
        "the waiting PUT was not served before later GETs"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn axum_on_memory() {
    let inside = Arc::new(Inside::default());
    let server = TestServer::start(app(MemoryBackend::new(), inside.clone())).await;
    readers_share_and_a_writer_goes_first(server.url("/doc"), inside).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn axum_on_redis() {
    let redis = RedisServer::start();
    let backend = RedisBackend::connect(&redis.url()).await.expect("connect");
    let inside = Arc::new(Inside::default());
    let server = TestServer::start(app(backend, inside.clone())).await;
    readers_share_and_a_writer_goes_first(server.url("/doc"), inside).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actix_on_redis() {
    use actix_web::web;
    let redis = RedisServer::start();
    let backend = RedisBackend::connect(&redis.url()).await.expect("connect");
    let inside = Arc::new(Inside::default());
    let middleware = lock_actix::LockMiddleware::new(
        LockLayer::new(backend, PathKey)
            .read_write()
            .wait(Duration::from_secs(10)),
    );
    let shared = inside.clone();
    let addr = lock_tests::http::actix(move || {
        let (r, w) = (shared.clone(), shared.clone());
        actix_web::App::new().wrap(middleware.clone()).route(
            "/doc",
            web::route().to(move |request: actix_web::HttpRequest| {
                let (r, w) = (r.clone(), w.clone());
                async move {
                    if request.method().is_safe() {
                        r.visit(false).await
                    } else {
                        w.visit(true).await
                    }
                }
            }),
        )
    });
    readers_share_and_a_writer_goes_first(format!("http://{addr}/doc"), inside).await;
}
