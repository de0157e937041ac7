//! The actix-web lock middleware on Redis, over real HTTP: the lock is
//! given back before the response goes out, as on the tower side.

use std::time::Duration;

use actix_web::{HttpResponse, web};
use http::StatusCode;
use lock_tests::http::TestClient;
use lock_tower::LockLayer;
use lock_tower::key::PathKey;

/// A client that sends its next request as soon as it has its answer finds
/// the key free, even when the release has to load its script again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_request_after_an_answer_finds_the_key_free() {
    let (server, backend) = lock_tests::redis_backend().await;
    let lock =
        lock_actix::LockMiddleware::new(LockLayer::new(backend, PathKey).wait(Duration::ZERO));
    let addr = lock_tests::http::actix(move || {
        actix_web::App::new().service(web::scope("").wrap(lock.clone()).route(
            "/seq",
            web::get().to(|| async { HttpResponse::Ok().body("ok") }),
        ))
    });
    let client = TestClient::new();
    let url = format!("http://{addr}/seq");
    let mut conn = server.connection();
    for round in 0..20 {
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query(&mut conn)
            .expect("SCRIPT FLUSH");
        assert_eq!(client.get(&url, &[]).await.status, StatusCode::OK);
        let next = client.get(&url, &[]).await;
        assert_eq!(next.status, StatusCode::OK, "round {round}: {next:?}");
    }
}

/// The release before the response is bounded by the layer's decision
/// timeout, as on the tower side: a Redis that stops answering while the
/// handler runs delays the response by about that, not by the
/// connection's own timeouts and retries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_to_a_paused_redis_delays_the_answer_by_the_decision_timeout_at_most() {
    let (server, backend) = lock_tests::redis_backend().await;
    let server = std::sync::Arc::new(server);
    let decision = Duration::from_millis(500);
    let lock = lock_actix::LockMiddleware::new(
        LockLayer::new(backend, PathKey).decision_timeout(decision),
    );
    let addr = {
        let server = server.clone();
        lock_tests::http::actix(move || {
            let server = server.clone();
            actix_web::App::new().service(web::scope("").wrap(lock.clone()).route(
                "/k",
                web::get().to(move || {
                    let server = server.clone();
                    async move {
                        // Redis stops answering while the lock is held.
                        server.pause();
                        HttpResponse::Ok().body("ok")
                    }
                }),
            ))
        })
    };
    let started = std::time::Instant::now();
    let reply = TestClient::new()
        .get(&format!("http://{addr}/k"), &[])
        .await;
    let took = started.elapsed();
    server.resume();
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    // Generous: the bound is one decision timeout.
    assert!(took < decision * 4, "answered after {took:?}");
}
