//! The redis-server harness itself: servers start on distinct free ports, and
//! stop, pause, resume and restart (with or without persistence) as told; a
//! delay proxy adds latency to their round trips.

use std::time::{Duration, Instant};

use lock_tests::latency::DelayProxy;
use lock_tests::{RedisServer, ServerOptions};
use redis::Commands;

fn answers(server: &RedisServer) -> bool {
    let Ok(mut conn) = server
        .client()
        .get_connection_with_timeout(Duration::from_millis(300))
    else {
        return false;
    };
    let _ = conn.set_read_timeout(Some(Duration::from_millis(300)));
    redis::cmd("PING").query::<String>(&mut conn).is_ok()
}

#[test]
fn several_servers_on_distinct_ports() {
    let servers = RedisServer::start_many(5);
    let mut ports: Vec<u16> = servers.iter().map(RedisServer::port).collect();
    ports.sort_unstable();
    ports.dedup();
    assert_eq!(ports.len(), 5);
    assert!(servers.iter().all(answers));
}

#[test]
fn restart_without_persistence_starts_empty() {
    let mut server = RedisServer::start();
    let port = server.port();
    let () = server.connection().set("k", 1).expect("SET");
    server.restart();
    assert_eq!(server.port(), port);
    let v: Option<i64> = server.connection().get("k").expect("GET");
    assert_eq!(v, None);
}

#[test]
fn restart_with_persistence_keeps_data() {
    let mut server = RedisServer::start_with(ServerOptions::new().persistent());
    let () = server.connection().set("k", 7).expect("SET");
    server.kill();
    assert!(!server.is_running());
    assert!(!answers(&server));
    server.restart();
    let v: Option<i64> = server.connection().get("k").expect("GET");
    assert_eq!(v, Some(7));
}

#[test]
fn pause_and_resume() {
    let server = RedisServer::start();
    server.pause();
    assert!(!answers(&server), "a paused server answered");
    server.resume();
    assert!(answers(&server));
}

#[test]
fn stop_ends_the_process() {
    let mut server = RedisServer::start();
    server.stop();
    assert!(!server.is_running());
    assert!(!answers(&server));
}

#[test]
fn delay_proxy_delays_each_direction_and_closes_on_drop() {
    let server = RedisServer::start();
    let one_way = Duration::from_millis(25);
    let proxy = DelayProxy::to_server(&server, one_way);
    let mut conn = redis::Client::open(proxy.url())
        .expect("proxy url")
        .get_connection_with_timeout(Duration::from_secs(5))
        .expect("connect through the proxy");
    conn.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("read timeout");
    let round_trip = 2 * one_way;

    let started = Instant::now();
    let pong: String = redis::cmd("PING").query(&mut conn).expect("PING");
    let elapsed = started.elapsed();
    assert_eq!(pong, "PONG");
    assert!(elapsed >= round_trip, "a round trip took {elapsed:?}");
    assert!(elapsed < 5 * round_trip, "a round trip took {elapsed:?}");

    // A pipeline of ten commands waits for one round trip, not ten.
    let mut pipe = redis::pipe();
    for _ in 0..10 {
        pipe.cmd("PING");
    }
    let started = Instant::now();
    let pongs: Vec<String> = pipe.query(&mut conn).expect("pipelined PINGs");
    let elapsed = started.elapsed();
    assert_eq!(pongs.len(), 10);
    assert!(elapsed >= round_trip, "the pipeline took {elapsed:?}");
    assert!(elapsed < 5 * round_trip, "the pipeline took {elapsed:?}");

    // Bytes arrive whole and in order, in many chunks.
    let value: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let () = conn.set("big", &value).expect("SET through the proxy");
    let back: Vec<u8> = server.connection().get("big").expect("GET directly");
    assert!(back == value, "the server stored other bytes");
    let back: Vec<u8> = conn.get("big").expect("GET through the proxy");
    assert!(back == value, "other bytes came back through the proxy");

    drop(proxy);
    assert!(
        redis::cmd("PING").query::<String>(&mut conn).is_err(),
        "a connection outlived its proxy"
    );
    assert!(answers(&server));
}
