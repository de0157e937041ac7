//! Every public function that takes a `Duration` accepts none, a tiny one
//! and `Duration::MAX` without a panic (an overflow adding it to the
//! clock): each is tried with all three, on memory and on Redis. The lock
//! kinds' waits are in the conformance suite (`any_wait_is_accepted`).

use std::num::NonZeroU32;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use http::StatusCode;
use lock_core::Error;
use lock_core::backend::{MemoryBackend, RedisBackend, RedisConfig};
use lock_core::counter::{CounterBackend, Stock};
use lock_core::lock::{Lock, LockBackend, Redlock};
use lock_core::rate::{Algorithm, Policy, Quota, RateBackend, RateLimiter};
use lock_tests::RedisServer;
use lock_tests::http::{TestClient, TestServer};
use lock_tower::key::PathKey;
use lock_tower::{LockLayer, RateLimitLayer};

const DURATIONS: [Duration; 3] = [Duration::ZERO, Duration::from_nanos(1), Duration::MAX];

async fn rate_and_stock<B: RateBackend + CounterBackend + Clone>(backend: B) {
    let quota = Quota::per_second(NonZeroU32::new(100).expect("nonzero"));
    for algorithm in [
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::Gcra,
    ] {
        let policy = Policy::new(algorithm).quota(quota.clone());
        let limiter = RateLimiter::new(backend.clone(), "durations", policy).expect("valid");
        for within in DURATIONS {
            let decision = limiter
                .until_ready("caller", 1, within)
                .await
                .expect("backend");
            assert!(decision.allowed, "{algorithm:?} {within:?}");
        }
    }
    assert!(Quota::new(NonZeroU32::MIN, Duration::MAX).is_none());
    assert!(Quota::new(NonZeroU32::MIN, Duration::ZERO).is_none());

    for (i, remember) in DURATIONS.into_iter().enumerate() {
        let stock = Stock::new(backend.clone()).remember_for(remember);
        let item = format!("durations-{i}");
        stock.set(&item, 5).await.expect("backend");
        stock.decrement_once(&item, 1, "op").await.expect("backend");
        for hold in DURATIONS {
            match stock.reserve(&item, 1, "order", hold).await {
                Err(Error::InvalidArgument { .. }) => {}
                other => panic!("a hold of {hold:?}: {other:?}"),
            }
        }
    }
}

async fn layers<B: LockBackend + RateBackend>(backend: B) {
    let limiter = RateLimiter::new(
        backend.clone(),
        "durations-layer",
        Policy::new(Algorithm::Gcra)
            .quota(Quota::per_second(NonZeroU32::new(10).expect("nonzero"))),
    )
    .expect("valid");
    for d in DURATIONS {
        let app = Router::new()
            .route("/{id}", get(|| async { "ok" }))
            .layer(
                LockLayer::new(backend.clone(), PathKey)
                    .wait(d)
                    .decision_timeout(d),
            )
            .layer(RateLimitLayer::new(limiter.clone(), PathKey).decision_timeout(d));
        let server = TestServer::start(app).await;
        let reply = TestClient::new().get(&server.url("/a"), &[]).await;
        // A decision timeout too short for a round trip to Redis fails the
        // lock closed (503); a panic would have been a 500 or no answer.
        let answered = reply.status == StatusCode::OK
            || (d < Duration::from_millis(1) && reply.status == StatusCode::SERVICE_UNAVAILABLE);
        assert!(answered, "{d:?}: {}", reply.status);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_accepts_any_duration() {
    rate_and_stock(MemoryBackend::new()).await;
    layers(MemoryBackend::new()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_accepts_any_duration() {
    let server = RedisServer::start();
    for d in DURATIONS.into_iter().skip(1) {
        let config = RedisConfig::default()
            .response_timeout(d)
            .connect_timeout(d);
        // Timeouts under a millisecond (raised to 1 ms) may rightly run out
        // on a loaded machine: then the typed timeout, never a panic.
        let tiny = d < Duration::from_millis(1);
        let backend = match RedisBackend::connect_with(server.client(), config).await {
            Ok(backend) => backend,
            Err(Error::Timeout(_)) if tiny => continue,
            Err(e) => panic!("connect with timeouts of {d:?}: {e:?}"),
        };
        let lock = Lock::new(backend, "durations").expect("valid");
        match lock.try_lock().await {
            Ok(Some(_)) => {}
            Err(Error::Timeout(_)) if tiny => {}
            other => panic!("a lock with timeouts of {d:?}: {other:?}"),
        }
    }
    let backend = RedisBackend::connect(&server.url()).await.expect("connect");
    rate_and_stock(backend.clone()).await;
    layers(backend).await;

    let redlock = Redlock::connect(&[server.url().as_str()])
        .await
        .expect("connect")
        .per_server_timeout(Duration::MAX)
        .retry_delay(Duration::MAX);
    let lock = Lock::new(redlock, "durations-redlock").expect("valid");
    assert!(lock.lock(Duration::MAX).await.expect("backend").is_some());
}

/// `sync_replicas` with any timeout: with the replica up, writes are
/// confirmed at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn synced_writes_accept_any_timeout() {
    let (master, _replica) = lock_tests::master_and_replica();
    let backend = RedisBackend::connect(&master.url()).await.expect("connect");
    for (i, d) in DURATIONS.into_iter().enumerate() {
        let synced = backend.clone().sync_replicas(1, d);
        let lock = Lock::new(synced.clone(), format!("synced-{i}")).expect("valid");
        match lock.try_lock().await {
            Ok(Some(guard)) => assert!(guard.release().await.expect("backend")),
            // A zero or tiny timeout may be too short for the replica.
            Err(Error::NotReplicated { .. }) if d < Duration::from_millis(1) => {}
            other => panic!("a synced lock with a timeout of {d:?}: {other:?}"),
        }
        Stock::new(synced)
            .set(&format!("synced-{i}"), 1)
            .await
            .or_else(|e| match e {
                Error::NotReplicated { .. } if d < Duration::from_millis(1) => Ok(()),
                e => Err(e),
            })
            .unwrap_or_else(|e| panic!("a synced write with a timeout of {d:?}: {e:?}"));
    }
}
