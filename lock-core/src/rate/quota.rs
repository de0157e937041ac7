//! Quotas: how much of what a rate limiter counts, over how long.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

/// "`limit` per `period`": at most `limit` units of cost in any period (the
/// burst), replenished over the period. Invalid quotas cannot be built: the
/// limit is a [`NonZeroU32`] and the period is checked to be at least 1 ms.
///
/// Under GCRA, one unit comes back every `period / limit`, rounded up to
/// the nanosecond (to the microsecond for periods over about 104 days), so
/// that over any span of time at most `limit + limit × elapsed / period`
/// units get through, on both backends. The rounding costs at most 0.1% of
/// the rate, for the finest quota accepted (a million per second).
///
/// ```
/// # use lock_core as lock_axum; // lock_axum re-exports these modules as they are
/// use std::num::NonZeroU32;
/// use std::time::Duration;
/// use lock_axum::rate::Quota;
///
/// let ten = NonZeroU32::new(10).unwrap();
/// let q = Quota::per_second(ten).named("burst");
/// assert_eq!(q.limit(), 10);
/// assert_eq!(q.period(), Duration::from_secs(1));
/// assert!(Quota::new(ten, Duration::ZERO).is_none());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Quota {
    limit: NonZeroU32,
    period: Duration,
    name: Option<Arc<str>>,
    burst: Option<NonZeroU32>,
}

/// Longest period accepted (one year).
pub const MAX_PERIOD: Duration = Duration::from_secs(365 * 24 * 3600);

impl Quota {
    /// `limit` per second.
    pub const fn per_second(limit: NonZeroU32) -> Self {
        Self::from_parts(limit, Duration::from_secs(1))
    }

    /// `limit` per minute.
    pub const fn per_minute(limit: NonZeroU32) -> Self {
        Self::from_parts(limit, Duration::from_secs(60))
    }

    /// `limit` per hour.
    pub const fn per_hour(limit: NonZeroU32) -> Self {
        Self::from_parts(limit, Duration::from_secs(3600))
    }

    /// `limit` per day.
    pub const fn per_day(limit: NonZeroU32) -> Self {
        Self::from_parts(limit, Duration::from_secs(86_400))
    }

    /// `limit` per `period`; `None` when the period is under 1 ms, not a whole
    /// number of milliseconds, or over [`MAX_PERIOD`].
    pub fn new(limit: NonZeroU32, period: Duration) -> Option<Self> {
        let whole_ms = period.subsec_nanos().is_multiple_of(1_000_000);
        (period >= Duration::from_millis(1) && period <= MAX_PERIOD && whole_ms)
            .then(|| Self::from_parts(limit, period))
    }

    const fn from_parts(limit: NonZeroU32, period: Duration) -> Self {
        Quota {
            limit,
            period,
            name: None,
            burst: None,
        }
    }

    /// Names the quota (shown in `RateLimit-Policy` headers by the adapters).
    pub fn named(mut self, name: impl AsRef<str>) -> Self {
        self.name = Some(Arc::from(name.as_ref()));
        self
    }

    /// Lets up to `burst` calls through at once, refilled at the quota's
    /// rate (`limit` per `period`): `Quota::per_second(10).burst(50)` takes
    /// a burst of 50, then 10 a second. Without it the burst is the limit.
    /// GCRA only (a window has no separate burst; a policy of windows with
    /// one is refused).
    ///
    /// ```
    /// # use lock_core as lock_axum; // lock_axum re-exports these modules as they are
    /// use std::num::NonZeroU32;
    /// use lock_axum::rate::Quota;
    ///
    /// let quota = Quota::per_second(NonZeroU32::new(10).unwrap()).burst(NonZeroU32::new(50).unwrap());
    /// assert_eq!((quota.limit(), quota.capacity()), (10, 50));
    /// ```
    pub fn burst(mut self, burst: NonZeroU32) -> Self {
        self.burst = Some(burst);
        self
    }

    /// The most calls let through at once: the burst, or else the limit.
    pub fn capacity(&self) -> u32 {
        self.burst.unwrap_or(self.limit).get()
    }

    /// The burst set with [`burst`](Self::burst), if any.
    pub fn burst_set(&self) -> Option<u32> {
        self.burst.map(NonZeroU32::get)
    }

    /// The limit (also the burst).
    pub const fn limit(&self) -> u32 {
        self.limit.get()
    }

    /// The period.
    pub const fn period(&self) -> Duration {
        self.period
    }

    /// The name, if one was given.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    pub(crate) fn period_ms(&self) -> u64 {
        // Bounded by MAX_PERIOD, so it fits.
        self.period.as_millis() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nz(n: u32) -> NonZeroU32 {
        NonZeroU32::new(n).unwrap()
    }

    #[test]
    fn per_second_means_n_per_second() {
        let q = Quota::per_second(nz(5));
        assert_eq!((q.limit(), q.period()), (5, Duration::from_secs(1)));
        assert_eq!(Quota::per_hour(nz(1)).period(), Duration::from_secs(3600));
    }

    #[test]
    fn invalid_periods_are_refused() {
        assert!(Quota::new(nz(1), Duration::ZERO).is_none());
        assert!(Quota::new(nz(1), Duration::from_micros(1500)).is_none());
        assert!(Quota::new(nz(1), MAX_PERIOD + Duration::from_secs(1)).is_none());
        assert!(Quota::new(nz(1), Duration::from_millis(1)).is_some());
    }
}
