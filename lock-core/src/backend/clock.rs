//! The in-memory backend's clock for rate limits: Unix time, so that
//! windows begin where they begin on Redis (whose scripts read Redis's own
//! clock, also Unix time), read monotonically.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A clock that moves only when told: for tests of rate limits on the
/// in-memory backend ([`MemoryBackend::builder`](super::MemoryBackend::builder)).
/// Clones share the time.
///
/// ```
/// use std::num::NonZeroU32;
/// use std::time::{Duration, UNIX_EPOCH};
/// use lock_core::backend::{ManualClock, MemoryBackend};
/// use lock_core::rate::{Algorithm, Policy, Quota, RateLimiter};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> lock_core::Result<()> {
/// let clock = ManualClock::new(UNIX_EPOCH + Duration::from_secs(1_700_000_000));
/// let backend = MemoryBackend::builder().clock(clock.clone()).build();
/// let policy = Policy::new(Algorithm::Gcra)
///     .quota(Quota::per_second(NonZeroU32::new(1).unwrap()));
/// let limiter = RateLimiter::new(backend, "api", policy)?;
/// assert!(limiter.check("k").await?.allowed);
/// assert!(!limiter.check("k").await?.allowed);
/// clock.advance(Duration::from_secs(1));
/// assert!(limiter.check("k").await?.allowed);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct ManualClock {
    unix_ns: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock that reads `start` until moved.
    pub fn new(start: SystemTime) -> Self {
        ManualClock {
            unix_ns: Arc::new(AtomicU64::new(unix_ns(start))),
        }
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let by = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        // Saturating: `Duration::MAX` moves the clock to its end, not round.
        let _ = self
            .unix_ns
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |ns| {
                Some(ns.saturating_add(by))
            });
    }

    /// Sets the clock to `to`.
    pub fn set(&self, to: SystemTime) {
        self.unix_ns.store(unix_ns(to), Ordering::SeqCst);
    }

    /// What the clock reads.
    pub fn now(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_nanos(self.unix_ns.load(Ordering::SeqCst))
    }
}

fn unix_ns(time: SystemTime) -> u64 {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
}

/// Where the backend reads the time: the system's (Unix time when the
/// backend was made, moved on by a monotonic clock) or a [`ManualClock`].
#[derive(Clone)]
pub(crate) enum Clock {
    System {
        clock: quanta::Clock,
        /// The clock's raw reading when the backend was made.
        base: u64,
        base_unix_ns: u64,
    },
    Manual(ManualClock),
}

impl Default for Clock {
    fn default() -> Self {
        let clock = quanta::Clock::new();
        Clock::System {
            base: clock.raw(),
            base_unix_ns: unix_ns(SystemTime::now()),
            clock,
        }
    }
}

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Clock::System { .. } => f.write_str("SystemClock"),
            Clock::Manual(manual) => manual.fmt(f),
        }
    }
}

impl Clock {
    /// Unix time in nanoseconds.
    #[inline]
    pub(crate) fn now_ns(&self) -> u64 {
        match self {
            Clock::System {
                clock,
                base,
                base_unix_ns,
            } => {
                // In nanoseconds throughout: no `Duration` on every decision.
                base_unix_ns.saturating_add(clock.delta_as_nanos(*base, clock.raw()))
            }
            Clock::Manual(manual) => manual.unix_ns.load(Ordering::SeqCst),
        }
    }
}
