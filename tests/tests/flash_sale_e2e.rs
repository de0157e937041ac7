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

/// A shop served by `framework` on a free port, on memory or on a Redis
/// of its own, and a client for it.
struct Started {
    running: RunningServer,
    base: String,
    client: TestClient,
    /// Kept until the test ends.
    _redis: Option<RedisServer>,
}

async fn start(framework: Framework, redis: bool) -> Started {
    let server = redis.then(RedisServer::start);
    let running = RunningServer::start(framework, shop(server.as_ref()).await, 0)
        .await
        .expect("start");
    Started {
        base: format!("http://{}", running.addr()),
        running,
        client: TestClient::new(),
        _redis: server,
    }
}

async fn two_thousand_buyers_get_exactly_the_stock(framework: Framework, redis: bool) {
    let Started { running, .. } = &start(framework, redis).await;
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
    let Started { base, client, .. } = &start(framework, redis).await;
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
    let Started { base, client, .. } = &start(framework, redis).await;
    client
        .send("PUT", &format!("{base}/items/seat?stock=1"), &[])
        .await;
    let reserve = client
        .send(
            "POST",
            &format!("{base}/items/seat/reserve?hold_ms=300"),
            &[("x-user-id", "dave"), ("x-order-id", "r1")],
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
            &[("x-user-id", "dave"), ("x-order-id", "r2")],
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
            &[("x-user-id", "dave"), ("x-order-id", "r3")],
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

/// Fifty kinds of malformed request: none gets a 5xx, and a buy or
/// reservation without a usable `x-user-id` or `x-order-id` is a 400 that
/// says why.
async fn malformed_requests_get_no_5xx(framework: Framework, redis: bool) {
    let Started { base, client, .. } = &start(framework, redis).await;
    client
        .send("PUT", &format!("{base}/items/tee?stock=50"), &[])
        .await;
    let long = "u".repeat(600);
    let bad_ids: Vec<&[u8]> = vec![
        b"",
        b"{",
        b"a}b",
        b"a{b}",
        b"tab\there",
        b"\xff\xfe",
        b"caf\xc3",
        long.as_bytes(),
        b" ",
    ];
    // (method, url, headers)
    type Malformed<'a> = (String, String, Vec<(&'a str, &'a [u8])>);
    let mut requests: Vec<Malformed<'_>> = Vec::new();
    for route in ["buy", "reserve"] {
        let url = format!("{base}/items/tee/{route}");
        // No user, no order.
        requests.push(("POST".into(), url.clone(), vec![]));
        requests.push(("POST".into(), url.clone(), vec![("x-order-id", b"o-1")]));
        for bad in &bad_ids {
            requests.push((
                "POST".into(),
                url.clone(),
                vec![("x-user-id", bad), ("x-order-id", b"o-2")],
            ));
            requests.push((
                "POST".into(),
                url.clone(),
                vec![("x-user-id", b"erin"), ("x-order-id", bad)],
            ));
        }
    }
    for path in [
        "/items/%7Bx%7D",
        "/items/%7Bx%7D/buy",
        "/items/tee?stock=abc",
        "/items/tee?stock=-1",
        "/items/tee/reserve?hold_ms=abc",
        "/items/tee/reserve?hold_ms=0",
        "/items/tee/reserve?hold_ms=99999999999999999999",
        "/items/tee/reservations/%7Bo%7D/confirm",
        "/items/tee/reservations/%7Bo%7D/cancel",
        "/items/%09/buy",
        "/nowhere",
    ] {
        let method = if path.contains("stock=") {
            "PUT"
        } else {
            "POST"
        };
        let headers = vec![("x-user-id", &b"frank"[..]), ("x-order-id", &b"o-3"[..])];
        requests.push((method.into(), format!("{base}{path}"), headers));
    }
    assert!(requests.len() >= 50, "{} kinds", requests.len());
    for (method, url, headers) in &requests {
        let reply = client.send_bytes(method, url, headers).await;
        assert!(
            !reply.status.is_server_error(),
            "{method} {url} {headers:?}: {} {:?}",
            reply.status,
            reply.text()
        );
        let is_buy_or_reserve = url.ends_with("/buy") || url.ends_with("/reserve");
        if is_buy_or_reserve
            && url.contains("/tee/")
            && reply.status != StatusCode::TOO_MANY_REQUESTS
        {
            assert_eq!(
                reply.status,
                StatusCode::BAD_REQUEST,
                "{method} {url} {headers:?}: {:?}",
                reply.text()
            );
            assert!(!reply.text().trim().is_empty(), "a 400 without a reason");
        }
    }
    let stock = client.get(&format!("{base}/items/tee"), &[]).await;
    let body: serde_json::Value = serde_json::from_slice(&stock.body).expect("json");
    assert_eq!(
        body["stock"], 50,
        "a malformed request bought or held something"
    );
}

/// A client that makes up a new `x-user-id` for every reservation is still
/// limited by its address. The reservations go at once: one after another
/// on a loaded machine they may come slower than the address's 50 a
/// second, which is no flood.
async fn made_up_users_are_limited_by_address(framework: Framework, redis: bool) {
    let Started { base, client, .. } = &start(framework, redis).await;
    client
        .send("PUT", &format!("{base}/items/lot?stock=1000"), &[])
        .await;
    let url = format!("{base}/items/lot/reserve");
    let replies = futures_util::future::join_all((0..200).map(|i| {
        let (user, order) = (format!("fake-{i}"), format!("order-{i}"));
        let url = &url;
        async move {
            let headers = [("x-user-id", user.as_str()), ("x-order-id", order.as_str())];
            client.send("POST", url, &headers).await.status
        }
    }))
    .await;
    let limited = replies
        .iter()
        .filter(|&&status| status == StatusCode::TOO_MANY_REQUESTS)
        .count();
    assert!(
        limited > 0,
        "200 reservations at once under 200 names were never limited: {replies:?}"
    );
}

/// Starts a shop instance on `server`'s Redis as `flash-sale serve` does:
/// it seeds the sale item, then serves. What the seeding answered, too.
async fn start_instance(
    framework: Framework,
    server: &RedisServer,
) -> (RunningServer, serde_json::Value) {
    let shop = shop(Some(server)).await;
    let seeded = shop.seed().await;
    let running = RunningServer::start(framework, shop, 0)
        .await
        .expect("start");
    (running, seeded.body)
}

/// Shop instances started one after another against the same Redis: they
/// sell three units between them, and a third instance's start leaves the
/// stock at 97.
async fn a_new_instance_does_not_restock(framework: Framework) {
    let server = RedisServer::start();
    let (item, seeded) = lock_examples::flash_sale::SEED;
    let (first, _) = start_instance(framework, &server).await;
    let (second, _) = start_instance(framework, &server).await;
    let client = TestClient::new();
    for i in 0..3 {
        let base = format!("http://{}", [&first, &second][i % 2].addr());
        let (user, order) = (format!("buyer-{i}"), format!("seed-order-{i}"));
        let reply = client
            .send(
                "POST",
                &format!("{base}/items/{item}/buy"),
                &[("x-user-id", user.as_str()), ("x-order-id", order.as_str())],
            )
            .await;
        assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.text());
    }
    let (third, seeded_again) = start_instance(framework, &server).await;
    assert_eq!(seeded_again["stock"], seeded - 3, "{seeded_again:?}");
    let stock = client
        .get(&format!("http://{}/items/{item}", third.addr()), &[])
        .await;
    let body: serde_json::Value = serde_json::from_slice(&stock.body).expect("json");
    assert_eq!(body["stock"], seeded - 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_axum_instance_does_not_restock() {
    a_new_instance_does_not_restock(Framework::Axum).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_actix_instance_does_not_restock() {
    a_new_instance_does_not_restock(Framework::Actix).await;
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
    malformed_requests_get_no_5xx,
    made_up_users_are_limited_by_address,
);
