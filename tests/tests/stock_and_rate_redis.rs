//! Redis-only checks of stock counters and rate limits: exactness across OS
//! processes, TTLs on every key written, and repair of a counter without TTL.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use lock_core::counter::{Purchase, Reservation, Stock};
use lock_core::rate::{Algorithm, Policy, Quota, RateLimiter};
use lock_tests::redis_backend;
use redis::Commands;

const WORKER: &str = env!("CARGO_BIN_EXE_lock-worker");

async fn run_workers(args: Vec<Vec<String>>) -> Vec<String> {
    let children: Vec<_> = args
        .into_iter()
        .map(|args| {
            tokio::process::Command::new(WORKER)
                .args(args)
                .stdout(std::process::Stdio::piped())
                .spawn()
                .expect("cannot start lock-worker")
        })
        .collect();
    let mut outputs = Vec::new();
    for child in children {
        let out = child.wait_with_output().await.expect("worker");
        assert!(out.status.success(), "worker failed: {out:?}");
        outputs.push(String::from_utf8_lossy(&out.stdout).trim().to_owned());
    }
    outputs
}

fn field(output: &str, name: &str) -> u64 {
    let mut words = output.split_whitespace();
    while let Some(word) = words.next() {
        if word == name {
            return words
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("no number after {name} in {output:?}"));
        }
    }
    panic!("no {name} in {output:?}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_buyers_in_four_processes_buy_exactly_the_stock() {
    let (server, backend) = redis_backend().await;
    let stock = Stock::new(backend);
    stock.set("flash", 100).await.expect("set");

    // Watch the raw counter while the sale runs: it must never go negative.
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (stop, mut conn) = (stop.clone(), server.connection());
        std::thread::spawn(move || {
            let mut lowest = i64::MAX;
            while !stop.load(Ordering::SeqCst) {
                let v: i64 = conn.get("lock:{flash}:stock").expect("GET");
                lowest = lowest.min(v);
            }
            lowest
        })
    };
    let args = (0..4)
        .map(|p| {
            vec![
                "buy".into(),
                server.url(),
                "flash".into(),
                "500".into(),
                format!("p{p}"),
            ]
        })
        .collect();
    let outputs = run_workers(args).await;
    stop.store(true, Ordering::SeqCst);
    let lowest = watcher.join().expect("watcher");

    let sold: u64 = outputs.iter().map(|o| field(o, "sold")).sum();
    let replayed: u64 = outputs.iter().map(|o| field(o, "replayed")).sum();
    assert_eq!(sold, 100, "outputs: {outputs:?}");
    assert_eq!(replayed, 100, "every retry of a sale must be a replay");
    assert_eq!(stock.get("flash").await.expect("get"), Some(0));
    assert!(lowest >= 0, "stock went down to {lowest}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixed_window_shared_by_four_processes_allows_exactly_the_limit() {
    let (server, _backend) = redis_backend().await;
    let args = (0..4)
        .map(|_| {
            ["hit", &server.url(), "shared", "100", "60000", "200"]
                .map(String::from)
                .to_vec()
        })
        .collect();
    let outputs = run_workers(args).await;
    let allowed: u64 = outputs.iter().map(|o| field(o, "allowed")).sum();
    assert_eq!(allowed, 100, "outputs: {outputs:?}");
}

fn ttls(conn: &mut redis::Connection) -> Vec<(String, i64)> {
    let keys: Vec<String> = conn.keys("*").expect("KEYS");
    keys.into_iter()
        .map(|k| {
            let ttl: i64 = conn.pttl(&k).expect("PTTL");
            (k, ttl)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rate_limit_key_has_a_ttl() {
    let (server, backend) = redis_backend().await;
    let quotas = [
        Quota::per_second(NonZeroU32::MIN.saturating_add(4)),
        Quota::per_hour(NonZeroU32::MIN.saturating_add(99)),
    ];
    for algorithm in [
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::Gcra,
    ] {
        let policy = quotas
            .iter()
            .cloned()
            .fold(Policy::new(algorithm), Policy::quota);
        let limiter = RateLimiter::new(backend.clone(), "ttl", policy).expect("policy");
        for _ in 0..7 {
            limiter.check("client").await.expect("check");
        }
    }
    let ttls = ttls(&mut server.connection());
    assert_eq!(ttls.len(), 6, "two keys per algorithm: {ttls:?}");
    for (key, ttl) in ttls {
        assert!(
            key.starts_with("lock:{ttl:client}:"),
            "{key} lacks the hash tag"
        );
        assert!(ttl > 0, "{key} has no TTL ({ttl})");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_counter_without_ttl_is_repaired() {
    let (server, backend) = redis_backend().await;
    let quota = Quota::per_minute(NonZeroU32::MIN.saturating_add(2));
    let limiter = RateLimiter::new(
        backend.clone(),
        "repair",
        Policy::new(Algorithm::FixedWindow).quota(quota.clone()),
    )
    .expect("policy");
    let mut conn = server.connection();
    // A counter left without a TTL (say, by a client that died between INCR
    // and EXPIRE) would block the key forever.
    let key = "lock:{repair:k}:fw:3:60000";
    let () = conn.set(key, 3).expect("SET");
    let d = limiter.check("k").await.expect("check");
    assert!(!d.allowed);
    let ttl: i64 = conn.pttl(key).expect("PTTL");
    assert!(ttl > 0 && ttl <= 60_000, "counter not repaired: {ttl}");
    assert!(d.retry_after <= Duration::from_secs(60));

    // The same over several quotas, where the repair takes the other path
    // of the script; the request is allowed, so both counters move.
    let hourly = Quota::per_hour(NonZeroU32::MIN.saturating_add(99));
    let limiter = RateLimiter::new(
        backend,
        "repair2",
        Policy::new(Algorithm::FixedWindow)
            .quota(quota)
            .quota(hourly),
    )
    .expect("policy");
    let minute = "lock:{repair2:k}:fw:3:60000";
    let hour = "lock:{repair2:k}:fw:100:3600000";
    let () = conn.set(minute, 1).expect("SET");
    let d = limiter.check("k").await.expect("check");
    assert!(d.allowed);
    let counts: (i64, i64) = (conn.get(minute).expect("GET"), conn.get(hour).expect("GET"));
    assert_eq!(counts, (2, 1));
    for (key, max) in [(minute, 60_000), (hour, 3_600_000)] {
        let ttl: i64 = conn.pttl(key).expect("PTTL");
        assert!(ttl > 0 && ttl <= max, "{key} not repaired: {ttl}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stock_keys_ttls() {
    let (server, backend) = redis_backend().await;
    let stock = Stock::new(backend);
    stock.set("sku", 10).await.expect("set");
    stock.decrement_once("sku", 1, "op-1").await.expect("dec");
    let held = stock
        .reserve("sku", 2, "order-1", Duration::from_millis(300))
        .await
        .expect("reserve");
    assert!(matches!(held, Reservation::Held { .. }));
    stock
        .reserve("sku", 1, "order-2", Duration::from_secs(30))
        .await
        .expect("reserve");
    stock.confirm("sku", "order-2").await.expect("confirm");

    let mut conn = server.connection();
    for (key, ttl) in ttls(&mut conn) {
        match key.as_str() {
            // The counter the user created stays.
            "lock:{sku}:stock" => assert_eq!(ttl, -1, "{key}"),
            // The holds live as long as the last of them (300 ms).
            "lock:{sku}:holds" | "lock:{sku}:held" => {
                assert!(ttl > 0 && ttl <= 301, "{key}: {ttl}")
            }
            _ => assert!(ttl > 0, "{key} has no TTL ({ttl})"),
        }
    }
    // Once the last hold expired its keys are gone, with no one touching
    // the item, and its units are available.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let keys: Vec<String> = conn.keys("lock:{sku}:hold*").expect("KEYS");
    assert!(keys.is_empty(), "hold keys outlived their holds: {keys:?}");
    assert_eq!(stock.get("sku").await.expect("get"), Some(8));
}

/// Ten thousand holds that expired together all come back at the next
/// read, and the whole stock can be bought at once; while they were live,
/// no hold key was without a TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_expired_holds_all_come_back() {
    let (server, backend) = redis_backend().await;
    let stock = Stock::new(backend);
    stock.set("bulk", 10_300).await.expect("set");
    let hold = Duration::from_millis(1500);
    let orders: Vec<_> = (0..10_000)
        .map(|i| {
            let stock = stock.clone();
            tokio::spawn(async move { stock.reserve("bulk", 1, &format!("o{i}"), hold).await })
        })
        .collect();
    for order in orders {
        let held = order.await.expect("join").expect("reserve");
        assert!(matches!(held, Reservation::Held { .. }), "{held:?}");
    }
    assert_eq!(stock.get("bulk").await.expect("get"), Some(300));
    let mut conn = server.connection();
    for (key, ttl) in ttls(&mut conn) {
        if key != "lock:{bulk}:stock" {
            assert!(ttl > 0, "{key} has no TTL ({ttl})");
        }
    }
    tokio::time::sleep(hold + Duration::from_millis(100)).await;
    assert_eq!(stock.get("bulk").await.expect("get"), Some(10_300));
    assert_eq!(
        stock.decrement("bulk", 10_300).await.expect("decrement"),
        Purchase::Done {
            remaining: 0,
            replayed: false
        }
    );
}

/// Redis keeps a key through the whole millisecond of its expiry, so a
/// fixed-window counter whose `PTTL` is 0 is still there. The script counts
/// it as gone: otherwise a refusal in that millisecond would say "retry in
/// 0 ms", and a caller who waited out an earlier refusal's `retry_after`
/// could be refused again. Checks made back to back across window ends land
/// in that last millisecond many times over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixed_window_refusals_always_say_a_millisecond_or_more() {
    let (_server, backend) = redis_backend().await;
    let quota =
        Quota::new(NonZeroU32::new(1).expect("1"), Duration::from_millis(5)).expect("quota");
    let limiter = RateLimiter::new(
        backend,
        "edge",
        Policy::new(Algorithm::FixedWindow).quota(quota.clone()),
    )
    .expect("valid");
    // Thirty windows with refusals in them; on a busy machine a check can
    // take longer than a window, so more windows may be needed to get them.
    let (mut refused_in, mut window) = (0, 0);
    let started = Instant::now();
    while refused_in < 30 && started.elapsed() < Duration::from_secs(20) {
        window += 1;
        let key = format!("w{window}");
        assert!(limiter.check(&key).await.expect("backend").allowed);
        let mut refused = false;
        loop {
            let decision = limiter.check(&key).await.expect("backend");
            if decision.allowed {
                break;
            }
            refused = true;
            assert!(
                decision.retry_after >= Duration::from_millis(1),
                "window {window}: {decision:?}"
            );
        }
        refused_in += u32::from(refused);
    }
    assert!(
        refused_in >= 30,
        "refusals checked in only {refused_in} of {window} windows"
    );
}
