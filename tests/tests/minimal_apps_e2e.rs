//! The minimal services of lock-axum's and lock-actix's READMEs (and the
//! plain tower one), over real HTTP, in memory and on Redis: the per-IP
//! limit, the lock keyed by a path parameter, and the stock.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use http::StatusCode;
use lock_core::backend::{AnyBackend, MemoryBackend};
use lock_core::counter::Stock;
use lock_examples::minimal::{actix_app, axum_app, tower_app};
use lock_tests::RedisServer;
use lock_tests::http::TestClient;

#[derive(Clone, Copy, Debug)]
enum Framework {
    Axum,
    Actix,
    Tower,
}

/// One service of `framework` on `backend`; its address.
async fn serve(framework: Framework, backend: AnyBackend) -> SocketAddr {
    match framework {
        Framework::Axum => {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind");
            let addr = listener.local_addr().expect("addr");
            let app = axum_app::app(backend)
                .expect("app")
                .into_make_service_with_connect_info::<SocketAddr>();
            tokio::spawn(async move { axum::serve(listener, app).await });
            addr
        }
        Framework::Tower => {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind");
            let addr = listener.local_addr().expect("addr");
            tokio::spawn(tower_app::serve(listener, backend));
            addr
        }
        Framework::Actix => {
            let shop = actix_app::shop(backend).expect("shop");
            lock_tests::http::actix(move || {
                let shop = shop.clone();
                actix_web::App::new()
                    .wrap(shop.per_ip.clone())
                    .configure(move |config| shop.routes(config))
            })
        }
    }
}

/// A fresh backend: a new memory backend, or a new key prefix on Redis.
fn fresh(redis: Option<&lock_core::backend::RedisBackend>, name: &str) -> AnyBackend {
    match redis {
        Some(redis) => redis
            .with_prefix(format!("{name}:"))
            .expect("prefix")
            .into(),
        None => MemoryBackend::new().into(),
    }
}

/// 10 a second per client address: a burst past it is refused with 429
/// and the rate-limit fields; `/health` is exempt.
async fn per_ip_limit(framework: Framework, backend: AnyBackend) {
    let addr = serve(framework, backend).await;
    let client = TestClient::new();
    let url = format!("http://{addr}/orders/none/x");
    let started = Instant::now();
    let mut statuses = Vec::new();
    for _ in 0..15 {
        statuses.push(client.send("POST", &url, &[]).await);
    }
    let elapsed = started.elapsed();
    let allowed = statuses
        .iter()
        .filter(|r| r.status != StatusCode::TOO_MANY_REQUESTS)
        .count();
    // One more comes back every 100 ms.
    let most = 10 + elapsed.as_millis().div_ceil(100) as usize;
    assert!(
        (10..=most).contains(&allowed),
        "{framework:?}: {allowed} of 15 allowed in {elapsed:?}"
    );
    let refused = statuses
        .iter()
        .find(|r| r.status == StatusCode::TOO_MANY_REQUESTS)
        .unwrap_or_else(|| panic!("{framework:?}: nothing refused"));
    assert!(!refused.header("retry-after").is_empty(), "{framework:?}");
    if !matches!(framework, Framework::Tower) {
        // The sample response the READMEs show.
        assert_eq!(
            (
                refused.header("ratelimit"),
                refused.header("ratelimit-policy"),
                refused.header("retry-after"),
            ),
            ("\"default\";r=0;t=1", "\"default\";q=10;w=1", "1"),
            "{framework:?}"
        );
        for _ in 0..20 {
            let health = client.get(&format!("http://{addr}/health"), &[]).await;
            assert_eq!(health.status, StatusCode::OK, "{framework:?}: /health");
            assert_eq!(health.header("ratelimit"), "", "{framework:?}: /health");
        }
    }
}

/// Two payments of one order run one after the other; of two orders, at
/// once.
async fn one_payment_per_order(framework: Framework, backend: AnyBackend) {
    let addr = serve(framework, backend).await;
    let client = TestClient::new();
    let pay = |id: &'static str| {
        let (client, url) = (client.clone(), format!("http://{addr}/orders/{id}/pay"));
        async move { client.send("POST", &url, &[]).await }
    };
    let started = Instant::now();
    let (a, b) = tokio::join!(pay("7"), pay("7"));
    let same = started.elapsed();
    assert_eq!((a.status, b.status), (StatusCode::OK, StatusCode::OK));
    assert_eq!(a.text(), "order 7 paid\n");
    // Each takes 200 ms, and the second waited for the first.
    assert!(
        same >= Duration::from_millis(400),
        "{framework:?}: two payments of one order took {same:?}"
    );
    let started = Instant::now();
    let (a, b) = tokio::join!(pay("8"), pay("9"));
    let different = started.elapsed();
    assert_eq!((a.status, b.status), (StatusCode::OK, StatusCode::OK));
    assert!(
        different < same,
        "{framework:?}: two orders took {different:?}, one order twice {same:?}"
    );
}

/// 3 in stock, 5 buyers: 3 get one, 2 are told it is sold out; an unknown
/// item is 404.
async fn stock_never_oversells(framework: Framework, backend: AnyBackend) {
    Stock::new(backend.clone())
        .create("tshirt", 3)
        .await
        .expect("create");
    let addr = serve(framework, backend).await;
    let client = TestClient::new();
    let url = format!("http://{addr}/items/tshirt/buy");
    let replies =
        futures_util::future::join_all((0..5).map(|_| client.send("POST", &url, &[]))).await;
    let mut statuses: Vec<u16> = replies.iter().map(|r| r.status.as_u16()).collect();
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 200, 200, 409, 409], "{framework:?}");
    let unknown = client
        .send("POST", &format!("http://{addr}/items/nothing/buy"), &[])
        .await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND, "{framework:?}");
}

async fn every_case(redis: Option<&lock_core::backend::RedisBackend>) {
    for framework in [Framework::Axum, Framework::Actix, Framework::Tower] {
        let name = |case: &str| format!("{framework:?}-{case}");
        per_ip_limit(framework, fresh(redis, &name("limit"))).await;
        one_payment_per_order(framework, fresh(redis, &name("pay"))).await;
        if !matches!(framework, Framework::Tower) {
            stock_never_oversells(framework, fresh(redis, &name("stock"))).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_services_in_memory() {
    every_case(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_services_on_redis() {
    let server = RedisServer::start();
    let redis = lock_core::backend::RedisBackend::connect(&server.url())
        .await
        .expect("connect");
    every_case(Some(&redis)).await;
}
