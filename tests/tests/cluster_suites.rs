//! Every conformance suite, wake-ups across nodes, `NOSCRIPT` while another
//! shard is unwell, and a tower layer over HTTP, on a real Redis Cluster
//! (three masters, one replica each): one cluster for the whole binary, a
//! key prefix per check.

use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use http::StatusCode;
use lock_core::backend::ClusterBackend;
use lock_core::lock::{Lock, LockOptions};
use lock_core::rate::{Algorithm, Policy, Quota, RateLimiter};
use lock_tests::cluster::RedisCluster;
use lock_tests::http::{TestClient, TestServer};
use lock_tests::within;
use lock_tower::RateLimitLayer;
use lock_tower::key::HeaderKey;

/// Lock names whose keys fall on each of the three masters.
fn names_on_every_master(cluster: &RedisCluster, prefix: &str) -> Vec<(String, usize)> {
    let mut found: Vec<(String, usize)> = Vec::new();
    for i in 0.. {
        let name = format!("spread-{i}");
        let master = cluster.master_of(&format!("{prefix}{{{name}}}:lock"));
        if !found.iter().any(|(_, m)| *m == master) {
            found.push((name, master));
        }
        if found.len() == 3 {
            return found;
        }
    }
    unreachable!()
}

/// A waiter on a lock of each master is woken by the release message, not
/// by its lease running out (30 s here).
async fn waiters_are_woken_on_every_node(cluster: &RedisCluster, backend: &ClusterBackend) {
    let backend = backend.with_prefix("wake:").expect("prefix");
    for (name, master) in names_on_every_master(cluster, "wake:") {
        let options = LockOptions::new().lease(Duration::from_secs(30));
        let lock = Lock::with_options(backend.clone(), &name, options).expect("valid");
        let holder = lock.try_lock().await.expect("backend").expect("free");
        let waiter = {
            let lock = lock.clone();
            tokio::spawn(async move { lock.lock(Duration::from_secs(20)).await })
        };
        // Subscribed and waiting.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let released = Instant::now();
        assert!(holder.release().await.expect("backend"));
        let got = waiter.await.expect("join").expect("backend");
        let took = released.elapsed();
        assert!(
            got.is_some(),
            "{name} (master {master}): never got the lock"
        );
        assert!(
            took < Duration::from_secs(2),
            "{name} (master {master}): woken after {took:?}, not by the release"
        );
        eprintln!("wake-up on master {master}: {took:?}");
    }
}

/// With every script flushed from the cluster and a replica of another
/// shard stopped, an acquire on a healthy master answers at once: the
/// script goes to that master alone, as EVAL, instead of being loaded on
/// every node.
async fn noscript_waits_on_no_other_node(cluster: &RedisCluster, backend: &ClusterBackend) {
    let backend = backend.with_prefix("noscript:").expect("prefix");
    let name = "flushed";
    let master = cluster.master_of(&format!("noscript:{{{name}}}:lock"));
    let other = cluster
        .masters()
        .into_iter()
        .find(|&m| m != master)
        .expect("another master");
    let paused = cluster.replica_of(other);
    for node in cluster.nodes() {
        let _: redis::RedisResult<()> = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query(&mut node.connection());
    }
    cluster.nodes()[paused].pause();
    let lock = Lock::new(backend, name).expect("valid");
    let guard = within(
        Duration::from_millis(500),
        "an acquire with a replica of another shard stopped",
        lock.try_lock(),
    )
    .await;
    cluster.nodes()[paused].resume();
    let guard = guard
        .expect("acquire with a replica of another shard stopped")
        .expect("free");
    assert!(guard.release().await.expect("backend"));
}

/// A tower rate-limit layer over a cluster backend, over real HTTP.
async fn a_tower_layer_limits_over_the_cluster(backend: &ClusterBackend) {
    let backend = backend.with_prefix("tower:").expect("prefix");
    let policy =
        Policy::new(Algorithm::Gcra).quota(Quota::per_minute(NonZeroU32::new(3).expect("3")));
    let limiter = RateLimiter::new(backend, "api", policy).expect("valid");
    let layer = RateLimitLayer::new(
        limiter,
        HeaderKey::new(http::HeaderName::from_static("x-user")),
    );
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer);
    let server = TestServer::start(app).await;
    let client = TestClient::new();
    for user in ["ann", "ben", "cat"] {
        for _ in 0..3 {
            let reply = client.get(&server.url("/"), &[("x-user", user)]).await;
            assert_eq!(reply.status, StatusCode::OK, "{user}");
        }
        let refused = client.get(&server.url("/"), &[("x-user", user)]).await;
        assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS, "{user}");
        assert!(!refused.header("retry-after").is_empty());
    }
}

/// The flash-sale shop on the cluster (as `REDIS_CLUSTER_URLS` runs it):
/// many buyers, exactly the stock sold.
async fn the_shop_sells_exactly_its_stock_on_the_cluster(cluster: &RedisCluster) {
    use lock_examples::flash_sale::simulate::{self, Options};
    use lock_examples::flash_sale::{Framework, RunningServer, Shop, ShopConfig};
    let urls = cluster.urls();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let shop = Shop::cluster(&urls, ShopConfig::default())
        .await
        .expect("connect");
    assert_eq!(shop.backend_name(), "cluster");
    let running = RunningServer::start(Framework::Axum, shop, 0)
        .await
        .expect("start");
    let options = Options {
        buyers: 400,
        stock: 40,
        concurrency: 50,
        progress: false,
        item: "cluster-tee".into(),
    };
    let summary = simulate::run(running.addr(), &options)
        .await
        .expect("simulate");
    assert_eq!(
        (summary.sold, summary.oversold, summary.errors),
        (40, 0, 0),
        "{summary}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everything_holds_on_a_cluster() {
    let cluster = RedisCluster::start();
    let backend = cluster.connect().await;
    assert!(
        backend.sharded_pubsub(),
        "Redis 7 on a cluster: sharded channels"
    );
    let on = async |case: &str| backend.with_prefix(format!("{case}:")).expect("prefix");
    lock_tests::lock_suite!(sequentially on);
    lock_tests::kinds_suite!(sequentially on);
    lock_tests::rate_suite!(sequentially on);
    lock_tests::counter_suite!(sequentially on);
    lock_tests::features_suite!(sequentially on);
    waiters_are_woken_on_every_node(&cluster, &backend).await;
    noscript_waits_on_no_other_node(&cluster, &backend).await;
    a_tower_layer_limits_over_the_cluster(&backend).await;
    the_shop_sells_exactly_its_stock_on_the_cluster(&cluster).await;
}
