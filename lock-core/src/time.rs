//! Deadlines from the durations callers give. A caller may pass any
//! `Duration`, `Duration::MAX` included, to mean "as long as it takes":
//! every wait and timeout is first capped at [`FOREVER`], so adding it to
//! the clock never overflows (which would panic).

use std::time::Duration;

use tokio::time::Instant;

/// The longest any wait, timeout or hold is taken to be: far beyond any
/// process's life, and short enough to add to any clock reading.
pub(crate) const FOREVER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// Longest lease accepted; also the longest a stock counter remembers an
/// operation or holds units. (Here, below the primitives, as more than one
/// reads it.)
pub const MAX_LEASE: Duration = Duration::from_secs(365 * 24 * 3600);

/// `d` from now, with `d` capped at [`FOREVER`].
pub(crate) fn deadline_after(d: Duration) -> Instant {
    Instant::now() + d.min(FOREVER)
}

/// `a + b`, capped at [`FOREVER`].
#[cfg(feature = "redis")]
pub(crate) fn sum(a: Duration, b: Duration) -> Duration {
    a.saturating_add(b).min(FOREVER)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_durations_saturate() {
        assert!(deadline_after(Duration::MAX) > Instant::now() + Duration::from_secs(3600));
        assert!(deadline_after(Duration::ZERO) <= Instant::now());
        #[cfg(feature = "redis")]
        {
            assert_eq!(sum(Duration::MAX, Duration::MAX), FOREVER);
            let three = sum(Duration::from_secs(1), Duration::from_secs(2));
            assert_eq!(three, Duration::from_secs(3));
        }
    }
}
