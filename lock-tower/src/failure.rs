//! What the layers do when the backend fails or a request has no key, and the
//! counters they keep.

use std::future::Future;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use crossbeam_utils::CachePadded;
use http::{Response, StatusCode};
use lock_core::Error;

use crate::key::Missing;
use crate::response::plain_text;

/// What to do when the backend fails or does not answer within the decision
/// timeout. Failures are logged with `tracing` and counted in [`Metrics`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OnBackendFailure {
    /// Let the request through unchecked (availability over enforcement).
    FailOpen,
    /// Refuse it with 503 and `Retry-After` (enforcement over availability).
    #[default]
    FailClosed,
    /// Decide with a local in-memory backend: the limit or lock then holds per
    /// instance instead of across them.
    Fallback,
}

/// How a layer treats its backend: the bound on each call, and what to do
/// when a call fails or runs past it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Failure {
    pub(crate) policy: OnBackendFailure,
    pub(crate) timeout: Duration,
}

/// Why a call to the backend brought no answer to act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// The request's key is not a valid name: the client's mistake.
    InvalidKey(&'static str),
    /// The layer cannot work as configured (logged at `error`).
    Misconfigured,
    /// The backend failed or did not answer in time (counted and logged at
    /// `warn`): do what the policy says.
    Backend(OnBackendFailure),
}

/// Sorts an error from the backend into a [`Fault`], counting and logging
/// it; `layer` names the layer in the log.
pub(crate) fn classify(error: Error, failure: Failure, metrics: &Metrics, layer: &str) -> Fault {
    match error {
        Error::InvalidName { reason, .. } => Fault::InvalidKey(reason),
        error if !error.is_backend_failure() => {
            tracing::error!(%error, layer, "the layer cannot decide as configured");
            Fault::Misconfigured
        }
        error => {
            metrics.count_backend_failure();
            tracing::warn!(%error, layer, policy = ?failure.policy, "backend failed");
            Fault::Backend(failure.policy)
        }
    }
}

/// The one sequence both layers follow for a call to the backend: bound it
/// by the timeout, then sort any failure ([`classify`]).
pub(crate) async fn guarded<T>(
    failure: Failure,
    metrics: &Metrics,
    layer: &str,
    call: impl Future<Output = lock_core::Result<T>>,
) -> Result<T, Fault> {
    let answer = tokio::time::timeout(failure.timeout, call)
        .await
        .unwrap_or(Err(Error::Timeout(failure.timeout)));
    answer.map_err(|error| classify(error, failure, metrics, layer))
}

/// What to do with a request whose key cannot be extracted, or is not a
/// valid name (empty, too long, braces, control characters).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum MissingKey {
    /// The default: a key the request itself lacks or spoils (a missing
    /// header, a key with a brace) is the client's mistake, answered 400
    /// with the reason; a key no request can have as the server is set up
    /// (no peer address: the server was not started with connect info) is
    /// answered 500, and logged once at `warn` with the fix.
    #[default]
    Reject,
    /// Answer with this status, whatever the cause.
    Respond(StatusCode),
    /// Let the request through unchecked.
    PassThrough,
}

/// The answer to a request without a usable key under `policy` (`None`:
/// let it through). `what` names the layer in the log; `warned` makes a
/// configuration problem logged once per layer.
pub(crate) fn no_key(
    policy: MissingKey,
    missing: &Missing,
    what: &str,
    warned: &AtomicBool,
) -> Option<Response<Bytes>> {
    match policy {
        MissingKey::PassThrough => None,
        MissingKey::Respond(status) => Some(plain_text(status, format!("No {what} key\n"))),
        MissingKey::Reject if missing.is_configuration() => {
            if !warned.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    layer = what,
                    fix = missing.reason(),
                    "requests have no {what} key; every one is answered 500 until this is fixed"
                );
            }
            Some(plain_text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("No {what} key: the server is misconfigured\n"),
            ))
        }
        MissingKey::Reject => Some(plain_text(
            StatusCode::BAD_REQUEST,
            format!("Bad request: {}\n", missing.reason()),
        )),
    }
}

/// Counters shared by a layer and all its services.
///
/// Requests are counted as they are decided, on whichever threads serve
/// them. Each thread adds to a slot of its own, on cache lines of its own,
/// and a read sums the slots: worker threads counting at once then do not
/// pass one cache line back and forth on every request. A read may miss
/// counts still being added on other threads, as with any relaxed counter.
///
/// ```
/// use lock_tower::Metrics;
/// let metrics = Metrics::default();
/// assert_eq!((metrics.allowed(), metrics.refused()), (0, 0));
/// ```
pub struct Metrics {
    /// As many as the machine runs threads, times two, rounded up to a power
    /// of two; threads take them in turn.
    slots: Box<[CachePadded<Counts>]>,
}

#[derive(Default)]
struct Counts {
    allowed: AtomicU64,
    refused: AtomicU64,
    backend_failures: AtomicU64,
    missing_keys: AtomicU64,
}

impl Default for Metrics {
    fn default() -> Self {
        static SLOTS: OnceLock<usize> = OnceLock::new();
        let slots = *SLOTS.get_or_init(|| {
            let threads = std::thread::available_parallelism().map_or(1, usize::from);
            (threads * 2).next_power_of_two().min(MAX_SLOTS)
        });
        Metrics {
            slots: (0..slots).map(|_| CachePadded::default()).collect(),
        }
    }
}

/// The most slots a [`Metrics`] has (8 KiB of them on x86-64).
const MAX_SLOTS: usize = 64;

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics")
            .field("allowed", &self.allowed())
            .field("refused", &self.refused())
            .field("backend_failures", &self.backend_failures())
            .field("missing_keys", &self.missing_keys())
            .finish()
    }
}

impl Metrics {
    /// Requests let through.
    pub fn allowed(&self) -> u64 {
        self.sum(|c| &c.allowed)
    }

    /// Requests refused (limited, locked, or failed closed).
    pub fn refused(&self) -> u64 {
        self.sum(|c| &c.refused)
    }

    /// Decisions the backend failed to make in time.
    pub fn backend_failures(&self) -> u64 {
        self.sum(|c| &c.backend_failures)
    }

    /// Requests without a usable key.
    pub fn missing_keys(&self) -> u64 {
        self.sum(|c| &c.missing_keys)
    }

    fn sum(&self, counter: impl Fn(&Counts) -> &AtomicU64) -> u64 {
        self.slots
            .iter()
            .map(|slot| counter(slot).load(Ordering::Relaxed))
            .fold(0, u64::wrapping_add)
    }

    /// This thread's slot.
    #[inline]
    fn mine(&self) -> &Counts {
        &self.slots[thread_index() & (self.slots.len() - 1)]
    }

    #[inline]
    pub(crate) fn count_allowed(&self) {
        self.mine().allowed.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_refused(&self) {
        self.mine().refused.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_backend_failure(&self) {
        self.mine().backend_failures.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_missing_key(&self) {
        self.mine().missing_keys.fetch_add(1, Ordering::Relaxed);
    }
}

/// A number of the calling thread's own, given out in turn as threads first
/// ask: neighbouring threads (a runtime's workers, started together) get
/// neighbouring numbers, so they land in different slots.
#[inline]
fn thread_index() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static INDEX: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    INDEX.with(|index| *index)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_from_many_threads_add_up() {
        let metrics = Metrics::default();
        // More threads than slots, so that some share one.
        let threads = metrics.slots.len() * 2 + 1;
        std::thread::scope(|scope| {
            for t in 0..threads {
                let metrics = &metrics;
                scope.spawn(move || {
                    for _ in 0..1000 {
                        metrics.count_allowed();
                        if t % 2 == 0 {
                            metrics.count_refused();
                        }
                    }
                    metrics.count_missing_key();
                });
            }
        });
        let threads = threads as u64;
        assert_eq!(metrics.allowed(), threads * 1000);
        assert_eq!(metrics.refused(), threads.div_ceil(2) * 1000);
        assert_eq!(metrics.missing_keys(), threads);
        assert_eq!(metrics.backend_failures(), 0);
        assert_eq!(
            format!("{metrics:?}"),
            format!(
                "Metrics {{ allowed: {}, refused: {}, backend_failures: 0, missing_keys: {threads} }}",
                threads * 1000,
                threads.div_ceil(2) * 1000
            )
        );
    }

    #[test]
    fn a_thread_counts_in_one_slot() {
        let metrics = Metrics::default();
        std::thread::scope(|scope| {
            scope.spawn(|| {
                for _ in 0..10 {
                    metrics.count_backend_failure();
                }
            });
        });
        let counts: Vec<u64> = metrics
            .slots
            .iter()
            .map(|slot| slot.backend_failures.load(Ordering::Relaxed))
            .filter(|&n| n > 0)
            .collect();
        assert_eq!(counts, [10]);
    }
}
