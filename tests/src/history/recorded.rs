//! A lock backend that times the calls made through it, so a checker can
//! prove when a guard's lease ran out.
//!
//! A guard's lease is counted from before the request that granted (or
//! confirmed) it, so it ends no later than the start of that token's last
//! `acquire` or `extend` call plus the lease. Its acquire returned no
//! earlier than the end of the last `acquire` call of any guard it
//! returned. When the first comes before the second, the guard was lost
//! before it was returned: a proof from the order of two clock readings,
//! untouched by how slowly the test runs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use lock_core::Result;
use lock_core::lock::backend::{AcquireRequest, Attempt, Kind, LockBackend, LockState};
use lock_core::name::Name;

/// Wraps a [`LockBackend`], forwarding every call and timing those that
/// take or renew a lock, by token. Cheap to clone; clones share the times.
///
/// Every method of the trait is forwarded, those with a default too: a
/// method added to the trait must be added here, or the wrapped backend
/// would behave otherwise behind the wrapper.
#[derive(Debug, Clone)]
pub struct Recorded<B> {
    inner: B,
    times: Arc<Mutex<HashMap<String, Times>>>,
}

#[derive(Debug, Clone, Copy, Default)]
struct Times {
    /// Start of the token's last `acquire` or `extend` call.
    last_start: Option<Instant>,
    /// End of its last `acquire` call.
    last_acquire_end: Option<Instant>,
}

impl<B> Recorded<B> {
    /// Wraps `inner`.
    pub fn new(inner: B) -> Self {
        Recorded {
            inner,
            times: Arc::default(),
        }
    }

    /// The wrapped backend.
    pub fn inner(&self) -> &B {
        &self.inner
    }

    fn update(&self, token: &str, f: impl FnOnce(&mut Times)) {
        let mut times = self.times.lock().unwrap_or_else(PoisonError::into_inner);
        f(times.entry(token.to_owned()).or_default());
    }

    fn get(&self, token: &str) -> Times {
        let times = self.times.lock().unwrap_or_else(PoisonError::into_inner);
        times.get(token).copied().unwrap_or_default()
    }

    /// For guards returned together (their tokens and leases), which one
    /// was provably lost before they were returned, and why, if one was.
    pub fn lost_before_return(&self, guards: &[(&str, Duration)]) -> Option<(usize, String)> {
        let returned_after = guards
            .iter()
            .filter_map(|(token, _)| self.get(token).last_acquire_end)
            .max()?;
        guards.iter().enumerate().find_map(|(i, (token, lease))| {
            let start = self.get(token).last_start?;
            let ends_by = start + *lease;
            (ends_by < returned_after).then(|| {
                let why = format!(
                    "guard {i} of {}: its lease of {lease:?} ended at the latest {:?} before the \
                     acquire's last request was answered",
                    guards.len(),
                    returned_after - ends_by
                );
                (i, why)
            })
        })
    }
}

impl<B: LockBackend> LockBackend for Recorded<B> {
    type Waiter = B::Waiter;

    fn acquire(
        &self,
        request: &AcquireRequest<'_>,
    ) -> impl Future<Output = Result<Attempt>> + Send {
        let start = Instant::now();
        let token = request.token.to_owned();
        self.update(&token, |t| t.last_start = Some(start));
        let call = self.inner.acquire(request);
        async move {
            let attempt = call.await;
            self.update(&token, |t| t.last_acquire_end = Some(Instant::now()));
            attempt
        }
    }

    fn release(
        &self,
        kind: Kind,
        name: &Name,
        token: &str,
    ) -> impl Future<Output = Result<bool>> + Send {
        self.inner.release(kind, name, token)
    }

    fn extend(
        &self,
        kind: Kind,
        name: &Name,
        token: &str,
        lease: Duration,
    ) -> impl Future<Output = Result<bool>> + Send {
        self.update(token, |t| t.last_start = Some(Instant::now()));
        self.inner.extend(kind, name, token, lease)
    }

    fn force_release(&self, kind: Kind, name: &Name) -> impl Future<Output = Result<bool>> + Send {
        self.inner.force_release(kind, name)
    }

    fn inspect(
        &self,
        kind: Kind,
        name: &Name,
    ) -> impl Future<Output = Result<Option<LockState>>> + Send {
        self.inner.inspect(kind, name)
    }

    fn waiter(&self, kind: Kind, name: &Name, token: &str) -> Self::Waiter {
        self.inner.waiter(kind, name, token)
    }

    fn clock_drift(&self, lease: Duration) -> Duration {
        self.inner.clock_drift(lease)
    }

    fn confirms_grants(&self) -> bool {
        self.inner.confirms_grants()
    }
}
