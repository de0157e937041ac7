//! A fenced resource under a client process paused past its lease.
//!
//! The resource lives in the test: a [`Fence`] that admits a write only
//! with a token at least the highest it has seen, and a log of every write
//! offered to it, in the order it judged them. In-test workers take a
//! plain lock with fencing and a short fixed lease and write with their
//! token while their lease runs. Beside them, a worker process (the
//! `lock-worker fenced` binary) takes the same lock; the test stops it
//! (SIGSTOP) as soon as it holds it, keeps it stopped past its lease while
//! the others take the lock over and write, resumes it, and lets it write
//! with its old token: the resource must refuse that write.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lock_core::lock::{Fence, Lock, LockOptions};
use lock_tests::history::locks::{self, Exclusion};
use lock_tests::history::{Call, Grant, History, OpId, Reply, Violation};
use rand::Rng;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::env::{Env, lock};
use crate::worker::{Worker, clients, spawn};

const WORKER: &str = env!("CARGO_BIN_EXE_lock-worker");
const NAME: &str = "fenced";
const LEASE: Duration = Duration::from_millis(400);
/// The worker process's number in the history.
const PAUSED: usize = 50;

/// One write offered to the resource.
struct Write {
    /// The grant whose token it carried.
    grant: OpId,
    token: u64,
    accepted: bool,
    /// By the process paused past its lease: the latest its lease ran to.
    paused_lease_end: Option<Instant>,
}

/// The resource: a fence and the log of what it judged, in order.
#[derive(Default)]
struct Resource {
    fence: Fence,
    log: Mutex<Vec<Write>>,
}

impl Resource {
    fn write(&self, grant: OpId, token: u64, paused_lease_end: Option<Instant>) -> bool {
        let mut log = lock(&self.log);
        let accepted = self.fence.admit(token).is_ok();
        log.push(Write {
            grant,
            token,
            accepted,
            paused_lease_end,
        });
        accepted
    }
}

/// The scenario: in-test holders and the paused process, then the checks.
pub(crate) async fn paused_client(env: Arc<Env>) -> Vec<Violation> {
    let resource = Arc::new(Resource::default());
    let clients = clients(&env).await;
    let res = resource.clone();
    let mut workers = spawn(&env, &clients, move |mut w: Worker| {
        let resource = res.clone();
        async move {
            let options = LockOptions::new().lease(LEASE).fencing(true);
            let lock = Lock::with_options(w.client.clone(), NAME, options).expect("lock");
            while !w.env.over() {
                let (owner, wait) = (w.fresh(), w.ms(0, 800));
                let id = format!("plain:{NAME}");
                if let Some((op, guard)) = w
                    .acquire(&id, &owner, false, 1, LEASE, lock.lock(wait))
                    .await
                {
                    let d = w.ms(0, 150);
                    w.hold(&[(op, &guard)], d).await;
                    // Right before the write: is the lease still ours?
                    if guard.valid_for() > Duration::from_millis(50)
                        && let Some(token) = guard.fencing_token()
                    {
                        resource.write(op, token, None);
                    }
                    w.release(op, guard).await;
                }
                let d = w.ms(0, 100);
                tokio::time::sleep(d).await;
            }
        }
    });
    let url = env.direct_url();
    workers.push(tokio::spawn(process(env.clone(), resource.clone(), url)));
    let mut found = env.nemesis(workers).await;
    found.extend(locks::check(&env.history, |_| Exclusion::Exclusive));
    found.extend(check(&env.history, &resource));
    found
}

/// Rounds of the paused process until the deadline: take, stop past the
/// lease, resume, write.
async fn process(env: Arc<Env>, resource: Arc<Resource>, url: String) {
    let mut child = tokio::process::Command::new(WORKER)
        .args(["fenced", &url, NAME, &LEASE.as_millis().to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("cannot start lock-worker");
    let pid = child.id().expect("a pid").to_string();
    let mut stdin = child.stdin.take().expect("stdin");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut rng = env.rng(PAUSED);
    let mut round = 0;
    while !env.over() {
        round += 1;
        let call = Call::Acquire {
            lock: format!("plain:{NAME}"),
            owner: format!("process-{round}"),
            shared: false,
            permits: 1,
        };
        let op = env.history.invoke(PAUSED, call);
        let invoke = Instant::now();
        stdin
            .write_all(b"take 1500\n")
            .await
            .expect("to lock-worker");
        let line = lines.next_line().await.expect("from lock-worker");
        let line = line.expect("lock-worker ended");
        let words: Vec<&str> = line.split_whitespace().collect();
        let (token, valid_ms): (u64, u64) = match words.as_slice() {
            ["got", token, valid] => (token.parse().expect("token"), valid.parse().expect("ms")),
            ["busy"] => {
                env.history.ok(op, Reply::Busy);
                continue;
            }
            // An error of the worker's: typed or not, it is its own
            // process's; the history records only that no guard came.
            _ => {
                env.history.ok(op, Reply::Busy);
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        // Its guard's lease, counted no later than it could have been.
        let grant = Grant {
            fence: Some(token),
            valid_until: invoke + Duration::from_millis(valid_ms),
            returned_lost: None,
        };
        env.history.ok(op, Reply::Granted(grant));
        let got = Instant::now();
        signal("STOP", &pid);
        env.count("client-pause");
        let past = LEASE + Duration::from_millis(rng.random_range(300..900));
        tokio::time::sleep(past).await;
        signal("CONT", &pid);
        stdin.write_all(b"write\n").await.expect("to lock-worker");
        let line = lines.next_line().await.expect("from lock-worker");
        let line = line.expect("lock-worker ended");
        let written: u64 = line
            .strip_prefix("write ")
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("lock-worker said {line:?}"));
        assert_eq!(written, token, "lock-worker wrote another token");
        // Its lease began before `got` was read: it ended by `got + LEASE`.
        resource.write(op, token, Some(got + LEASE));
        let d = Duration::from_millis(rng.random_range(0..300));
        tokio::time::sleep(d).await;
    }
    drop(stdin);
    let _ = child.wait().await;
}

fn signal(signal: &str, pid: &str) {
    let status = std::process::Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid)
        .status()
        .expect("kill");
    assert!(status.success(), "kill -{signal} {pid}");
}

/// The resource never accepted a write with a token below one it had
/// accepted, and never the paused process's write once a holder granted
/// after its lease surely ended had written.
fn check(history: &History, resource: &Resource) -> Vec<Violation> {
    let ops = history.ops();
    let log = lock(&resource.log);
    let mut found = Vec::new();
    let (mut refused, mut paused) = (0, 0);
    for (i, w) in log.iter().enumerate() {
        let earlier = log[..i].iter().filter(|e| e.accepted);
        if let Some(paused_end) = w.paused_lease_end {
            paused += 1;
            refused += usize::from(!w.accepted);
            let newer = earlier.clone().find(|e| {
                ops[e.grant].complete.is_some_and(|from| from >= paused_end)
                    && e.paused_lease_end.is_none()
            });
            if let (true, Some(e)) = (w.accepted, newer) {
                found.push(Violation::new(
                    "stale-write",
                    format!(
                        "the paused process's write with token {} (op {}) was accepted after \
                         op {}, granted {:.0} ms after that lease surely ended, wrote token {}",
                        w.token,
                        w.grant,
                        e.grant,
                        ops[e.grant]
                            .complete
                            .map_or(f64::NAN, |t| history.ms(t) - history.ms(paused_end)),
                        e.token
                    ),
                ));
            }
        }
        if w.accepted
            && let Some(e) = earlier.clone().find(|e| e.token > w.token)
        {
            found.push(Violation::new(
                "stale-write",
                format!(
                    "a write with token {} (op {}) was accepted after one with token {} (op {})",
                    w.token, w.grant, e.token, e.grant
                ),
            ));
        }
    }
    println!(
        "  fenced: {} writes, {paused} by the paused process, {refused} of them refused",
        log.len()
    );
    found
}
