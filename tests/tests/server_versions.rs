//! What each server version supports, checked on whichever server the
//! harness runs (`LOCK_REDIS_SERVER_BIN`; `scripts/test` runs this binary
//! on Redis 7, Redis 5.0.7 and Valkey 8): the version is read from the
//! server's `INFO`, and each feature either works or fails with the typed
//! error its docs name for that version, never a generic backend error.

use std::time::Duration;

use lock_core::Error;
use lock_core::backend::{ClusterBackend, MIN_REDIS_VERSION, RedisBackend, RedisConfig};
use lock_core::counter::Stock;
use lock_core::lock::{Lock, LockOptions};
use lock_tests::cluster::RedisCluster;
use lock_tests::logs::Logged;
use lock_tests::{RedisServer, ServerOptions};
use redis::cluster::ClusterClientBuilder;

/// Redis Cluster needs RESP3 (6.0): on an older cluster both ways to
/// connect refuse with `UnsupportedServer` naming 6.0 (and, from the
/// URLs, the version the nodes report); from 6.0 on a lock works, woken
/// over sharded pub/sub from 7.0 on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_needs_six_or_is_refused_with_a_typed_error() {
    let cluster = RedisCluster::start();
    let node = &cluster.nodes()[0];
    let (version, text) = (node.version(), node.version_text());
    let urls = cluster.urls();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    assert_eq!(ClusterBackend::MIN_REDIS_VERSION, "6.0");
    assert_eq!(MIN_REDIS_VERSION, "5.0");

    let connected = RedisBackend::connect_cluster(&urls).await;
    let with_builder = RedisBackend::connect_cluster_with(
        ClusterClientBuilder::new(urls.clone()),
        RedisConfig::default(),
    )
    .await;
    if version >= (6, 0, 0) {
        for backend in [connected, with_builder] {
            let backend = backend.unwrap_or_else(|e| panic!("Redis {text}: {e}"));
            assert_eq!(backend.sharded_pubsub(), version >= (7, 0, 0), "{text}");
            let options = LockOptions::new().lease(Duration::from_secs(10));
            let lock = Lock::with_options(backend, "versioned", options).expect("valid");
            let guard = lock.try_lock().await.expect("backend").expect("free");
            assert!(guard.release().await.expect("backend"));
        }
    } else {
        match connected {
            Err(Error::UnsupportedServer {
                version: reported,
                minimum,
            }) => {
                assert_eq!(reported, text, "the version the nodes report");
                assert_eq!(minimum, ClusterBackend::MIN_REDIS_VERSION);
                let message = Error::UnsupportedServer {
                    version: reported,
                    minimum,
                }
                .to_string();
                assert!(
                    message.contains(&text) && message.contains("6.0"),
                    "{message}"
                );
            }
            other => panic!("Redis {text}: expected UnsupportedServer, got {other:?}"),
        }
        match with_builder {
            Err(Error::UnsupportedServer { version, minimum }) => {
                assert_eq!(minimum, ClusterBackend::MIN_REDIS_VERSION);
                assert!(version.contains("6.0"), "{version}");
            }
            other => panic!("Redis {text}: expected UnsupportedServer, got {other:?}"),
        }
    }
}

/// A master with `min-replicas-to-write 1` and no replica. From Redis
/// 6.2.7 (and on 7, Valkey) it refuses the writes scripts make: every
/// lock and stock write is `Error::NoReplicas`, plain or synced, never a
/// generic error. Older servers take script writes past the setting (the
/// docs say so, and `connect` warns): there, a synced write is the guard,
/// and it fails with `NotReplicated` and gives the lock back.
#[tokio::test(flavor = "current_thread")]
async fn min_replicas_to_write_is_typed_on_every_version() {
    let master =
        RedisServer::start_with(ServerOptions::new().arg("--min-replicas-to-write").arg("1"));
    let (version, text) = (master.version(), master.version_text());
    let logged = Logged::default();
    let subscriber = logged.subscriber().finish();
    let backend = {
        let _logging = tracing::subscriber::set_default(subscriber);
        RedisBackend::connect(&master.url()).await.expect("connect")
    };
    let warned = logged.text().contains("min-replicas-to-write");
    let lock = Lock::new(backend.clone(), "guarded").expect("valid");
    let stock = Stock::new(backend.clone());
    let synced = backend.clone().sync_replicas(1, Duration::from_millis(100));
    let synced_lock = Lock::new(synced, "guarded-synced").expect("valid");
    if version >= (6, 2, 7) {
        assert!(!warned, "Redis {text}: {}", logged.text());
        match lock.try_lock().await {
            Err(Error::NoReplicas) => {}
            other => panic!("Redis {text}: expected NoReplicas, got {other:?}"),
        }
        match stock.set("sku", 1).await {
            Err(Error::NoReplicas) => {}
            other => panic!("Redis {text}: expected NoReplicas, got {other:?}"),
        }
        match synced_lock.try_lock().await {
            Err(Error::NoReplicas) => {}
            other => panic!("Redis {text}: expected NoReplicas, got {other:?}"),
        }
    } else {
        assert!(warned, "Redis {text}: no warning at connect");
        // Taken although no replica has it: what the docs say of this
        // version (the server, not this crate, skips the check).
        let guard = match lock.try_lock().await {
            Ok(Some(guard)) => guard,
            other => panic!("Redis {text}: expected the lock, got {other:?}"),
        };
        assert!(guard.release().await.expect("backend"));
        stock.set("sku", 1).await.expect("taken on this version");
        match synced_lock.try_lock().await {
            Err(Error::NotReplicated {
                acknowledged: 0,
                needed: 1,
            }) => {}
            other => panic!("Redis {text}: expected NotReplicated, got {other:?}"),
        }
        let again = Lock::new(backend, "guarded-synced").expect("valid");
        let free = again.try_lock().await.expect("backend");
        assert!(
            free.is_some(),
            "Redis {text}: the unconfirmed lock was kept"
        );
    }
}
