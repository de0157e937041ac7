//! Workloads from other processes: beside a scenario's tasks, each of a
//! few `lock-worker serve` processes (its own client, through a proxy of
//! the scenario's) runs random operations on the same locks and items,
//! one at a time. The test records each call around the exchange with the
//! process: invoked before the command is written, completed after the
//! answer is read, and a guard's lease counted from when the command was
//! sent (the process reads its clock later), all in the library's favour.
//! Every topology: one server, a master whose writes wait for its
//! replica, Redlock's five servers, a cluster, a Sentinel set.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_core::counter::{Purchase, Reservation, Settle};
use lock_core::rate::Algorithm;
use lock_tests::history::{Call, ErrorSeen, Grant, OpId, Reply, untyped_reason};
use rand::Rng;
use rand::rngs::StdRng;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::counters::{ITEMS, limiters};
use crate::env::Env;
use crate::locks::{MULTI_LEASE, MULTI_NAMES, multi_names};
use crate::world::{Topology, World};

const WORKER: &str = env!("CARGO_BIN_EXE_lock-worker");

/// Processes per scenario.
const PROCESSES: usize = 2;
/// Their worker numbers in the history start here.
pub(crate) const FIRST: usize = 1000;
/// The permits of the served semaphores (`lock-worker`'s `PERMITS`).
const PERMITS: u32 = 3;

/// What the processes run (the tasks' workloads of the same names).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Workload {
    /// Plain or fair locks with fencing.
    Exclusive { fair: bool },
    /// Reentrant (or fair reentrant) locks, often re-entered.
    Reentrant { fair: bool },
    /// Read-write locks.
    ReadWrite,
    /// Semaphores of [`PERMITS`], several permits at a time.
    Semaphore,
    /// Stock decrements with and without operation ids.
    Stock,
    /// Rate checks of the tasks' limiters, at random costs.
    Rate,
    /// Redlock over the scenario's five servers.
    Redlock,
    /// Multi-locks over overlapping sets of names, and single holders of
    /// those names.
    Multi,
}

/// Starts the processes of `workload`, connected as the scenario's tasks
/// are (through the same proxies).
pub(crate) async fn spawn(env: &Arc<Env>, workload: Workload) -> Vec<tokio::task::JoinHandle<()>> {
    spawn_from(env, workload, 0).await
}

/// As [`spawn`], numbering the processes from `first` (for a second
/// workload in the same scenario).
pub(crate) async fn spawn_from(
    env: &Arc<Env>,
    workload: Workload,
    first: usize,
) -> Vec<tokio::task::JoinHandle<()>> {
    let urls: Vec<String> = env.proxies.iter().map(|p| p.url()).collect();
    let (replicas, sync) = env.topology.sync().unwrap_or((0, Duration::ZERO));
    let args = |p: usize| -> Vec<String> {
        let (topology, urls) = match (&env.world, env.topology) {
            (_, Topology::Redlock) => {
                return [vec!["serve-redlock".to_owned()], urls.clone()].concat();
            }
            (_, Topology::One | Topology::Replicated) => {
                ("one", vec![urls[p % urls.len()].clone()])
            }
            (_, Topology::Cluster { .. }) => ("cluster", urls.clone()),
            (World::Sentinel(set), _) => ("sentinel", set.sentinel_urls()),
            (_, Topology::Sentinel) => unreachable!("a Sentinel topology has a Sentinel set"),
        };
        let head = [
            topology.to_owned(),
            replicas.to_string(),
            sync.as_millis().to_string(),
        ];
        [vec!["serve".to_owned()], head.to_vec(), urls].concat()
    };
    let mut started = Vec::new();
    for p in 0..PROCESSES {
        let mut process = Process::start(env.clone(), FIRST + first + p, &args(p));
        // Connected before the nemesis starts: a fault then is the
        // workload's, never a failed start.
        process.ready().await;
        started.push(tokio::spawn(process.run(workload)));
    }
    started
}

/// One `lock-worker serve` and the test's end of it.
struct Process {
    id: usize,
    env: Arc<Env>,
    rng: StdRng,
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Lines<BufReader<ChildStdout>>,
    calls: u64,
    /// Reservations held, to settle: (item, order).
    open: Vec<(&'static str, String)>,
}

/// A guard the process holds: its op and its handle there.
struct Held {
    op: OpId,
    handle: String,
}

impl Process {
    fn start(env: Arc<Env>, id: usize, args: &[String]) -> Self {
        let mut child = Command::new(WORKER)
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {WORKER}: {e}"));
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("stdout")).lines();
        Process {
            rng: env.rng(id),
            id,
            env,
            child,
            stdin,
            stdout,
            calls: 0,
            open: Vec::new(),
        }
    }

    /// Waits for the process to say it is connected.
    async fn ready(&mut self) {
        let line = tokio::time::timeout(Duration::from_secs(30), self.stdout.next_line()).await;
        match line {
            Ok(Ok(Some(line))) if line == "ready" => {}
            other => panic!("process {} did not start: {other:?}", self.id),
        }
    }

    /// Sends `command`, returns the answer's words. A process that does
    /// not answer within a minute, or is gone, fails the worker.
    async fn ask(&mut self, command: &str) -> Vec<String> {
        let stdin = self.stdin.as_mut().expect("open");
        let sent = stdin.write_all(format!("{command}\n").as_bytes()).await;
        sent.unwrap_or_else(|e| panic!("process {}: {command}: {e}", self.id));
        let line = tokio::time::timeout(Duration::from_secs(60), self.stdout.next_line()).await;
        match line {
            Ok(Ok(Some(line))) => line.split(' ').map(str::to_owned).collect(),
            other => panic!("process {}: no answer to {command}: {other:?}", self.id),
        }
    }

    fn fresh(&mut self) -> String {
        self.calls += 1;
        format!("p{}-{}-{}", self.id, self.calls, self.env.seed % 10_000)
    }

    fn ms(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(self.rng.random_range(lo..hi))
    }

    /// As the tasks wait: often not at all, else up to a second.
    fn wait(&mut self) -> Duration {
        if self.rng.random_bool(0.4) {
            Duration::ZERO
        } else {
            self.ms(0, 1000)
        }
    }

    /// As the tasks hold: mostly briefly, sometimes past a fixed lease.
    fn hold_time(&mut self) -> Duration {
        if self.rng.random_bool(0.15) {
            self.ms(500, 1300)
        } else {
            self.ms(0, 300)
        }
    }

    /// Records an error answer (`err <backend> <why> <Debug>...`).
    fn error(&self, op: OpId, words: &[String]) {
        let seen = ErrorSeen {
            text: words.get(3..).unwrap_or_default().join(" "),
            untyped: words.get(2).and_then(|why| untyped_reason(why)),
        };
        let backend = words.get(1).is_some_and(|b| b == "1");
        self.env.history.error_seen(op, seen, backend);
    }

    /// Takes `lock` (the history's name: `<kind>:<name>`) for `owner`:
    /// `command` is the rest of the `lock` command after the handle.
    async fn acquire(
        &mut self,
        lock: &str,
        owner: &str,
        (shared, permits): (bool, u32),
        command: &str,
    ) -> Option<Held> {
        let call = Call::Acquire {
            lock: lock.to_owned(),
            owner: owner.to_owned(),
            shared,
            permits,
        };
        let op = self.env.history.invoke(self.id, call);
        let handle = self.fresh();
        let sent = Instant::now();
        let words = self.ask(&format!("lock {handle} {command}")).await;
        match words.first().map(String::as_str) {
            Some("got") => {
                let fence = words[1].parse().ok();
                let valid: u64 = words[2].parse().expect("valid-us");
                let lost = words[3..].join(" ");
                let grant = Grant {
                    fence,
                    valid_until: sent + Duration::from_micros(valid),
                    returned_lost: (lost != "-").then_some(lost),
                };
                self.env.history.ok(op, Reply::Granted(grant));
                Some(Held { op, handle })
            }
            Some("busy") => {
                self.env.history.ok(op, Reply::Busy);
                None
            }
            _ => {
                self.error(op, &words);
                None
            }
        }
    }

    /// Holds `held` for `d`, noting their leases as watchdogs renew them.
    async fn hold(&mut self, held: &[&Held], d: Duration) {
        let end = Instant::now() + d;
        loop {
            for h in held {
                let sent = Instant::now();
                let words = self.ask(&format!("valid {}", h.handle)).await;
                let left: u64 = words[1].parse().expect("valid-us");
                if left > 0 {
                    let until = sent + Duration::from_micros(left);
                    self.env.history.valid_until(h.op, until);
                }
            }
            let now = Instant::now();
            if now >= end {
                return;
            }
            tokio::time::sleep((end - now).min(Duration::from_millis(50))).await;
        }
    }

    /// Releases `held`, or sometimes drops it (a release in the
    /// background, whose answer nobody hears).
    async fn release(&mut self, held: Held) {
        let op = self
            .env
            .history
            .invoke(self.id, Call::Release(vec![held.op]));
        if self.rng.random_bool(0.15) {
            self.ask(&format!("drop {}", held.handle)).await;
            return;
        }
        let words = self.ask(&format!("release {}", held.handle)).await;
        match (words[0].as_str(), words.get(1).map(String::as_str)) {
            ("released", Some(was)) => {
                self.env.history.ok(op, Reply::Released(was == "true"));
            }
            _ => self.error(op, &words),
        }
    }

    /// A fixed lease or a watchdog, as the tasks' locks of `kind` have
    /// them: the name and the lease argument.
    fn lease(&mut self, kind: &str) -> (String, &'static str) {
        if self.rng.random_bool(0.5) {
            (format!("{kind}-fixed"), "f700")
        } else {
            (format!("{kind}-watch"), "w1500")
        }
    }

    /// Runs `workload` until the scenario is over, then ends the process.
    async fn run(mut self, workload: Workload) {
        while !self.env.over() {
            match workload {
                Workload::Exclusive { fair } => self.exclusive(fair).await,
                Workload::Reentrant { fair } => self.reentrant(fair).await,
                Workload::ReadWrite => self.read_write().await,
                Workload::Semaphore => self.semaphore().await,
                Workload::Stock => self.stock().await,
                Workload::Rate => self.rate().await,
                Workload::Redlock => self.redlock().await,
                Workload::Multi => self.multi().await,
            }
            let d = self.ms(
                0,
                if matches!(workload, Workload::Rate) {
                    10
                } else {
                    30
                },
            );
            tokio::time::sleep(d).await;
        }
        // End of input ends it; what it still holds is dropped there.
        self.stdin = None;
        let status = tokio::time::timeout(Duration::from_secs(30), self.child.wait()).await;
        match status {
            Ok(Ok(status)) if status.success() => {}
            other => panic!("process {} ended badly: {other:?}", self.id),
        }
    }

    /// Takes `lock` as [`acquire`](Self::acquire) does, holds it as the
    /// tasks do, and releases it.
    async fn cycle(&mut self, lock: &str, owner: &str, share: (bool, u32), command: &str) {
        if let Some(held) = self.acquire(lock, owner, share, command).await {
            let d = self.hold_time();
            self.hold(&[&held], d).await;
            self.release(held).await;
        }
    }

    async fn exclusive(&mut self, fair: bool) {
        let kind = if fair { "fair" } else { "plain" };
        let (name, lease) = self.lease(kind);
        let (owner, wait) = (self.fresh(), self.wait().as_millis());
        let command = format!("{kind} {name} {lease} {wait}");
        let lock = format!("{kind}:{name}");
        self.cycle(&lock, &owner, (false, 1), &command).await;
    }

    /// As the Redlock tasks: a fixed lease of 1 s or a watchdog.
    async fn redlock(&mut self) {
        let (name, lease) = if self.rng.random_bool(0.5) {
            ("redlock-fixed", "f1000")
        } else {
            ("redlock-watch", "w1500")
        };
        let (owner, wait) = (self.fresh(), self.wait().as_millis());
        let command = format!("redlock {name} {lease} {wait}");
        let lock = format!("redlock:{name}");
        self.cycle(&lock, &owner, (false, 1), &command).await;
    }

    async fn reentrant(&mut self, fair: bool) {
        let kind = if fair { "fair-reentrant" } else { "reentrant" };
        let (name, lease) = self.lease(kind);
        let (owner, wait) = (self.fresh(), self.wait().as_millis());
        let command = format!("{kind} {name} {lease} {wait} {owner}");
        let lock = format!("{kind}:{name}");
        let Some(outer) = self.acquire(&lock, &owner, (false, 1), &command).await else {
            return;
        };
        let d = self.ms(0, 150);
        self.hold(&[&outer], d).await;
        if self.rng.random_bool(0.6) {
            let command = format!("{kind} {name} {lease} 0 {owner}");
            if let Some(inner) = self.acquire(&lock, &owner, (false, 1), &command).await {
                let d = self.ms(0, 150);
                self.hold(&[&outer, &inner], d).await;
                if self.rng.random_bool(0.5) {
                    self.release(inner).await;
                    self.release(outer).await;
                } else {
                    self.release(outer).await;
                    self.release(inner).await;
                }
                return;
            }
        }
        self.release(outer).await;
    }

    async fn read_write(&mut self) {
        let (name, lease) = self.lease("rw");
        let (owner, wait) = (self.fresh(), self.wait().as_millis());
        let read = self.rng.random_bool(0.65);
        let side = if read { "read" } else { "write" };
        let command = format!("{side} {name} {lease} {wait} {owner}");
        let lock = format!("rw:{name}");
        self.cycle(&lock, &owner, (read, 1), &command).await;
    }

    async fn semaphore(&mut self) {
        let (name, lease) = self.lease("sem");
        let (owner, wait) = (self.fresh(), self.wait().as_millis());
        let n = if self.rng.random_bool(0.6) {
            1
        } else {
            self.rng.random_range(2..=PERMITS)
        };
        let command = format!("semaphore {name} {lease} {wait} {n}");
        let lock = format!("sem:{name}");
        self.cycle(&lock, &owner, (false, n), &command).await;
    }

    /// As the tasks: decrements with and without ids, reservations, their
    /// settling, restocks.
    async fn stock(&mut self) {
        let item = ITEMS[self.rng.random_range(0..ITEMS.len())].0;
        let n = self.rng.random_range(1..=3);
        match self.rng.random_range(0..100) {
            0..50 => self.decrement(item, n).await,
            50..70 => self.reserve(item, n).await,
            70..85 if !self.open.is_empty() => self.settle().await,
            85..95 => {
                let q = self.rng.random_range(1..=8);
                let op = self
                    .env
                    .history
                    .invoke(self.id, Call::Restock(item.into(), q));
                let words = self.ask(&format!("restock {item} {q}")).await;
                match (words[0].as_str(), words.get(1)) {
                    ("restocked", Some(now)) => {
                        let reply = Reply::Restocked(now.parse().ok());
                        self.env.history.ok(op, reply);
                    }
                    _ => self.error(op, &words),
                }
            }
            _ => {}
        }
    }

    async fn decrement(&mut self, item: &str, n: u64) {
        let id = self.rng.random_bool(0.5).then(|| self.fresh());
        let call = Call::Decrement(item.into(), n, id.clone());
        let op = self.env.history.invoke(self.id, call);
        let command = format!("decrement {item} {n} {}", id.as_deref().unwrap_or("-"));
        let words = self.ask(&command).await;
        let number = |i: usize| -> u64 { words[i].parse().expect("a number") };
        let purchase = match words[0].as_str() {
            "done" => Purchase::Done {
                remaining: number(1),
                replayed: words[2] == "true",
            },
            "soldout" => Purchase::SoldOut {
                available: number(1),
            },
            "unknown" => Purchase::UnknownItem,
            _ => return self.error(op, &words),
        };
        self.env.history.ok(op, Reply::Purchase(purchase));
    }

    async fn reserve(&mut self, item: &'static str, n: u64) {
        let (order, hold) = (self.fresh(), self.ms(300, 1500));
        let call = Call::Reserve(item.into(), n, order.clone());
        let op = self.env.history.invoke(self.id, call);
        let command = format!("reserve {item} {n} {order} {}", hold.as_millis());
        let words = self.ask(&command).await;
        let number = |i: usize| -> u64 { words[i].parse().expect("a number") };
        let us = |i: usize| Duration::from_micros(number(i));
        let reservation = match words[0].as_str() {
            "held" => Reservation::Held {
                remaining: number(1),
                expires_in: us(2),
            },
            "already" => Reservation::AlreadyHeld {
                quantity: number(1),
                expires_in: us(2),
            },
            "confirmed" => Reservation::AlreadyConfirmed,
            "soldout" => Reservation::SoldOut {
                available: number(1),
            },
            "unknown" => Reservation::UnknownItem,
            _ => return self.error(op, &words),
        };
        if matches!(reservation, Reservation::Held { .. }) {
            self.open.push((item, order));
        }
        self.env.history.ok(op, Reply::Reservation(reservation));
    }

    /// Confirms or cancels a reservation this process holds.
    async fn settle(&mut self) {
        let (item, order) = self
            .open
            .swap_remove(self.rng.random_range(0..self.open.len()));
        let confirm = self.rng.random_bool(0.6);
        let call = if confirm {
            Call::Confirm(item.into(), order.clone())
        } else {
            Call::Cancel(item.into(), order.clone())
        };
        let op = self.env.history.invoke(self.id, call);
        let verb = if confirm { "confirm" } else { "cancel" };
        let words = self.ask(&format!("{verb} {item} {order}")).await;
        let settle = match (words[0].as_str(), words.get(1).map(String::as_str)) {
            ("settled", Some("confirmed")) => Settle::Confirmed,
            ("settled", Some("cancelled")) => Settle::Cancelled {
                available: words[2].parse().expect("a number"),
            },
            ("settled", Some("already")) => Settle::AlreadyConfirmed,
            ("settled", Some("notheld")) => Settle::NotHeld,
            _ => return self.error(op, &words),
        };
        self.env.history.ok(op, Reply::Settle(settle));
    }

    /// As the multi-lock tasks: half the time a multi-lock over two or
    /// three of the names (a short fixed lease), else one name held a while
    /// under a watchdog.
    async fn multi(&mut self) {
        if self.rng.random_bool(0.5) {
            let name = MULTI_NAMES[self.rng.random_range(0..MULTI_NAMES.len())];
            let (owner, wait) = (self.fresh(), self.wait().as_millis());
            let command = format!("plain {name} w1000 {wait}");
            if let Some(held) = self
                .acquire(&format!("plain:{name}"), &owner, (false, 1), &command)
                .await
            {
                let d = self.ms(200, 900);
                self.hold(&[&held], d).await;
                self.release(held).await;
            }
            return;
        }
        let names = multi_names(&mut self.rng);
        let ops: Vec<(&str, OpId)> = names
            .iter()
            .map(|name| {
                let call = Call::Acquire {
                    lock: format!("plain:{name}"),
                    owner: self.fresh(),
                    shared: false,
                    permits: 1,
                };
                (*name, self.env.history.invoke(self.id, call))
            })
            .collect();
        let (handle, wait) = (self.fresh(), self.ms(0, 2000).as_millis());
        let lease = MULTI_LEASE.as_millis();
        let sent = Instant::now();
        let command = format!("multi {handle} {} {lease} {wait}", names.join(","));
        let words = self.ask(&command).await;
        if words[0] != "got" {
            for &(_, op) in &ops {
                match words[0].as_str() {
                    "busy" => self.env.history.ok(op, Reply::Busy),
                    _ => self.error(op, &words),
                }
            }
            return;
        }
        // The guards come back in the multi-lock's own order.
        let split = |i: usize| -> Vec<String> { words[i].split(',').map(str::to_owned).collect() };
        let (returned, fences, valid) = (split(1), split(2), split(3));
        let lost_at: Option<usize> = words[4].parse().ok();
        let why = words[5..].join(" ");
        let mut held = Vec::new();
        for (i, name) in returned.iter().enumerate() {
            let (_, op) = *ops
                .iter()
                .find(|(n, _)| n == name)
                .expect("a name asked for");
            let micros: u64 = valid[i].parse().expect("valid-us");
            let grant = Grant {
                fence: fences[i].parse().ok(),
                valid_until: sent + Duration::from_micros(micros),
                returned_lost: (lost_at == Some(i)).then(|| why.clone()),
            };
            self.env.history.ok(op, Reply::Granted(grant));
            held.push(op);
        }
        let end = Instant::now() + self.ms(0, 200);
        while Instant::now() < end {
            let sent = Instant::now();
            let words = self.ask(&format!("mvalid {handle}")).await;
            for (op, left) in held.iter().zip(words[1].split(',')) {
                let left: u64 = left.parse().expect("valid-us");
                if left > 0 {
                    let until = sent + Duration::from_micros(left);
                    self.env.history.valid_until(*op, until);
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let op = self.env.history.invoke(self.id, Call::Release(held));
        let words = self.ask(&format!("mrelease {handle}")).await;
        match (words[0].as_str(), words.get(1).map(String::as_str)) {
            ("released", Some(was)) => self.env.history.ok(op, Reply::Released(was == "true")),
            _ => self.error(op, &words),
        }
    }

    async fn rate(&mut self) {
        let all = limiters();
        let (name, algorithm, policy) = &all[self.rng.random_range(0..all.len())];
        let cost = if self.rng.random_bool(0.8) { 1 } else { 2 };
        let algorithm = match algorithm {
            Algorithm::FixedWindow => "fw",
            Algorithm::SlidingWindow => "sw",
            _ => "gcra",
        };
        let quotas: Vec<String> = policy
            .quotas()
            .iter()
            .map(|q| format!("{}:{}", q.limit(), q.period().as_millis()))
            .collect();
        let op = self
            .env
            .history
            .invoke(self.id, Call::Rate(name.clone(), cost));
        let command = format!("rate {name} {algorithm} {} {cost}", quotas.join(","));
        let words = self.ask(&command).await;
        match (words[0].as_str(), words.get(1), words.get(2)) {
            ("decision", Some(allowed), Some(granted)) => {
                let granted = granted.parse().expect("granted");
                let reply = Reply::Decision(allowed == "true", granted);
                self.env.history.ok(op, reply);
            }
            _ => self.error(op, &words),
        }
    }
}
