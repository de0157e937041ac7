//! The redis-server harness itself: servers start on distinct free ports, and
//! stop, pause, resume and restart (with or without persistence) as told.

use std::time::Duration;

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
