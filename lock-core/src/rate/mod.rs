//! Rate limiting: fixed window, sliding window and GCRA, on Redis and in memory.
//!
//! A [`RateLimiter`] checks a [`Caller`] (an IP address, a user id, a route)
//! against a [`Policy`]: an [`Algorithm`] and one or more [`Quota`]s, all
//! checked in one atomic call (one `EVALSHA` on Redis). A call is allowed
//! only if every quota allows it, and a refused call consumes nothing from
//! any quota. Each call has a cost (default 1; 0 just looks).
//!
//! What each [`Algorithm`] does, on Redis and in memory alike:
//!
//! * [`Algorithm::FixedWindow`]: each caller has windows of its own. A
//!   window starts at the caller's first counted call (a call of cost 0
//!   only looks, and starts none) and lasts one period; the first call
//!   after it ends starts the next. Windows are not aligned to the clock:
//!   a caller whose first call came at 12:00:07.732 has a one-second window
//!   until 12:00:08.732, and the decision's
//!   [`reset_after`](Decision::reset_after) says when it ends. On Redis
//!   the window is the lifetime of the caller's counter (set with
//!   `PX <period>` on the first call), so the Redis server's clock measures
//!   it. Up to twice the limit can pass around the end of a window.
//! * [`Algorithm::SlidingWindow`]: windows are aligned to Unix time (whole
//!   periods since the epoch, read from Redis `TIME` on Redis), the same
//!   for every caller; a call counts against the current window plus the
//!   previous one, weighted by how much of it still overlaps the last
//!   period. Smooths the burst at a window's end.
//! * [`Algorithm::Gcra`] (the default): no windows. Each caller has a
//!   theoretical arrival time: after a burst of the limit (or the quota's
//!   [`burst`](Quota::burst)), one unit comes back every `period / limit`,
//!   continuously, on Redis `TIME`. It never lets more through than the
//!   quota: its emission interval is rounded up (see [`Quota`]). In memory
//!   a one-quota GCRA policy is decided by `governor`'s keyed rate limiter.
//!
//! Memory and Redis decide alike: the same sequence of calls at the same
//! times gets the same decisions. (In memory, time is this process's
//! clock, as Unix time.)
//!
//! The answer is a [`Decision`] value, never an error: an error means bad input
//! or a backend that failed.
//!
//! ```
//! # use lock_core as lock_axum; // lock_axum re-exports these modules as they are
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> lock_core::Result<()> {
//! use std::num::NonZeroU32;
//! use lock_axum::backend::MemoryBackend;
//! use lock_axum::rate::{Algorithm, Policy, Quota, RateLimiter};
//!
//! let policy = Policy::new(Algorithm::Gcra)
//!     .quota(Quota::per_second(NonZeroU32::new(2).unwrap()));
//! let limiter = RateLimiter::new(MemoryBackend::new(), "api", policy)?;
//!
//! assert!(limiter.check("10.0.0.1").await?.allowed);
//! assert!(limiter.check("10.0.0.1").await?.allowed);
//! let third = limiter.check("10.0.0.1").await?;
//! assert!(!third.allowed);
//! assert!(third.retry_after > std::time::Duration::ZERO);
//! assert!(limiter.check("10.0.0.2").await?.allowed); // keys are independent
//! # Ok(()) }
//! ```

mod algorithm;
pub mod backend;
mod caller;
mod decision;
mod deferred;
pub(crate) mod memory;
mod policy;
mod quota;
#[cfg(feature = "redis")]
mod redis;

use std::sync::Arc;
use std::time::Duration;

pub use self::algorithm::Algorithm;
pub use self::backend::RateBackend;
pub(crate) use self::backend::{Memo, RateRequest};
pub use self::caller::{Caller, DEFAULT_V6_PREFIX};
pub use self::decision::Decision;
pub use self::deferred::{Checked, Deferred};
pub use self::policy::{MAX_QUOTAS, Policy};
pub use self::quota::{MAX_PERIOD, Quota};
use crate::error::Result;
use crate::name::Name;

/// A rate limiter: a scope name (so several limiters can share a backend),
/// a policy, and a backend. Cheap to clone; clones share state.
#[derive(Clone)]
pub struct RateLimiter<B> {
    backend: B,
    scope: Name,
    shared: Arc<Shared>,
}

/// What a limiter's clones share.
struct Shared {
    policy: Policy,
    /// Whether address keys need no check under the scope (see
    /// [`Caller::validate`]).
    address_keys_fit: bool,
    memo: Memo,
}

impl<B: std::fmt::Debug> std::fmt::Debug for RateLimiter<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimiter")
            .field("backend", &self.backend)
            .field("scope", &self.scope)
            .field("policy", &self.shared.policy)
            .finish()
    }
}

impl<B: RateBackend> RateLimiter<B> {
    /// A limiter named `scope` enforcing `policy`.
    ///
    /// # Errors
    /// [`Error::InvalidName`](crate::Error::InvalidName) for a bad scope;
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a
    /// policy with no quota, more than [`MAX_QUOTAS`], two quotas of the
    /// same limit, period and burst, or a GCRA quota finer than one unit
    /// per microsecond or whose burst window (burst × period / limit) is
    /// over a year.
    pub fn new(backend: B, scope: impl AsRef<str>, policy: Policy) -> Result<Self> {
        policy.validate()?;
        let scope = Name::new(scope)?;
        let shared = Shared {
            policy,
            address_keys_fit: caller::address_keys_fit(scope.as_str().len()),
            memo: Memo::new(),
        };
        Ok(RateLimiter {
            backend,
            scope,
            shared: Arc::new(shared),
        })
    }

    /// The policy.
    pub fn policy(&self) -> &Policy {
        &self.shared.policy
    }

    /// The scope name.
    pub fn scope(&self) -> &Name {
        &self.scope
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// The request for `caller` and `cost`, both checked.
    fn request<'a>(&'a self, caller: Caller<'a>, cost: u32) -> Result<RateRequest<'a>> {
        let shared = &*self.shared;
        shared.policy.check_cost(cost)?;
        if caller.is_text() || !shared.address_keys_fit {
            #[cfg(test)]
            deferred::count_validation();
            caller.validate(self.scope.as_str().len())?;
        }
        Ok(self.checked_request(caller, cost))
    }

    /// The request for a caller and cost already checked for this scope.
    fn checked_request<'a>(&'a self, caller: Caller<'a>, cost: u32) -> RateRequest<'a> {
        let shared = &*self.shared;
        RateRequest {
            scope: &self.scope,
            caller,
            policy: &shared.policy,
            cost,
            at_most: false,
            memo: &shared.memo,
        }
    }

    /// Checks one unit of cost for `caller` (a `&str` key, an IP address, a
    /// [`Caller`]).
    ///
    /// # Errors
    /// [`Error::InvalidName`](crate::Error::InvalidName) for an empty,
    /// oversized or braced key; backend failures.
    pub async fn check<'a>(&self, caller: impl Into<Caller<'a>>) -> Result<Decision> {
        self.check_cost(caller, 1).await
    }

    /// Checks `cost` units for `caller` (0 looks without consuming).
    ///
    /// # Errors
    /// As [`check`](Self::check), and
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) when `cost`
    /// exceeds the policy's [`max_cost`](Policy::max_cost) (such a call
    /// could never be allowed).
    pub async fn check_cost<'a>(
        &self,
        caller: impl Into<Caller<'a>>,
        cost: u32,
    ) -> Result<Decision> {
        self.decide(caller.into(), cost, false).await
    }

    /// One decision in a `rate.check` span (the scope, the caller, the
    /// cost, and whether it was allowed).
    async fn decide(&self, caller: Caller<'_>, cost: u32, at_most: bool) -> Result<Decision> {
        let mut request = self.request(caller, cost)?;
        request.at_most = at_most;
        self.ask(&request).await
    }

    /// Asks the backend for `request`'s decision in a `rate.check` span.
    async fn ask(&self, request: &RateRequest<'_>) -> Result<Decision> {
        use tracing::Instrument;
        let span = tracing::debug_span!(
            "rate.check",
            scope = self.scope.as_str(),
            caller = %request.caller,
            cost = request.cost,
            allowed = tracing::field::Empty
        );
        let decision = self.backend.check(request).instrument(span.clone()).await;
        if let Ok(decision) = &decision {
            span.record("allowed", decision.allowed);
        }
        decision
    }

    /// Like [`check_cost`](Self::check_cost), but only if the backend can
    /// decide without waiting (in memory); `None` otherwise.
    ///
    /// ```
    /// # use lock_core as lock_axum; // lock_axum re-exports these modules as they are
    /// use std::num::NonZeroU32;
    /// use lock_axum::backend::MemoryBackend;
    /// use lock_axum::rate::{Algorithm, Policy, Quota, RateLimiter};
    ///
    /// let policy = Policy::new(Algorithm::Gcra)
    ///     .quota(Quota::per_minute(NonZeroU32::new(1).unwrap()));
    /// let limiter = RateLimiter::new(MemoryBackend::new(), "api", policy).unwrap();
    /// let ip: std::net::IpAddr = "192.0.2.7".parse().unwrap();
    /// assert!(limiter.check_now(ip, 1).unwrap().unwrap().allowed);
    /// // The address and its text are one caller.
    /// assert!(!limiter.check_now("192.0.2.7", 1).unwrap().unwrap().allowed);
    /// ```
    pub fn check_now<'a>(
        &self,
        caller: impl Into<Caller<'a>>,
        cost: u32,
    ) -> Option<Result<Decision>> {
        match self.request(caller.into(), cost) {
            Ok(request) => self.backend.check_now(&request),
            Err(error) => Some(Err(error)),
        }
    }

    /// Forgets `caller`'s state under every quota: its next call is
    /// decided as a new caller's (an administrative reset, or after a
    /// successful login that earlier failures counted against). In memory,
    /// while callers past the cap share an overflow state whose limit is
    /// not whole, a new caller starts from it (see
    /// [`MemoryBuilder::max_keys`](crate::backend::MemoryBuilder::max_keys)).
    ///
    /// ```
    /// # use lock_core as lock_axum; // lock_axum re-exports these modules as they are
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> lock_core::Result<()> {
    /// use std::num::NonZeroU32;
    /// use lock_axum::backend::MemoryBackend;
    /// use lock_axum::rate::{Algorithm, Policy, Quota, RateLimiter};
    ///
    /// let one = Policy::new(Algorithm::FixedWindow).quota(Quota::per_hour(NonZeroU32::MIN));
    /// let limiter = RateLimiter::new(MemoryBackend::new(), "logins", one)?;
    /// assert!(limiter.check("ann").await?.allowed);
    /// assert!(!limiter.check("ann").await?.allowed);
    /// limiter.reset("ann").await?;
    /// assert!(limiter.check("ann").await?.allowed);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`check`](Self::check).
    pub async fn reset<'a>(&self, caller: impl Into<Caller<'a>>) -> Result<()> {
        let request = self.request(caller.into(), 0)?;
        self.backend.reset(&request).await
    }

    /// Takes as many of `most` units as `caller` has room for under every
    /// quota, all of them if it can (go-redis/redis_rate's `AllowAtMost`),
    /// in one atomic decision (one script on Redis): allowed when at least
    /// one unit fits, and [`granted`](Decision::granted) says how many
    /// were taken. A refusal is decided as for one unit (its
    /// [`retry_after`](Decision::retry_after) is when one fits).
    ///
    /// ```
    /// # use lock_core as lock_axum; // lock_axum re-exports these modules as they are
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> lock_core::Result<()> {
    /// use std::num::NonZeroU32;
    /// use lock_axum::backend::MemoryBackend;
    /// use lock_axum::rate::{Algorithm, Policy, Quota, RateLimiter};
    ///
    /// let five = Policy::new(Algorithm::Gcra).quota(Quota::per_hour(NonZeroU32::new(5).unwrap()));
    /// let limiter = RateLimiter::new(MemoryBackend::new(), "emails", five)?;
    /// assert_eq!(limiter.allow_at_most("newsletter", 3).await?.granted, 3);
    /// assert_eq!(limiter.allow_at_most("newsletter", 3).await?.granted, 2);
    /// let none = limiter.allow_at_most("newsletter", 3).await?;
    /// assert!(!none.allowed);
    /// assert_eq!(none.granted, 0);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`check`](Self::check). A `most` above the policy's
    /// [`max_cost`](Policy::max_cost) asks for at most that; 0 looks.
    pub async fn allow_at_most<'a>(
        &self,
        caller: impl Into<Caller<'a>>,
        most: u32,
    ) -> Result<Decision> {
        let most = most.min(self.shared.policy.max_cost());
        self.decide(caller.into(), most, most > 0).await
    }

    /// Waits until `cost` units for `caller` are allowed, and takes them;
    /// gives up after `within`, returning the last refusal. Each refusal's
    /// [`retry_after`](Decision::retry_after) says how long to sleep, so
    /// the backend is asked again only when the call can fit (unless others
    /// took the room meanwhile).
    ///
    /// Cancel-safe: dropping the future while it sleeps takes nothing. (A
    /// check already sent to Redis when it is dropped may still be decided
    /// there, as any request may.)
    ///
    /// ```
    /// # use lock_core as lock_axum; // lock_axum re-exports these modules as they are
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> lock_core::Result<()> {
    /// use std::num::NonZeroU32;
    /// use std::time::Duration;
    /// use lock_axum::backend::MemoryBackend;
    /// use lock_axum::rate::{Algorithm, Policy, Quota, RateLimiter};
    ///
    /// let ten = Quota::new(NonZeroU32::new(10).unwrap(), Duration::from_millis(100)).unwrap();
    /// let limiter = RateLimiter::new(MemoryBackend::new(), "jobs", Policy::new(Algorithm::Gcra).quota(ten))?;
    /// for _ in 0..10 {
    ///     limiter.check("worker").await?;
    /// }
    /// // The eleventh waits about 10 ms for its turn.
    /// let decision = limiter.until_ready("worker", 1, Duration::from_secs(1)).await?;
    /// assert!(decision.allowed);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`check_cost`](Self::check_cost).
    pub async fn until_ready<'a>(
        &self,
        caller: impl Into<Caller<'a>>,
        cost: u32,
        within: Duration,
    ) -> Result<Decision> {
        let caller = caller.into();
        let deadline = crate::time::deadline_after(within);
        loop {
            let decision = self.check_cost(caller, cost).await?;
            let now = tokio::time::Instant::now();
            if decision.allowed || now >= deadline {
                return Ok(decision);
            }
            let wait = decision.retry_after.max(Duration::from_micros(1));
            tokio::time::sleep_until((now + wait).min(deadline)).await;
        }
    }
}
