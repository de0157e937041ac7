//! Every primitive over `rediss://` with an ACL user and password: a
//! `redis-server` with a TLS port and a certificate from a CA made for the
//! test (the client trusts that CA alone).

use lock_core::Error;
use lock_core::backend::{RedisBackend, RedisConfig};
use lock_tests::tls::{PASSWORD, TlsServer, USER};
use redis::{TlsCertificates, cmd};

fn client(server: &TlsServer, url: &str) -> redis::Client {
    redis::Client::build_with_tls(
        url,
        TlsCertificates {
            client_tls: None,
            root_cert: Some(server.ca_pem().to_vec()),
        },
    )
    .unwrap_or_else(|e| panic!("a TLS client for {url}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_primitive_works_over_tls_with_a_user() {
    let server = TlsServer::start();
    assert!(
        server
            .url()
            .starts_with(&format!("rediss://{USER}:{PASSWORD}@"))
    );
    let backend =
        RedisBackend::connect_with(client(&server, &server.url()), RedisConfig::default())
            .await
            .unwrap_or_else(|e| panic!("connect over TLS: {e}"));
    // The server sees the ACL user.
    let whoami: String = cmd("ACL")
        .arg("WHOAMI")
        .query_async(&mut backend.connection())
        .await
        .expect("WHOAMI");
    assert_eq!(whoami, USER);
    let on = async |case: &str| backend.with_prefix(format!("{case}:")).expect("prefix");
    lock_tests::lock_suite!(sequentially on);
    lock_tests::kinds_suite!(sequentially on);
    lock_tests::rate_suite!(sequentially on);
    lock_tests::counter_suite!(sequentially on);
    lock_tests::features_suite!(sequentially on);

    // A wrong password is refused, as a typed backend error.
    let port = server.server().tls_port().expect("a TLS port");
    let wrong = format!("rediss://{USER}:not-it@127.0.0.1:{port}/");
    match RedisBackend::connect_with(client(&server, &wrong), RedisConfig::default()).await {
        Err(Error::Backend(error)) => {
            // Said plainly, with redis-rs's error kept as the source.
            assert!(error.to_string().contains("authentication"), "{error}");
            let source = std::error::Error::source(&error).expect("a source");
            assert!(
                source.downcast_ref::<redis::RedisError>().is_some(),
                "{source:?}"
            );
        }
        other => panic!("a wrong password was let in: {other:?}"),
    }
    // And a client that does not trust the CA does not connect.
    let untrusted = redis::Client::open(server.url()).expect("url");
    assert!(
        RedisBackend::connect_with(untrusted, RedisConfig::default())
            .await
            .is_err()
    );
}
