//! Stock and rate workloads.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::AnyBackend;
use lock_core::counter::{Reservation, Stock};
use lock_core::rate::{Algorithm, Policy, Quota, RateLimiter};
use lock_tests::history::{self, Call, History, Outcome, Reply, Violation};
use rand::Rng;
use rand::rngs::StdRng;

use crate::env::Env;
use crate::processes::{self, Workload};
use crate::worker::{Rec, Worker, clients, spawn, spawn_from};

pub(crate) const ITEMS: [(&str, u64); 3] = [("sku-a", 200), ("sku-b", 40), ("sku-c", 100)];
/// The worker number the settling after the run is recorded under.
const SETTLER: usize = 99;

/// Stock: decrements with and without operation ids, reservations
/// confirmed, cancelled or left to expire, restocks. After the faults,
/// every unanswered operation id is retried (and some answered ones) and
/// every order settled, then conservation is checked.
pub(crate) async fn stock(env: Arc<Env>) -> Vec<Violation> {
    stock_setup(&env).await;
    let clients = clients(&env).await;
    let mut workers = stock_workers(&env, &clients, 0);
    workers.extend(processes::spawn(&env, Workload::Stock).await);
    let mut found = env.nemesis(workers).await;
    found.extend(stock_check(&env).await);
    found
}

/// Sets the items' initial stock.
pub(crate) async fn stock_setup(env: &Env) {
    let direct = Stock::new(env.direct().await);
    for (item, n) in ITEMS {
        direct.set(item, n).await.expect("set");
    }
}

/// The workers of [`stock`], numbered from `first`.
pub(crate) fn stock_workers(
    env: &Arc<Env>,
    clients: &[Rec],
    first: usize,
) -> Vec<tokio::task::JoinHandle<()>> {
    spawn_from(env, clients, first, move |mut w: Worker| async move {
        let stock = Stock::new(w.client.inner().clone());
        let mut open: Vec<(&str, String)> = Vec::new();
        let history = w.env.history.clone();
        while !w.env.over() {
            let item = ITEMS[w.rng.random_range(0..ITEMS.len())].0;
            let n = w.rng.random_range(1..=3);
            match w.rng.random_range(0..100) {
                0..25 => {
                    let op = history.invoke(w.id, Call::Decrement(item.into(), n, None));
                    let r = stock.decrement(item, n).await;
                    history.record(op, &r, |p| Reply::Purchase(*p));
                }
                25..50 => {
                    let id = w.fresh();
                    let op =
                        history.invoke(w.id, Call::Decrement(item.into(), n, Some(id.clone())));
                    let r = stock.decrement_once(item, n, &id).await;
                    history.record(op, &r, |p| Reply::Purchase(*p));
                }
                50..70 => {
                    let (order, hold) = (w.fresh(), w.ms(300, 1500));
                    let op = history.invoke(w.id, Call::Reserve(item.into(), n, order.clone()));
                    let r = stock.reserve(item, n, &order, hold).await;
                    history.record(op, &r, |r| Reply::Reservation(*r));
                    if matches!(r, Ok(Reservation::Held { .. })) {
                        open.push((item, order));
                    }
                }
                70..85 if !open.is_empty() => {
                    let (item, order) = open.swap_remove(w.rng.random_range(0..open.len()));
                    settle(&history, w.id, &stock, item, &order, w.rng.random_bool(0.6)).await;
                }
                85..95 => {
                    let q = w.rng.random_range(1..=8);
                    let op = history.invoke(w.id, Call::Restock(item.into(), q));
                    let r = stock.restock(item, q).await;
                    history.record(op, &r, |s| Reply::Restocked(*s));
                }
                _ => {
                    let _ = stock.get(item).await;
                }
            }
            w.pause().await;
        }
    })
}

/// Once the faults are over: settles what is open and checks that stock
/// was conserved.
pub(crate) async fn stock_check(env: &Env) -> Vec<Violation> {
    let mut found = Vec::new();
    // What a partition held back has landed; holds may still run. A new
    // client: on a cluster, the first one's connections went through the
    // proxies the nemesis cut.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let after = Stock::new(env.direct().await);
    settle_all(env, &after).await;
    for (item, initial) in ITEMS {
        let mut remaining = after.get(item).await;
        for _ in 0..5 {
            if remaining.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
            remaining = after.get(item).await;
        }
        let remaining = remaining.unwrap_or_else(|e| panic!("cannot read {item} back: {e}"));
        found.extend(history::stock::check(
            &env.history,
            item,
            initial,
            remaining,
        ));
    }
    found
}

/// Confirms (or cancels) `order`, recorded.
async fn settle(
    history: &History,
    worker: usize,
    stock: &Stock<AnyBackend>,
    item: &str,
    order: &str,
    confirm: bool,
) -> bool {
    if confirm {
        let op = history.invoke(worker, Call::Confirm(item.into(), order.into()));
        let r = stock.confirm(item, order).await;
        history.record(op, &r, |s| Reply::Settle(*s));
        r.is_ok()
    } else {
        let op = history.invoke(worker, Call::Cancel(item.into(), order.into()));
        let r = stock.cancel(item, order).await;
        history.record(op, &r, |s| Reply::Settle(*s));
        r.is_ok()
    }
}

/// Retries every operation id no call got an answer for (and a few that
/// did: they must replay), and settles every order, until answered.
async fn settle_all(env: &Env, stock: &Stock<AnyBackend>) {
    let history = &env.history;
    let mut rng: StdRng = env.rng(SETTLER);
    let ops = history.ops();
    let mut ids = std::collections::BTreeMap::new();
    let mut orders = std::collections::BTreeMap::new();
    for op in &ops {
        match &op.call {
            Call::Decrement(item, n, Some(id)) => {
                let answered = matches!(op.outcome, Outcome::Ok(_));
                let entry = ids.entry(id.clone()).or_insert((item.clone(), *n, false));
                entry.2 |= answered;
            }
            Call::Reserve(item, _, order) => {
                orders.insert(order.clone(), item.clone());
            }
            _ => {}
        }
    }
    for (id, (item, n, answered)) in ids {
        if answered && !rng.random_bool(0.1) {
            continue;
        }
        for _ in 0..10 {
            let op = history.invoke(SETTLER, Call::Decrement(item.clone(), n, Some(id.clone())));
            let r = stock.decrement_once(&item, n, &id).await;
            history.record(op, &r, |p| Reply::Purchase(*p));
            if r.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    for (order, item) in orders {
        let confirm = rng.random_bool(0.5);
        for _ in 0..10 {
            if settle(history, SETTLER, stock, &item, &order, confirm).await {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The limiters: each algorithm with one quota and with two.
pub(crate) fn limiters() -> Vec<(String, Algorithm, Policy)> {
    let nz = |n| NonZeroU32::new(n).expect("nonzero");
    let mut all = Vec::new();
    for (tag, algorithm) in [
        ("fw", Algorithm::FixedWindow),
        ("sw", Algorithm::SlidingWindow),
        ("gcra", Algorithm::Gcra),
    ] {
        let one = Policy::new(algorithm).quota(Quota::per_second(nz(20)));
        let two = Policy::new(algorithm)
            .quota(Quota::new(nz(10), Duration::from_millis(500)).expect("quota"))
            .quota(Quota::new(nz(30), Duration::from_secs(3)).expect("quota"));
        all.push((format!("{tag}-one"), algorithm, one));
        all.push((format!("{tag}-two"), algorithm, two));
    }
    all
}

/// Rate limits: every worker checks one shared caller key against each
/// limiter in turn, at random costs.
pub(crate) async fn rate(env: Arc<Env>) -> Vec<Violation> {
    let clients = clients(&env).await;
    let mut workers = spawn(&env, &clients, move |mut w: Worker| async move {
        let history = w.env.history.clone();
        let limiters: Vec<(String, RateLimiter<AnyBackend>)> = limiters()
            .into_iter()
            .map(|(name, _, policy)| {
                let limiter =
                    RateLimiter::new(w.client.inner().clone(), &name, policy).expect("limiter");
                (name, limiter)
            })
            .collect();
        while !w.env.over() {
            let (name, limiter) = &limiters[w.rng.random_range(0..limiters.len())];
            let cost = if w.rng.random_bool(0.8) { 1 } else { 2 };
            let op = history.invoke(w.id, Call::Rate(name.clone(), cost));
            let r = limiter.check_cost("k", cost).await;
            history.record(op, &r, |d| Reply::Decision(d.allowed, d.granted));
            let d = w.ms(0, 10);
            tokio::time::sleep(d).await;
        }
    });
    workers.extend(processes::spawn(&env, Workload::Rate).await);
    let mut found = env.nemesis(workers).await;
    for (name, algorithm, policy) in limiters() {
        found.extend(history::rate::check(
            &env.history,
            &name,
            algorithm,
            policy.quotas(),
        ));
    }
    found
}
