//! The counters a layer keeps, and (with the `metrics` feature) their
//! export through the `metrics` facade.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use crossbeam_utils::CachePadded;

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
    /// Which layer (`rate_limit`, `lock`, `concurrency`) and scope the
    /// counts are of: the labels of the exported metrics.
    layer: &'static str,
    scope: std::sync::Arc<str>,
    #[cfg(feature = "metrics")]
    export: OnceLock<Export>,
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
        Metrics::new("layer", "")
    }
}

/// The most slots a [`Metrics`] has (8 KiB of them on x86-64).
const MAX_SLOTS: usize = 64;

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics")
            .field("layer", &self.layer)
            .field("scope", &self.scope)
            .field("allowed", &self.allowed())
            .field("refused", &self.refused())
            .field("backend_failures", &self.backend_failures())
            .field("missing_keys", &self.missing_keys())
            .finish()
    }
}

impl Metrics {
    /// Counters of the `layer` (`rate_limit`, `lock`, `concurrency`) with
    /// this scope.
    pub(crate) fn new(layer: &'static str, scope: &str) -> Self {
        static SLOTS: OnceLock<usize> = OnceLock::new();
        let slots = *SLOTS.get_or_init(|| {
            let threads = std::thread::available_parallelism().map_or(1, usize::from);
            (threads * 2).next_power_of_two().min(MAX_SLOTS)
        });
        Metrics {
            slots: (0..slots).map(|_| CachePadded::default()).collect(),
            layer,
            scope: std::sync::Arc::from(scope),
            #[cfg(feature = "metrics")]
            export: OnceLock::new(),
        }
    }

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
        #[cfg(feature = "metrics")]
        self.export().allowed.increment(1);
    }

    pub(crate) fn count_refused(&self) {
        self.mine().refused.fetch_add(1, Ordering::Relaxed);
        #[cfg(feature = "metrics")]
        self.export().refused.increment(1);
    }

    pub(crate) fn count_backend_failure(&self) {
        self.mine().backend_failures.fetch_add(1, Ordering::Relaxed);
        #[cfg(feature = "metrics")]
        self.export().backend_failures.increment(1);
    }

    pub(crate) fn count_missing_key(&self) {
        self.mine().missing_keys.fetch_add(1, Ordering::Relaxed);
        #[cfg(feature = "metrics")]
        self.export().missing_keys.increment(1);
    }

    /// How long a request waited for its lock or permit.
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn record_wait(&self, waited: Duration) {
        #[cfg(feature = "metrics")]
        self.export().wait.record(waited);
    }

    /// How long a request held its lock or permit.
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn record_hold(&self, held: Duration) {
        #[cfg(feature = "metrics")]
        self.export().held.record(held);
    }

    /// The exported metrics' handles, made on first use: by then the
    /// application has installed its recorder.
    #[cfg(feature = "metrics")]
    fn export(&self) -> &Export {
        self.export
            .get_or_init(|| Export::new(self.layer, &self.scope))
    }
}

/// The handles of one layer's exported metrics.
///
/// * `lock_tower_requests_total` (counter): requests decided, labelled
///   `layer`, `scope` and `outcome` (`allowed`, `refused`,
///   `backend_failure`, `missing_key`);
/// * `lock_tower_lock_wait_seconds` (histogram): how long requests waited
///   for a lock or permit, labelled `layer` and `scope`;
/// * `lock_tower_lock_held_seconds` (histogram): how long they held it.
#[cfg(feature = "metrics")]
struct Export {
    allowed: metrics::Counter,
    refused: metrics::Counter,
    backend_failures: metrics::Counter,
    missing_keys: metrics::Counter,
    wait: metrics::Histogram,
    held: metrics::Histogram,
}

#[cfg(feature = "metrics")]
impl Export {
    fn new(layer: &'static str, scope: &str) -> Self {
        let scope = scope.to_owned();
        let requests = |outcome: &'static str| {
            metrics::counter!(
                "lock_tower_requests_total",
                "layer" => layer,
                "scope" => scope.clone(),
                "outcome" => outcome
            )
        };
        Export {
            allowed: requests("allowed"),
            refused: requests("refused"),
            backend_failures: requests("backend_failure"),
            missing_keys: requests("missing_key"),
            wait: metrics::histogram!(
                "lock_tower_lock_wait_seconds", "layer" => layer, "scope" => scope.clone()
            ),
            held: metrics::histogram!(
                "lock_tower_lock_held_seconds", "layer" => layer, "scope" => scope.clone()
            ),
        }
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
                "Metrics {{ layer: \"layer\", scope: \"\", allowed: {}, refused: {}, backend_failures: 0, missing_keys: {threads} }}",
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
