//! What a store must do to make rate-limit decisions ([`RateBackend`]),
//! and the request it is given ([`RateRequest`]): the interface for those
//! who implement a backend. Users of [`RateLimiter`](super::RateLimiter)
//! need none of it but the trait's name, also at [`rate`](super).

use std::future::Future;
use std::sync::OnceLock;

use super::caller::Caller;
use super::decision::Decision;
use super::memory::state::Binding;
use super::policy::Policy;
use crate::error::Result;
use crate::name::Name;

/// Where the in-memory backend keeps what it found for one limiter's scope
/// and policy (that state's place), on first use, for the limiter's clones.
pub(crate) type Memo = OnceLock<Binding>;

/// One decision a [`RateLimiter`](super::RateLimiter) asks its backend for, validated: the
/// caller's key fits the scope, and the cost is at most the policy's
/// [`max_cost`](Policy::max_cost).
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct RateRequest<'a> {
    /// The limiter's scope.
    pub scope: &'a Name,
    /// Who the decision is about.
    pub caller: Caller<'a>,
    /// What to enforce.
    pub policy: &'a Policy,
    /// How much to take (0 looks).
    pub cost: u32,
    /// Whether `cost` is the most to take: as many units as every quota
    /// has room for, up to `cost` (allowed when at least one fits; a
    /// refusal is decided as for one unit). The decision's
    /// [`granted`](Decision::granted) says how many.
    pub at_most: bool,
    pub(crate) memo: &'a Memo,
}

/// A store that can make rate-limit decisions. Implemented by
/// [`RedisBackend`](crate::backend::RedisBackend) and
/// [`MemoryBackend`](crate::backend::MemoryBackend).
pub trait RateBackend: Clone + Send + Sync + 'static {
    /// Checks the caller against every quota of the policy at once, taking
    /// the cost from all of them only if all allow it.
    fn check(&self, request: &RateRequest<'_>) -> impl Future<Output = Result<Decision>> + Send;

    /// Whether [`check_now`](Self::check_now) always answers (the
    /// in-memory backend): middleware then asks it alone, and prepares
    /// no check to wait for. The default: no.
    const DECIDES_AT_ONCE: bool = false;

    /// Decides at once when the backend can do so without waiting (the
    /// in-memory backend); `None` otherwise (the default). Middleware uses
    /// it to skip the asynchronous machinery.
    fn check_now(&self, request: &RateRequest<'_>) -> Option<Result<Decision>> {
        let _ = request;
        None
    }

    /// Forgets the caller's state under every quota of the policy: its next
    /// call is decided as a new caller's. (The request's cost is not used.)
    fn reset(&self, request: &RateRequest<'_>) -> impl Future<Output = Result<()>> + Send;
}
