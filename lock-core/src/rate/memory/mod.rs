//! Rate limiting in memory: the same decisions as the Redis scripts, on the
//! backend's clock (Unix time, so sliding windows begin where they do on
//! Redis; a fixed window starts at its caller's first counted call, as the
//! Redis script's counter does).
//!
//! * A one-quota GCRA policy (the tower layer's default) is decided by
//!   `governor`'s keyed rate limiter ([`keyed`]).
//! * A GCRA policy of several quotas decides on the same stores, one per
//!   quota, under a lock per caller, so that it takes from all of them or
//!   from none, and a one-quota policy sharing a quota sees what it took.
//! * Fixed and sliding windows, with any number of quotas, are decided in
//!   one small table ([`table`]).
//!
//! Memory stays bounded without anyone's help: idle callers are dropped
//! as new ones come, and each (scope, quota) keeps at most the backend's
//! cap of callers; past it, new callers share one overflow caller with the
//! same quota, and known callers keep their state.

mod keyed;
pub(super) mod state;
mod table;

use self::state::{Asked, Binding, RateState};
use super::backend::{RateBackend, RateRequest};
use super::decision::Decision;
use crate::backend::MemoryBackend;
use crate::error::Result;

/// What the state is asked: the request without its memo.
#[inline]
fn asked<'r>(request: &'r RateRequest<'_>) -> Asked<'r> {
    Asked {
        scope: request.scope,
        caller: &request.caller,
        policy: request.policy,
        cost: request.cost,
        at_most: request.at_most,
    }
}

/// The limiter's binding, found on its first decision. Out of line: the
/// closure's captures would otherwise be copied out of the request on
/// every decision.
#[cold]
fn bind_once<'a>(backend: &MemoryBackend, request: &RateRequest<'a>) -> &'a Binding {
    request.memo.get_or_init(|| {
        let state = backend.shared_state::<RateState>();
        let bound = state.bind(request.scope, request.policy);
        Binding { state, bound }
    })
}

/// Decides on the state the limiter's binding keeps (found on its first
/// decision).
#[inline]
fn decide(backend: &MemoryBackend, request: &RateRequest<'_>) -> Decision {
    let binding = match request.memo.get() {
        Some(binding) => binding,
        None => bind_once(backend, request),
    };
    binding.state.decide(&asked(request), &binding.bound)
}

impl RateBackend for MemoryBackend {
    const DECIDES_AT_ONCE: bool = true;

    async fn check(&self, request: &RateRequest<'_>) -> Result<Decision> {
        Ok(decide(self, request))
    }

    async fn reset(&self, request: &RateRequest<'_>) -> Result<()> {
        self.state::<RateState>().reset(&asked(request));
        Ok(())
    }

    #[inline]
    fn check_now(&self, request: &RateRequest<'_>) -> Option<Result<Decision>> {
        Some(Ok(decide(self, request)))
    }
}
