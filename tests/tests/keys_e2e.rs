//! Keys from path parameters over real HTTP, on axum and actix-web: a key
//! is exactly what the request says, or the request gets a 400 saying why,
//! and the same 400 on both frameworks. An empty parameter, one that is not
//! UTF-8 once decoded, one too long for a key and one with a brace are
//! each refused, on a lock route (the reason names the lock) and on a
//! rate-limit route (the reason names the rate limit). Keys that are fine
//! but written differently (`%2F`, `%25`) stay apart and match what the
//! handler's own path extractor sees.

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::time::Duration;

use axum::Router;
use axum::extract::Path;
use axum::routing::post;
use http::StatusCode;
use lock_axum::backend::MemoryBackend;
use lock_axum::key::PathParam;
use lock_axum::rate::{Algorithm, Policy, Quota, RateLimiter};
use lock_axum::{LockLayer, RateLimitLayer};
use lock_tests::http::{Reply, TestClient, TestServer};

/// 600 bytes: longer than any key may be (512 bytes with its scope).
fn oversized() -> String {
    "x".repeat(600)
}

fn lock() -> LockLayer<MemoryBackend, PathParam> {
    LockLayer::new(MemoryBackend::new(), PathParam::new("id"))
        .scope("job")
        .wait(Duration::ZERO)
}

fn limit() -> RateLimitLayer<MemoryBackend, PathParam> {
    let quota = Quota::per_minute(NonZeroU32::new(100).expect("positive"));
    let limiter = RateLimiter::new(
        MemoryBackend::new(),
        "per-job",
        Policy::new(Algorithm::FixedWindow).quota(quota),
    )
    .expect("valid");
    RateLimitLayer::new(limiter, PathParam::new("id"))
}

/// One request a minute per id, for the axum and the actix-web server
/// both: a request on either counts against the other.
fn once() -> RateLimitLayer<MemoryBackend, PathParam> {
    let limiter = RateLimiter::new(
        MemoryBackend::new(),
        "once",
        Policy::new(Algorithm::FixedWindow).quota(Quota::per_minute(NonZeroU32::MIN)),
    )
    .expect("valid");
    RateLimitLayer::new(limiter, PathParam::new("id"))
}

/// `POST /jobs/{id}/run` under a lock per id, `POST /limited/{id}/go`
/// under a rate limit per id, `POST /once/{id}` under `once`; each answers
/// with the id its handler saw. (axum matches an empty parameter between
/// two slashes, not at the end of the path.)
async fn axum_server(once: RateLimitLayer<MemoryBackend, PathParam>) -> TestServer {
    async fn echo(Path(id): Path<String>) -> String {
        format!("id={id}")
    }
    let app = Router::new()
        .route("/jobs/{id}/run", post(echo).layer(lock()))
        .route("/limited/{id}/go", post(echo).layer(limit()))
        .route("/once/{id}", post(echo).layer(once));
    TestServer::start(app).await
}

/// The same routes on actix-web; `/jobs-any/{id}/run` takes any segment,
/// the empty one included (actix-web's default `{id}` needs one character).
fn actix_server(once: RateLimitLayer<MemoryBackend, PathParam>) -> SocketAddr {
    use actix_web::web;
    let (lock, limit, once) = (
        lock_actix::LockMiddleware::new(lock()),
        lock_actix::RateLimitMiddleware::new(limit()),
        lock_actix::RateLimitMiddleware::new(once),
    );
    lock_tests::http::actix(move || {
        let echo = || web::post().to(|id: web::Path<String>| async move { format!("id={id}") });
        actix_web::App::new()
            .service(
                web::resource("/jobs/{id}/run")
                    .wrap(lock.clone())
                    .route(echo()),
            )
            .service(
                web::resource("/jobs-any/{id:[^/]*}/run")
                    .wrap(lock.clone())
                    .route(echo()),
            )
            .service(
                web::resource("/limited/{id:[^/]*}/go")
                    .wrap(limit.clone())
                    .route(echo()),
            )
            .service(web::resource("/once/{id}").wrap(once.clone()).route(echo()))
    })
}

struct Servers {
    axum: TestServer,
    actix: SocketAddr,
    client: TestClient,
}

impl Servers {
    async fn start() -> Self {
        let once = once();
        Servers {
            axum: axum_server(once.clone()).await,
            actix: actix_server(once),
            client: TestClient::new(),
        }
    }

    /// `POST` of the lock route and of the rate-limit route with `id`
    /// (already percent-encoded as the test wants it), on axum and on
    /// actix-web: `[(axum lock, actix lock), (axum limit, actix limit)]`.
    async fn both(&self, id: &str) -> [(Reply, Reply); 2] {
        let post = |url: String| {
            let client = self.client.clone();
            async move { client.send("POST", &url, &[]).await }
        };
        let axum_lock = post(self.axum.url(&format!("/jobs/{id}/run"))).await;
        let actix_lock = post(format!("http://{}/jobs-any/{id}/run", self.actix)).await;
        let axum_limit = post(self.axum.url(&format!("/limited/{id}/go"))).await;
        let actix_limit = post(format!("http://{}/limited/{id}/go", self.actix)).await;
        [(axum_lock, actix_lock), (axum_limit, actix_limit)]
    }

    /// Asserts that `id` is refused with 400 on both routes of both
    /// frameworks, with the same reason on both, which names the lock or
    /// the rate limit and contains `why`; returns the two reasons.
    async fn refused(&self, id: &str, why: &str) -> [String; 2] {
        let [(axum_lock, actix_lock), (axum_limit, actix_limit)] = self.both(id).await;
        for (what, reply) in [
            ("axum lock", &axum_lock),
            ("actix lock", &actix_lock),
            ("axum limit", &axum_limit),
            ("actix limit", &actix_limit),
        ] {
            assert_eq!(
                reply.status,
                StatusCode::BAD_REQUEST,
                "{what} for {id:.40}: {:?}",
                reply.text()
            );
            assert!(
                reply.text().contains(why),
                "{what} for {id:.40}: {:?} should say {why:?}",
                reply.text()
            );
        }
        assert_eq!(axum_lock.text(), actix_lock.text(), "the same on both");
        assert_eq!(axum_limit.text(), actix_limit.text(), "the same on both");
        [axum_lock.text(), axum_limit.text()]
    }
}

/// A reason given on a lock route names the lock, not a rate limit; one on
/// a rate-limit route names the rate limit.
fn names_its_layer([on_lock, on_limit]: &[String; 2]) {
    assert!(on_lock.contains("`job` lock"), "{on_lock:?}");
    assert!(!on_lock.contains("rate"), "{on_lock:?}");
    assert!(on_limit.contains("`per-job` rate limit"), "{on_limit:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_path_parameter_is_a_400_on_both() {
    let servers = Servers::start().await;
    servers
        .refused("", "the path parameter `id` is empty")
        .await;
    // With actix-web's default pattern, no route matches an empty segment
    // at all: no key, no lock.
    let default = servers
        .client
        .send("POST", &format!("http://{}/jobs//run", servers.actix), &[])
        .await;
    assert_eq!(default.status, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_parameter_that_is_not_utf8_is_a_400_on_both() {
    let servers = Servers::start().await;
    for id in ["%FF", "a%FFb", "%C3"] {
        servers
            .refused(
                id,
                "the path parameter `id` is not valid UTF-8 once decoded",
            )
            .await;
    }
    // Two different invalid ids never share a key (they are refused, not
    // both turned into "\u{FFFD}").
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_key_is_a_400_naming_its_layer_on_both() {
    let servers = Servers::start().await;
    let reasons = servers.refused(&oversized(), "600 bytes long").await;
    names_its_layer(&reasons);
    // The room left by the scope: 512 - "job:" and 512 - "per-job:".
    assert!(reasons[0].contains("at most 508"), "{:?}", reasons[0]);
    assert!(reasons[1].contains("at most 504"), "{:?}", reasons[1]);
    // The longest key that fits is taken as it is.
    let [(axum, actix), _] = servers.both(&"x".repeat(508)).await;
    assert_eq!(
        (axum.status, actix.status),
        (StatusCode::OK, StatusCode::OK)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_with_a_brace_is_a_400_naming_its_layer_on_both() {
    let servers = Servers::start().await;
    for id in ["%7Bx%7D", "a%7D"] {
        let reasons = servers.refused(id, "must not contain `{` or `}`").await;
        names_its_layer(&reasons);
    }
    let reasons = servers.refused("a%0Ab", "control characters").await;
    names_its_layer(&reasons);
}

/// Ids written with escapes the routers keep apart are keys of their own,
/// equal to what the handler's path extractor sees, on both frameworks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn escaped_ids_are_keys_as_the_handler_sees_them() {
    let servers = Servers::start().await;
    for (id, seen) in [
        ("a%2Fb", "a/b"),
        ("a%252Fb", "a%2Fb"),
        ("a%2Bb", "a+b"),
        ("a+b", "a+b"),
        ("%C3%A9t%C3%A9", "été"),
        ("%EF%BF%BD", "\u{FFFD}"),
    ] {
        let [(axum_lock, actix_lock), (axum_limit, actix_limit)] = servers.both(id).await;
        for (what, reply) in [
            ("axum lock", &axum_lock),
            ("actix lock", &actix_lock),
            ("axum limit", &axum_limit),
            ("actix limit", &actix_limit),
        ] {
            assert_eq!(
                reply.status,
                StatusCode::OK,
                "{what} {id}: {:?}",
                reply.text()
            );
            assert_eq!(reply.text(), format!("id={seen}"), "{what} {id}");
        }
    }
    // One key per id, the same on both: the first request of each id is
    // allowed, on axum; the second, on actix-web, is refused; `%61` is `a`.
    let once = |server: &str, id: &str| {
        let (client, url) = (servers.client.clone(), format!("{server}/once/{id}"));
        async move { client.send("POST", &url, &[]).await.status }
    };
    let (axum, actix) = (servers.axum.url(""), format!("http://{}", servers.actix));
    for (first, second) in [("a%2Fb", "a%2Fb"), ("a%252Fb", "a%252Fb"), ("a", "%61")] {
        assert_eq!(once(&axum, first).await, StatusCode::OK, "{first}");
        assert_eq!(
            once(&actix, second).await,
            StatusCode::TOO_MANY_REQUESTS,
            "{first} on axum, then {second} on actix-web: one key"
        );
    }
}
