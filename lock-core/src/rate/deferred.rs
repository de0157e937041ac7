//! One decision asked of a limiter once, on every backend: decided at once
//! where the backend can (in memory), handed back otherwise as a
//! [`Deferred`] check that owns the caller's key, checked, for the
//! asynchronous call to the backend (Redis). Middleware decides with it:
//! no future for an in-memory decision, and a key checked and copied once
//! for a Redis one.

use super::RateLimiter;
use super::backend::RateBackend;
use super::caller::{Caller, CallerKey};
use super::decision::Decision;
use crate::error::Result;

/// What [`RateLimiter::check_or_defer`] found.
#[derive(Debug)]
#[must_use]
pub enum Checked {
    /// Decided at once (the backend decides without waiting), or refused
    /// before the backend was asked (a bad key or cost), as
    /// [`check_cost`](RateLimiter::check_cost) would answer.
    Now(Result<Decision>),
    /// The backend must be waited for:
    /// [`check_deferred`](RateLimiter::check_deferred) asks it.
    Later(Deferred),
}

/// A check whose caller and cost were found valid by
/// [`check_or_defer`](RateLimiter::check_or_defer) and that waits for the
/// backend. It owns the caller's key (an address as its bits, text inline up
/// to 24 bytes), so it can be moved into a future of its own.
#[derive(Debug, Clone)]
pub struct Deferred {
    caller: CallerKey,
    cost: u32,
    /// The length of the scope the key was checked under: it fits under
    /// any scope as long or shorter.
    scope_len: usize,
}

impl Deferred {
    /// The caller.
    pub fn caller(&self) -> Caller<'_> {
        self.caller.caller()
    }

    /// The cost.
    pub fn cost(&self) -> u32 {
        self.cost
    }
}

impl<B: RateBackend> RateLimiter<B> {
    /// Checks the caller and cost once and decides at once if the backend
    /// can (in memory, as [`check_now`](Self::check_now)); otherwise hands
    /// back a [`Deferred`] check for
    /// [`check_deferred`](Self::check_deferred), which does not check the
    /// key again. The entry point of middleware: an in-memory decision
    /// takes no future, a Redis one no second look at its key.
    ///
    /// ```
    /// # use lock_core as lock_axum; // lock_axum re-exports these modules as they are
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> lock_core::Result<()> {
    /// use std::num::NonZeroU32;
    /// use lock_axum::backend::MemoryBackend;
    /// use lock_axum::rate::{Algorithm, Checked, Policy, Quota, RateLimiter};
    ///
    /// let policy = Policy::new(Algorithm::Gcra)
    ///     .quota(Quota::per_minute(NonZeroU32::new(1).unwrap()));
    /// let limiter = RateLimiter::new(MemoryBackend::new(), "api", policy)?;
    /// let decision = match limiter.check_or_defer("192.0.2.7", 1) {
    ///     Checked::Now(decision) => decision?, // in memory, always
    ///     Checked::Later(deferred) => limiter.check_deferred(&deferred).await?,
    /// };
    /// assert!(decision.allowed);
    /// # Ok(()) }
    /// ```
    pub fn check_or_defer<'a>(&self, caller: impl Into<Caller<'a>>, cost: u32) -> Checked {
        let request = match self.request(caller.into(), cost) {
            Ok(request) => request,
            Err(error) => return Checked::Now(Err(error)),
        };
        match self.backend.check_now(&request) {
            Some(decision) => Checked::Now(decision),
            None => Checked::Later(Deferred {
                caller: request.caller.to_key(),
                cost,
                scope_len: self.scope.as_str().len(),
            }),
        }
    }

    /// Asks the backend for the decision `deferred` waits for, as
    /// [`check_cost`](Self::check_cost) does, without checking the key
    /// again (unless `deferred` comes from a limiter with a longer scope).
    ///
    /// # Errors
    /// Backend failures; those of [`check_cost`](Self::check_cost) for a
    /// check from another limiter that does not fit this one.
    pub async fn check_deferred(&self, deferred: &Deferred) -> Result<Decision> {
        let (caller, cost) = (deferred.caller(), deferred.cost);
        let request = if deferred.scope_len >= self.scope.as_str().len() {
            self.shared.policy.check_cost(cost)?;
            self.checked_request(caller, cost)
        } else {
            self.request(caller, cost)?
        };
        self.ask(&request).await
    }
}

#[cfg(test)]
thread_local! {
    static VALIDATIONS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Counts a key check on this thread, for the tests below.
#[cfg(test)]
pub(super) fn count_validation() {
    VALIDATIONS.with(|count| count.set(count.get() + 1));
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::backend::MemoryBackend;
    use crate::rate::{Algorithm, Policy, Quota, RateRequest};

    /// The memory backend, made to answer as Redis does: never at once.
    /// Counts the asks.
    #[derive(Clone, Default)]
    struct Waiting {
        memory: MemoryBackend,
        now: Arc<AtomicUsize>,
        checks: Arc<AtomicUsize>,
    }

    impl RateBackend for Waiting {
        async fn check(&self, request: &RateRequest<'_>) -> Result<Decision> {
            self.checks.fetch_add(1, Ordering::Relaxed);
            self.memory.check(request).await
        }

        fn check_now(&self, _: &RateRequest<'_>) -> Option<Result<Decision>> {
            self.now.fetch_add(1, Ordering::Relaxed);
            None
        }

        async fn reset(&self, request: &RateRequest<'_>) -> Result<()> {
            self.memory.reset(request).await
        }
    }

    fn policy() -> Policy {
        Policy::new(Algorithm::Gcra).quota(Quota::per_minute(NonZeroU32::new(2).unwrap()))
    }

    fn validations() -> usize {
        VALIDATIONS.with(std::cell::Cell::get)
    }

    /// A decision the backend must wait for asks it once, and checks the
    /// key once.
    #[tokio::test(flavor = "current_thread")]
    async fn a_deferred_check_asks_once_and_checks_the_key_once() {
        let backend = Waiting::default();
        let limiter = RateLimiter::new(backend.clone(), "api", policy()).unwrap();
        for (round, key) in ["user:1", "user:1", "user:1"].into_iter().enumerate() {
            let before = validations();
            let Checked::Later(deferred) = limiter.check_or_defer(key, 1) else {
                panic!("decided without waiting");
            };
            assert_eq!(deferred.caller(), Caller::Text(key));
            let decision = limiter.check_deferred(&deferred).await.unwrap();
            assert_eq!(decision.allowed, round < 2);
            assert_eq!(validations() - before, 1, "the key checked once");
            assert_eq!(backend.now.load(Ordering::Relaxed), round + 1);
            assert_eq!(backend.checks.load(Ordering::Relaxed), round + 1);
        }
        // An address keeps its kind.
        let ip: std::net::IpAddr = "2001:db8:1:2::9".parse().unwrap();
        let Checked::Later(deferred) = limiter.check_or_defer(ip, 1) else {
            panic!("decided without waiting");
        };
        assert_eq!(deferred.caller(), Caller::from(ip));
    }

    /// A bad key or cost is answered at once, the backend not asked.
    #[test]
    fn bad_input_is_answered_at_once() {
        let backend = Waiting::default();
        let limiter = RateLimiter::new(backend.clone(), "api", policy()).unwrap();
        assert!(matches!(
            limiter.check_or_defer("a{b", 1),
            Checked::Now(Err(crate::Error::InvalidName { .. }))
        ));
        assert!(matches!(
            limiter.check_or_defer("k", 3),
            Checked::Now(Err(crate::Error::InvalidArgument { .. }))
        ));
        assert_eq!(backend.now.load(Ordering::Relaxed), 0);
    }

    /// A check handed to a limiter with a longer scope is checked again.
    #[tokio::test(flavor = "current_thread")]
    async fn a_check_from_a_shorter_scope_is_checked_again() {
        let short = RateLimiter::new(Waiting::default(), "a", policy()).unwrap();
        let long_scope = "s".repeat(crate::name::MAX_NAME_LEN - 10);
        let long = RateLimiter::new(Waiting::default(), &long_scope, policy()).unwrap();
        let Checked::Later(deferred) = short.check_or_defer("k".repeat(20).as_str(), 1) else {
            panic!("decided without waiting");
        };
        assert!(matches!(
            long.check_deferred(&deferred).await,
            Err(crate::Error::InvalidName { .. })
        ));
    }

    /// In memory the decision comes at once.
    #[test]
    fn memory_decides_at_once() {
        let limiter = RateLimiter::new(MemoryBackend::new(), "api", policy()).unwrap();
        assert!(matches!(
            limiter.check_or_defer("k", 1),
            Checked::Now(Ok(Decision { allowed: true, .. }))
        ));
    }
}
