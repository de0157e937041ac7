//! The fault ("nemesis") suite: random workloads of every primitive from
//! several tasks over three clients, each client behind a fault proxy, and
//! from two `lock-worker` processes besides
//! ([`processes`]), while a nemesis chosen from a seed cuts connections
//! after a command was forwarded, cuts them at random bytes, delays and
//! black-holes them, and pauses the server (SIGSTOP), kills and restarts
//! it (with its data: `appendfsync always`), fails cluster shards over
//! (graceful; `FORCE` in `cluster-locks`, where overlaps after a failover
//! are only reported, as documented; `TAKEOVER` on a lagging replica where
//! writes wait for replicas or losses are only reported), kills a minority
//! of Redlock's five servers, pauses a master's replica (`replica-sync`),
//! fails a Sentinel set over while writes wait for its replica
//! (`sentinel-synced`, every server and the Sentinel behind a proxy), and
//! pauses a client process past its lease (`paused-client`, against a
//! fenced resource). Every operation goes into a history
//! ([`lock_tests::history`]) that is checked afterwards: no two valid
//! guards conflict, fencing tokens rise, no guard is returned already
//! lost, releases answer consistently, stock is conserved, rate limits
//! hold, every error is typed.
//!
//! Each scenario prints a row (operations, faults injected, violations by
//! kind) and fails on any violation, printing the seed:
//!
//! ```text
//! NEMESIS_SEED=42 NEMESIS_SECONDS=60 cargo test -p lock-tests --test nemesis -- --nocapture
//! ```
//!
//! `NEMESIS_SEED` picks the faults and the workloads' choices (random when
//! unset); `NEMESIS_SECONDS` is each scenario's length (10 s by default);
//! `NEMESIS_DEBUG=1` also lists every operation whose outcome was unknown.
//! Scenarios run one at a time whatever the test threads. `scripts/nemesis`
//! runs them long. The `cluster_*` scenarios run on a Redis Cluster whose
//! nodes announce a proxy each (`cluster-announce-port`), so every
//! connection a cluster client makes can be cut.

#[path = "nemesis/counters.rs"]
mod counters;
#[path = "nemesis/env.rs"]
mod env;
#[path = "nemesis/faults.rs"]
mod faults;
#[path = "nemesis/fenced.rs"]
mod fenced;
#[path = "nemesis/locks.rs"]
mod locks;
#[path = "nemesis/processes.rs"]
mod processes;
#[path = "nemesis/replicated.rs"]
mod replicated;
#[path = "nemesis/report.rs"]
mod report;
#[path = "nemesis/worker.rs"]
mod worker;
#[path = "nemesis/world.rs"]
mod world;

use env::{cluster_scenario, scenario, scenario_on};
use world::Topology;

#[test]
fn plain_lock_with_fencing() {
    scenario("plain", |env| locks::exclusive(env, false));
}

#[test]
fn fair_lock_with_fencing() {
    scenario("fair", |env| locks::exclusive(env, true));
}

#[test]
fn reentrant_lock() {
    scenario("reentrant", |env| locks::reentrant(env, false));
}

#[test]
fn fair_reentrant_lock() {
    scenario("fair-reentrant", |env| locks::reentrant(env, true));
}

#[test]
fn read_write_lock() {
    scenario("read-write", locks::read_write);
}

#[test]
fn semaphore() {
    scenario("semaphore", locks::semaphore);
}

#[test]
fn multi_lock_with_a_short_lease() {
    scenario("multi", locks::multi);
}

#[test]
fn stock() {
    scenario("stock", counters::stock);
}

#[test]
fn rate_limits() {
    scenario("rate", counters::rate);
}

#[test]
fn cluster_stock() {
    cluster_scenario("cluster-stock", counters::stock);
}

#[test]
fn cluster_locks() {
    // Forced failovers too: lossy without `sync_replicas`, so overlaps
    // after one are only reported.
    let topology = Topology::Cluster {
        synced: false,
        force: true,
    };
    scenario_on("cluster-locks", topology, |env| {
        locks::exclusive(env, false)
    });
}

#[test]
fn cluster_synced_locks() {
    let topology = Topology::Cluster {
        synced: true,
        force: false,
    };
    scenario_on("cluster-synced", topology, |env| {
        locks::exclusive(env, true)
    });
}

#[test]
fn sentinel_synced() {
    scenario_on(
        "sentinel-synced",
        Topology::Sentinel,
        replicated::sentinel_synced,
    );
}

#[test]
fn redlock() {
    scenario_on("redlock", Topology::Redlock, replicated::redlock);
}

#[test]
fn replica_sync_fair_lock() {
    scenario_on(
        "replica-sync",
        Topology::Replicated,
        replicated::replica_sync,
    );
}

#[test]
fn paused_client_with_a_fenced_resource() {
    scenario("paused-client", fenced::paused_client);
}
