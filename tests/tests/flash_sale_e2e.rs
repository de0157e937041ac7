//! The flash-sale demo end to end: the axum and actix-web servers, on the
//! in-memory backend and on Redis, started on free ports and driven over real
//! HTTP.

use std::time::Duration;

use http::StatusCode;
use lock_examples::flash_sale::simulate::{self, Options};
use lock_examples::flash_sale::{Framework, RunningServer, Shop, ShopConfig};
use lock_tests::RedisServer;
use lock_tests::http::TestClient;

async fn shop(redis: Option<&RedisServer>) -> Shop {
    match redis {
        None => Shop::memory(ShopConfig::default()),
        Some(server) => Shop::redis(&[&server.url()], ShopConfig::default())
            .await
            .expect("connect to redis"),
    }
}

async fn two_thousand_buyers_get_exactly_the_stock(framework: Framework, redis: bool) {
    let server = redis.then(RedisServer::start);
    let running = RunningServer::start(framework, shop(server.as_ref()).await, 0)
        .await
        .expect("start");
    let options = Options {
        buyers: 2000,
        stock: 100,
        // Requests in flight at once: enough to contend, few enough that a
        // debug build on two cores stays within the decision timeouts.
        concurrency: 100,
        progress: false,
        ..Options::default()
    };
    let summary = simulate::run(running.addr(), &options)
        .await
        .expect("simulate");
    println!("{framework:?} redis={redis}\n{summary}");
    assert_eq!(summary.sold, 100, "{summary}");
    assert_eq!(summary.oversold, 0, "{summary}");
    assert_eq!(summary.final_stock, 0, "{summary}");
    assert_eq!(summary.errors, 0, "{summary}");
    assert!(
        summary.replayed > 0,
        "retries were never replayed: {summary}"
    );
    assert!(
        summary.rate_limited > 0,
        "the bots were never limited: {summary}"
    );
    assert!(
        summary.limit_headers_ok,
        "a 429 lacked its headers: {summary}"
    );
}

async fn retries_never_buy_twice_and_429s_carry_headers(framework: Framework, redis: bool) {
    let server = redis.then(RedisServer::start);
    let running = RunningServer::start(framework, shop(server.as_ref()).await, 0)
        .await
        .expect("start");
    let base = format!("http://{}", running.addr());
    let client = TestClient::new();
    let put = client
        .send("PUT", &format!("{base}/items/cap?stock=5"), &[])
        .await;
    assert_eq!(put.status, StatusCode::OK);
    let buy = format!("{base}/items/cap/buy");
    let headers = [("x-user-id", "alice"), ("x-order-id", "order-1")];
    let first = client.send("POST", &buy, &headers).await;
    assert_eq!(first.status, StatusCode::OK);
    for _ in 0..3 {
        let retry = client.send("POST", &buy, &headers).await;
        assert_eq!(retry.status, StatusCode::OK);
        let body: serde_json::Value = serde_json::from_slice(&retry.body).expect("json");
        assert_eq!(body["replayed"], true);
        assert_eq!(body["remaining"], 4);
    }
    let stock = client.get(&format!("{base}/items/cap"), &[]).await;
    let body: serde_json::Value = serde_json::from_slice(&stock.body).expect("json");
    assert_eq!(body["stock"], 4, "a retry bought again");

    // Bob hammers: past the burst of 5 per second he is refused with 429.
    let mut limited = None;
    for i in 0..10 {
        let order = format!("bob-{i}");
        let reply = client
            .send(
                "POST",
                &buy,
                &[("x-user-id", "bob"), ("x-order-id", order.as_str())],
            )
            .await;
        if reply.status == StatusCode::TOO_MANY_REQUESTS {
            limited = Some(reply);
            break;
        }
    }
    let limited = limited.expect("bob was never rate limited");
    let retry_after: u64 = limited.header("retry-after").parse().expect("Retry-After");
    assert!(retry_after >= 1);
    assert!(
        limited.header("ratelimit").starts_with("\"buys\";r=0;t="),
        "{limited:?}"
    );
    assert_eq!(limited.header("ratelimit-policy"), "\"buys\";q=5;w=1");
}

async fn an_expired_reservation_returns_its_stock(framework: Framework, redis: bool) {
    let server = redis.then(RedisServer::start);
    let running = RunningServer::start(framework, shop(server.as_ref()).await, 0)
        .await
        .expect("start");
    let base = format!("http://{}", running.addr());
    let client = TestClient::new();
    client
        .send("PUT", &format!("{base}/items/seat?stock=1"), &[])
        .await;
    let reserve = client
        .send(
            "POST",
            &format!("{base}/items/seat/reserve?hold_ms=300"),
            &[("x-order-id", "r1")],
        )
        .await;
    assert_eq!(reserve.status, StatusCode::CREATED);
    let buy = client
        .send(
            "POST",
            &format!("{base}/items/seat/buy"),
            &[("x-user-id", "carol"), ("x-order-id", "b1")],
        )
        .await;
    assert_eq!(buy.status, StatusCode::CONFLICT, "the held unit was sold");
    tokio::time::sleep(Duration::from_millis(450)).await;
    let stock = client.get(&format!("{base}/items/seat"), &[]).await;
    let body: serde_json::Value = serde_json::from_slice(&stock.body).expect("json");
    assert_eq!(body["stock"], 1, "the expired hold did not come back");
    let confirm = client
        .send(
            "POST",
            &format!("{base}/items/seat/reservations/r1/confirm"),
            &[],
        )
        .await;
    assert_eq!(confirm.status, StatusCode::NOT_FOUND);

    // A confirmed hold stays sold; a cancelled one comes back.
    client
        .send(
            "POST",
            &format!("{base}/items/seat/reserve"),
            &[("x-order-id", "r2")],
        )
        .await;
    let confirmed = client
        .send(
            "POST",
            &format!("{base}/items/seat/reservations/r2/confirm"),
            &[],
        )
        .await;
    assert_eq!(confirmed.status, StatusCode::OK);
    client
        .send("PUT", &format!("{base}/items/seat?stock=1"), &[])
        .await;
    client
        .send(
            "POST",
            &format!("{base}/items/seat/reserve"),
            &[("x-order-id", "r3")],
        )
        .await;
    let cancelled = client
        .send(
            "POST",
            &format!("{base}/items/seat/reservations/r3/cancel"),
            &[],
        )
        .await;
    assert_eq!(cancelled.status, StatusCode::OK);
    let body: serde_json::Value = serde_json::from_slice(&cancelled.body).expect("json");
    assert_eq!(body["stock"], 1);
    let health = client.get(&format!("{base}/health"), &[]).await;
    assert_eq!(health.status, StatusCode::OK);
}

macro_rules! matrix {
    ($($case:ident),* $(,)?) => {
        mod axum_memory {
            $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
               async fn $case() { super::$case(super::Framework::Axum, false).await } )*
        }
        mod axum_redis {
            $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
               async fn $case() { super::$case(super::Framework::Axum, true).await } )*
        }
        mod actix_memory {
            $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
               async fn $case() { super::$case(super::Framework::Actix, false).await } )*
        }
        mod actix_redis {
            $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
               async fn $case() { super::$case(super::Framework::Actix, true).await } )*
        }
    };
}

matrix!(
    two_thousand_buyers_get_exactly_the_stock,
    retries_never_buy_twice_and_429s_carry_headers,
    an_expired_reservation_returns_its_stock,
);
