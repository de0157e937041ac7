//! The counters a layer keeps, and (with the `metrics` feature) their
//! export through the `metrics` facade.

#[cfg(feature = "metrics")]
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crossbeam_utils::CachePadded;
use thread_local::ThreadLocal;

/// Counters shared by a layer and all its services.
///
/// Requests are counted as they are decided, on whichever threads serve
/// them. Each thread adds to counts of its own, on cache lines of their
/// own, and a read sums every thread's: worker threads counting at once
/// then neither pass one cache line back and forth nor need a locked
/// instruction on every request. A read may miss counts still being
/// added on other threads, as with any relaxed counter.
///
/// ```
/// use lock_axum::Metrics;
/// let metrics = Metrics::default();
/// assert_eq!((metrics.allowed(), metrics.refused()), (0, 0));
/// ```
pub struct Metrics {
    /// Each thread's counts. Only that thread writes them (a thread that
    /// starts after another ended may take over its counts, and goes on
    /// from them), so an add needs no locked instruction.
    counts: ThreadLocal<CachePadded<Counts>>,
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
        Metrics {
            counts: ThreadLocal::new(),
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
        self.counts
            .iter()
            .map(|counts| counter(counts).load(Ordering::Relaxed))
            .fold(0, u64::wrapping_add)
    }

    /// This thread's counts.
    #[inline]
    fn mine(&self) -> &Counts {
        self.counts.get_or_default()
    }

    #[inline]
    pub(crate) fn count_allowed(&self) {
        add(&self.mine().allowed);
        #[cfg(feature = "metrics")]
        self.export().allowed.increment(1);
    }

    pub(crate) fn count_refused(&self) {
        add(&self.mine().refused);
        #[cfg(feature = "metrics")]
        self.export().refused.increment(1);
    }

    pub(crate) fn count_backend_failure(&self) {
        add(&self.mine().backend_failures);
        #[cfg(feature = "metrics")]
        self.export().backend_failures.increment(1);
    }

    pub(crate) fn count_missing_key(&self) {
        add(&self.mine().missing_keys);
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

/// Adds one to a count of the calling thread's own. Only this thread
/// writes it, so a load and a store lose nothing; a locked add would also
/// wait for every store before it.
#[inline]
fn add(count: &AtomicU64) {
    count.store(
        count.load(Ordering::Relaxed).wrapping_add(1),
        Ordering::Relaxed,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_from_many_threads_add_up() {
        let metrics = Metrics::default();
        let threads = 9;
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
    fn counts_of_ended_threads_stay() {
        let metrics = Metrics::default();
        // One after another: each thread may take over the counts of the
        // one before it, and must add to them.
        for _ in 0..20 {
            std::thread::scope(|scope| {
                scope.spawn(|| {
                    for _ in 0..100 {
                        metrics.count_refused();
                    }
                });
            });
        }
        assert_eq!(metrics.refused(), 2000);
    }

    #[test]
    fn a_thread_counts_in_counts_of_its_own() {
        let metrics = Metrics::default();
        std::thread::scope(|scope| {
            scope.spawn(|| {
                for _ in 0..10 {
                    metrics.count_backend_failure();
                }
            });
        });
        let counts: Vec<u64> = metrics
            .counts
            .iter()
            .map(|counts| counts.backend_failures.load(Ordering::Relaxed))
            .filter(|&n| n > 0)
            .collect();
        assert_eq!(counts, [10]);
    }
}
