//! Stock counters when Redis answers too late. A call that times out may
//! still be carried out when it reaches the server; retried with the same
//! operation or order id, from any client, it takes nothing more, so no
//! stock is lost or sold twice.

use std::time::Duration;

use lock_core::Error;
use lock_core::backend::{RedisBackend, RedisConfig};
use lock_core::counter::{Purchase, Reservation, Settle, Stock};
use lock_tests::latency::DelayProxy;
use lock_tests::{RedisServer, eventually};

/// How long the distant client waits for an answer. A call leaves the
/// client only within it (redis-rs drops a queued command whose caller
/// stopped waiting): a wide one keeps a busy machine's scheduling delays
/// from deciding whether the late call lands.
const TIMEOUT: Duration = Duration::from_millis(200);

/// A stock handle next to `server`, and one whose answers come 500 ms
/// away (behind a delay proxy) and who gives up after [`TIMEOUT`].
async fn near_and_far(
    server: &RedisServer,
) -> (Stock<RedisBackend>, DelayProxy, Stock<RedisBackend>) {
    let near = RedisBackend::connect(&server.url()).await.expect("connect");
    let proxy = DelayProxy::to_server(server, Duration::from_millis(250));
    let config = RedisConfig::default()
        .response_timeout(TIMEOUT)
        .connect_timeout(Duration::from_secs(5));
    let client = redis::Client::open(proxy.url()).expect("proxy url");
    let far = RedisBackend::connect_with(client, config)
        .await
        .expect("connect through the proxy");
    let near = Stock::new(near);
    // Every script is loaded once, as on any server in use: a late call is
    // then carried out, not refused with `NOSCRIPT`.
    near.set("warm-up", 10).await.expect("set");
    near.decrement_once("warm-up", 1, "warm-up")
        .await
        .expect("decrement");
    near.reserve("warm-up", 1, "warm-up", Duration::from_secs(60))
        .await
        .expect("reserve");
    near.confirm("warm-up", "warm-up").await.expect("confirm");
    (near, proxy, Stock::new(far))
}

/// The call timed out, with the typed error.
fn timed_out<T: std::fmt::Debug>(result: lock_core::Result<T>) {
    match result {
        Err(Error::Timeout(after)) => assert_eq!(after, TIMEOUT),
        other => panic!("expected a timeout after {TIMEOUT:?}, got {other:?}"),
    }
}

/// Waits up to 2 s for `item`'s stock to be `expected`.
async fn stock_becomes(stock: &Stock<RedisBackend>, item: &str, expected: u64) -> bool {
    eventually(Duration::from_secs(2), async || {
        stock.get(item).await.expect("get") == Some(expected)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decrement_lost_to_a_timeout_is_taken_once_when_retried() {
    let server = RedisServer::start();
    let (near, _proxy, far) = near_and_far(&server).await;
    near.set("sku", 10).await.expect("set");

    timed_out(far.decrement_once("sku", 3, "order-1").await);
    // The decrement still reached the server and was carried out.
    assert!(
        stock_becomes(&near, "sku", 7).await,
        "the late decrement never landed"
    );
    // The retry, here from a client that is not slow, takes nothing more.
    assert_eq!(
        near.decrement_once("sku", 3, "order-1")
            .await
            .expect("retry"),
        Purchase::Done {
            remaining: 7,
            replayed: true
        }
    );
    assert_eq!(near.get("sku").await.expect("get"), Some(7));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_lost_to_a_timeout_is_held_once_when_retried() {
    let server = RedisServer::start();
    let (near, _proxy, far) = near_and_far(&server).await;
    near.set("seat", 5).await.expect("set");
    let hold = Duration::from_secs(60);

    timed_out(far.reserve("seat", 2, "order-2", hold).await);
    assert!(
        stock_becomes(&near, "seat", 3).await,
        "the late reservation never landed"
    );
    match near
        .reserve("seat", 2, "order-2", hold)
        .await
        .expect("retry")
    {
        Reservation::AlreadyHeld { quantity: 2, .. } => {}
        other => panic!("expected the first hold, got {other:?}"),
    }
    assert_eq!(near.get("seat").await.expect("get"), Some(3));

    // The same for the confirmation: lost, then retried once it has had
    // time to land (it is 250 ms away; the stock does not show it, and a
    // retry made before it lands would confirm and prove nothing).
    timed_out(far.confirm("seat", "order-2").await);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        near.confirm("seat", "order-2").await.expect("retry"),
        Settle::AlreadyConfirmed
    );
    assert_eq!(near.get("seat").await.expect("get"), Some(3));
}
