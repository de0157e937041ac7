//! On Redis Cluster, a command whose connection was cut after the server
//! ran it is never sent again (redis-rs's cluster client would, with
//! retries): a restock adds once, a decrement subtracts once, and a lock
//! attempt whose grant was lost is given back, so the caller's next
//! attempt is not refused by its own orphaned token. Each node sits
//! behind a fault proxy, and announces the proxy's port to clients.

use std::time::Duration;

use lock_core::Error;
use lock_core::backend::RedisBackend;
use lock_core::counter::{Purchase, Stock};
use lock_core::lock::Lock;
use lock_tests::cluster::create;
use lock_tests::fault_proxy::{Fault, FaultProxy};
use lock_tests::{RedisServer, ServerOptions};

/// Three masters, each behind a proxy whose port it announces.
struct ProxiedCluster {
    proxies: Vec<FaultProxy>,
    _nodes: Vec<RedisServer>,
}

impl ProxiedCluster {
    fn start() -> Self {
        let nodes: Vec<RedisServer> = (0..3)
            .map(|_| RedisServer::start_with(ServerOptions::new().cluster_node()))
            .collect();
        let proxies: Vec<FaultProxy> = nodes
            .iter()
            .enumerate()
            .map(|(i, node)| FaultProxy::to_server(node, i as u64))
            .collect();
        for (node, proxy) in nodes.iter().zip(&proxies) {
            let mut conn = node.connection();
            for (name, value) in [
                ("cluster-announce-port", proxy.addr().port()),
                ("cluster-announce-bus-port", node.port() + 10000),
            ] {
                let _: () = redis::cmd("CONFIG")
                    .arg("SET")
                    .arg(name)
                    .arg(value)
                    .query(&mut conn)
                    .unwrap_or_else(|e| panic!("CONFIG SET {name}: {e}"));
            }
        }
        create(&nodes, 0);
        ProxiedCluster {
            proxies,
            _nodes: nodes,
        }
    }

    fn urls(&self) -> Vec<String> {
        self.proxies.iter().map(FaultProxy::url).collect()
    }

    /// The next command through any proxy runs unheard.
    fn cut_next(&self) {
        for proxy in &self.proxies {
            proxy.set(Fault::CutAfterForward);
        }
    }

    fn heal(&self) {
        for proxy in &self.proxies {
            proxy.heal();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_whose_reply_was_lost_is_not_sent_again() {
    let cluster = ProxiedCluster::start();
    let urls = cluster.urls();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let backend = RedisBackend::connect_cluster(&urls).await.expect("connect");
    let stock = Stock::new(backend.clone());
    let lock = Lock::new(backend, "order:42").expect("valid");
    // Each script once, so the node has it: the cut then falls on the
    // script's run, not on an `EVALSHA` the node answers with `NOSCRIPT`.
    stock.set("sku", 5).await.expect("set");
    stock.restock("sku", 1).await.expect("restock");
    stock.decrement("sku", 1).await.expect("decrement");
    let warm = lock.try_lock().await.expect("backend").expect("free");
    assert!(warm.release().await.expect("backend"));
    stock.set("sku", 0).await.expect("set");

    cluster.cut_next();
    let restocked = stock.restock("sku", 10).await;
    cluster.heal();
    assert!(restocked.is_err(), "the reply was cut, yet: {restocked:?}");
    let after = lock_tests::eventually(Duration::from_secs(5), async || {
        stock.get("sku").await.is_ok()
    })
    .await;
    assert!(after, "the cluster did not answer again");
    assert_eq!(
        stock.get("sku").await.expect("get"),
        Some(10),
        "a restock of 10 whose reply was lost must add 10 once"
    );

    cluster.cut_next();
    let sold = stock.decrement("sku", 3).await;
    cluster.heal();
    assert!(sold.is_err(), "the reply was cut, yet: {sold:?}");
    let left = lock_tests::eventually(Duration::from_secs(5), async || {
        stock.get("sku").await.is_ok()
    })
    .await;
    assert!(left);
    assert_eq!(stock.get("sku").await.expect("get"), Some(7), "sold once");
    assert!(matches!(
        stock.decrement("sku", 1).await,
        Ok(Purchase::Done { remaining: 6, .. })
    ));

    cluster.cut_next();
    let attempt = lock.try_lock().await;
    cluster.heal();
    match attempt {
        Err(error) => assert!(error.is_backend_failure(), "{error:?}"),
        Ok(answer) => panic!(
            "the reply was cut, yet: {:?}",
            answer.map(|g| g.valid_for())
        ),
    }
    // The lost grant was given back: the caller's next attempt gets it.
    let guard = lock
        .lock(Duration::from_secs(2))
        .await
        .expect("backend")
        .expect("the caller's own lost grant must not keep it busy");
    assert!(guard.release().await.expect("backend"));
    assert!(!matches!(
        lock.try_lock().await,
        Err(Error::InvalidName { .. })
    ));
}
