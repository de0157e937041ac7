//! A history of operations and the checks run over it, for fault tests
//! in the manner of Jepsen: every operation is recorded when it is invoked
//! and when it completes (ok, failed, or with an unknown outcome), with
//! monotonic [`Instant`]s, from any thread; afterwards the checkers look
//! for what the library promises never happens.
//!
//! Every check judges only by times recorded around calls (an invoke
//! before the call, a completion after it), always in the library's
//! favour: a guard counts as valid from after its acquire returned until
//! the earliest of its release's invoke and the end of the lease its guard
//! reported ([`LockGuard::valid_for`](lock_core::lock::LockGuard::valid_for),
//! read after the clock), so a [`Violation`] is a broken promise, never an
//! artefact of a slow machine.
//!
//! * [`locks`]: no two valid guards conflict (readers share, a semaphore
//!   never goes over its permits), fencing tokens rise in grant order and
//!   a re-entry carries its holding's token, no guard is returned already
//!   lost ([`Recorded`] proves it), a release answers `false` only when the
//!   lease may have ended.
//! * [`stock`]: stock is conserved and each operation id applies once.
//! * [`rate`]: no quota admits more than its algorithm's bound.
//! * [`History::check_errors`]: every error is one the docs list for what
//!   happened (never a reply parsed as another command's).

pub mod locks;
pub mod rate;
mod recorded;
pub mod stock;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use lock_core::Error;
use lock_core::counter::{Purchase, Reservation, Settle};

pub use self::recorded::Recorded;

/// The index of an operation in its [`History`].
pub type OpId = usize;

/// What was asked.
#[derive(Debug, Clone)]
pub enum Call {
    /// An acquisition of `lock` (a kind and a name, e.g. `plain:a`) for
    /// `owner` (an owner id; a fresh one per acquisition where there is no
    /// owner): `permits` of a semaphore, or shared (a reader).
    Acquire {
        /// The lock's identity.
        lock: String,
        /// Who acquires: the same owner may hold several guards at once.
        owner: String,
        /// Whether holders may share it (a reader).
        shared: bool,
        /// Permits taken (1 for a lock).
        permits: u32,
    },
    /// A release of the guards granted by these operations (all at once).
    Release(Vec<OpId>),
    /// `restock(item, quantity)`.
    Restock(String, u64),
    /// `decrement(item, n)`, with an operation id or without.
    Decrement(String, u64, Option<String>),
    /// `reserve(item, n, order)`.
    Reserve(String, u64, String),
    /// `confirm(item, order)`.
    Confirm(String, String),
    /// `cancel(item, order)`.
    Cancel(String, String),
    /// A rate check of `cost` against the limiter named.
    Rate(String, u32),
}

/// A guard as its acquire returned it.
#[derive(Debug, Clone)]
pub struct Grant {
    /// Its fencing token.
    pub fence: Option<u64>,
    /// The latest end of its lease the guard has reported (the clock read
    /// before [`valid_for`](lock_core::lock::LockGuard::valid_for), plus
    /// its answer); only ever moves later.
    pub valid_until: Instant,
    /// Why the guard was provably lost before the acquire returned, when
    /// it was.
    pub returned_lost: Option<String>,
}

/// What a completed operation answered.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A guard.
    Granted(Grant),
    /// Busy (no guard).
    Busy,
    /// Whether every lock released was still held.
    Released(bool),
    /// A restock's new stock (`None`: unknown item).
    Restocked(Option<u64>),
    /// A decrement's outcome.
    Purchase(Purchase),
    /// A reservation's outcome.
    Reservation(Reservation),
    /// A confirmation's or cancellation's outcome.
    Settle(Settle),
    /// A rate decision: whether allowed, and the units taken.
    Decision(bool, u32),
}

/// How an operation ended.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// Still running (or never finished).
    Pending,
    /// Answered.
    Ok(Reply),
    /// Failed and surely took no effect (bad input).
    Fail(ErrorSeen),
    /// Failed with the effect unknown: it may have run (a backend failure).
    Unknown(ErrorSeen),
}

/// An error a call returned, as recorded.
#[derive(Debug, Clone)]
pub struct ErrorSeen {
    /// `Debug` of the error.
    pub text: String,
    /// Why it is not an error the docs list for what happened, if it is not.
    pub untyped: Option<&'static str>,
}

/// One operation.
#[derive(Debug, Clone)]
pub struct Op {
    /// Which worker (task) ran it.
    pub worker: usize,
    /// What was asked.
    pub call: Call,
    /// Read before the call.
    pub invoke: Instant,
    /// Read after it completed.
    pub complete: Option<Instant>,
    /// How it ended.
    pub outcome: Outcome,
}

impl Op {
    /// The reply, when it was answered.
    pub fn reply(&self) -> Option<&Reply> {
        match &self.outcome {
            Outcome::Ok(reply) => Some(reply),
            _ => None,
        }
    }
}

/// A broken promise the checkers found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// What kind of promise (e.g. `overlap`, `stock`).
    pub kind: &'static str,
    /// What was seen, with the operations' times.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] {}", self.kind, self.message)
    }
}

impl Violation {
    /// A violation of `kind` with `message`.
    pub fn new(kind: &'static str, message: impl Into<String>) -> Self {
        Violation {
            kind,
            message: message.into(),
        }
    }
}

/// Counts violations by kind, for a table.
pub fn by_kind(violations: &[Violation]) -> BTreeMap<&'static str, usize> {
    let mut counts = BTreeMap::new();
    for v in violations {
        *counts.entry(v.kind).or_insert(0) += 1;
    }
    counts
}

/// A thread-safe, process-local history of operations.
#[derive(Debug)]
pub struct History {
    start: Instant,
    ops: Mutex<Vec<Op>>,
}

impl Default for History {
    fn default() -> Self {
        Self::new()
    }
}

impl History {
    /// An empty history; times are printed relative to now.
    pub fn new() -> Self {
        History {
            start: Instant::now(),
            ops: Mutex::new(Vec::new()),
        }
    }

    /// Adds a whole operation, times and all (for the checkers' tests).
    #[cfg(test)]
    fn push(&self, op: Op) -> OpId {
        let mut ops = self.ops_mut();
        ops.push(op);
        ops.len() - 1
    }

    fn ops_mut(&self) -> MutexGuard<'_, Vec<Op>> {
        self.ops.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records that `worker` invokes `call` now; complete it with
    /// [`ok`](Self::ok) or [`error`](Self::error).
    pub fn invoke(&self, worker: usize, call: Call) -> OpId {
        let mut ops = self.ops_mut();
        ops.push(Op {
            worker,
            call,
            invoke: Instant::now(),
            complete: None,
            outcome: Outcome::Pending,
        });
        ops.len() - 1
    }

    /// Records that `op` answered `reply` (the clock read now, after the call).
    pub fn ok(&self, op: OpId, reply: Reply) {
        self.complete(op, Outcome::Ok(reply));
    }

    /// Records that `op` failed with `error`: its outcome is unknown for a
    /// backend failure (it may have run), a sure failure otherwise.
    pub fn error(&self, op: OpId, error: &Error) {
        let (seen, backend_failure) = classify(error);
        self.error_seen(op, seen, backend_failure);
    }

    /// As [`error`](Self::error), for an error another process saw and
    /// [classified](classify).
    pub fn error_seen(&self, op: OpId, seen: ErrorSeen, backend_failure: bool) {
        let outcome = if backend_failure {
            Outcome::Unknown(seen)
        } else {
            Outcome::Fail(seen)
        };
        self.complete(op, outcome);
    }

    /// Records `result`: `reply` of its value, or its error.
    pub fn record<T>(
        &self,
        op: OpId,
        result: &lock_core::Result<T>,
        reply: impl FnOnce(&T) -> Reply,
    ) {
        match result {
            Ok(value) => self.ok(op, reply(value)),
            Err(error) => self.error(op, error),
        }
    }

    fn complete(&self, op: OpId, outcome: Outcome) {
        let now = Instant::now();
        let mut ops = self.ops_mut();
        ops[op].complete = Some(now);
        ops[op].outcome = outcome;
    }

    /// Records that the guard granted by `op` reported its lease valid
    /// until `until` (the clock read before asking, plus its answer).
    pub fn valid_until(&self, op: OpId, until: Instant) {
        if let Outcome::Ok(Reply::Granted(grant)) = &mut self.ops_mut()[op].outcome {
            grant.valid_until = grant.valid_until.max(until);
        }
    }

    /// A copy of every operation so far, by id.
    pub fn ops(&self) -> Vec<Op> {
        self.ops_mut().clone()
    }

    /// Milliseconds from the history's start to `at`, for messages.
    pub fn ms(&self, at: Instant) -> f64 {
        at.saturating_duration_since(self.start).as_secs_f64() * 1000.0
    }

    /// Every error that is not one the docs list for what happened: a reply
    /// taken for another command's ("incompatible type", an unexpected
    /// reply), or a refusal of input that was valid.
    pub fn check_errors(&self) -> Vec<Violation> {
        self.ops()
            .iter()
            .filter_map(|op| match &op.outcome {
                Outcome::Fail(seen) | Outcome::Unknown(seen) => seen.untyped.map(|why| {
                    Violation::new(
                        "untyped-error",
                        format!(
                            "{:?} at {:.0} ms (worker {}): {why}: {}",
                            op.call,
                            self.ms(op.invoke),
                            op.worker,
                            seen.text
                        ),
                    )
                }),
                _ => None,
            })
            .collect()
    }
}

/// `error` as a history records it, and whether it is a backend failure
/// (its call may have run).
pub fn classify(error: &Error) -> (ErrorSeen, bool) {
    let seen = ErrorSeen {
        text: format!("{error:?}"),
        untyped: untyped(error),
    };
    (seen, error.is_backend_failure())
}

/// The reason [`classify`] gives for an error it calls untyped, by its
/// text (with `_` for spaces, as another process sends it).
pub fn untyped_reason(text: &str) -> Option<&'static str> {
    UNTYPED
        .into_iter()
        .find(|reason| reason.replace(' ', "_") == text)
}

const UNTYPED: [&str; 3] = [
    "a reply no script of ours returns",
    "valid input refused",
    "a reply parsed as another command's",
];

/// Why `error` is not one the docs list for a call with valid input
/// against a server that may fail, if it is not.
fn untyped(error: &Error) -> Option<&'static str> {
    let text = error.to_string().to_ascii_lowercase();
    match error {
        Error::UnexpectedReply(_) => Some(UNTYPED[0]),
        Error::InvalidName { .. } | Error::InvalidArgument { .. } => Some(UNTYPED[1]),
        // A reply the network cut short is a broken connection, which
        // redis-rs words as a parse error ("Incompatible type - Parse error
        // ... Unexpected end of input"): a backend failure, as documented.
        _ if text.contains("unexpected end of input") => None,
        _ if text.contains("incompatible type") => Some(UNTYPED[2]),
        _ => None,
    }
}
