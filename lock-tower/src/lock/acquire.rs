//! A lock layer's settings and its acquisition for one request: key from
//! the request, the lock (or permit) taken, with the failure and
//! missing-key policies applied. Shared by the tower service and the
//! framework adapters.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use futures_util::future::BoxFuture;
use http::header::RETRY_AFTER;
use http::{HeaderValue, Method, StatusCode};
use lock_core::backend::MemoryBackend;
use lock_core::lock::{Lock, LockBackend, LockGuard, LockOptions, Owner, ReadWriteLock, Semaphore};

use super::{HeldLock, HoldTimer, LockVerdict as Verdict};
use crate::Refusal;
use crate::body::Held;
use crate::failure::{
    Breaker, Failure, Fault, MissingKey, Named, OnBackendFailure, guarded, invalid_key, no_key,
};
use crate::headers::retry_after;
use crate::key::{KeyExtractor, Missing, RequestParts};
use crate::metrics::Metrics;
use crate::response::{plain, unavailable};

/// One lock per key, up to N permits per key, or a read-write lock per
/// key (safe methods read).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Mutex,
    Concurrency(NonZeroU32),
    ReadWrite,
}

/// What a lock layer takes, and how: what every service of one layer
/// shares, and what the layer's setters change.
#[derive(Debug, Clone)]
pub(crate) struct Locking<B, K> {
    pub(crate) backend: B,
    pub(crate) fallback: MemoryBackend,
    pub(crate) key: K,
    pub(crate) scope: Arc<str>,
    pub(crate) mode: Mode,
    pub(crate) options: LockOptions,
    pub(crate) wait: Duration,
    pub(crate) busy_status: StatusCode,
    pub(crate) hold_body: bool,
    pub(crate) cancel_on_loss: bool,
    pub(crate) failure: Failure,
    pub(crate) breaker: Arc<Breaker>,
    pub(crate) missing_key: MissingKey,
    pub(crate) metrics: Arc<Metrics>,
    /// Whether a key the set-up keeps every request from having was logged.
    pub(crate) warned: Arc<AtomicBool>,
}

/// Takes the lock (or a permit, or a side) `name` on `backend` for a
/// request with `method`.
async fn take<BK: LockBackend>(
    backend: BK,
    mode: Mode,
    options: LockOptions,
    name: &str,
    method: &Method,
    wait: Duration,
) -> lock_core::Result<Option<LockGuard<BK>>> {
    match mode {
        Mode::Mutex => Lock::with_options(backend, name, options)?.lock(wait).await,
        Mode::Concurrency(permits) => {
            Semaphore::with_options(backend, name, permits, options)?
                .acquire(wait)
                .await
        }
        Mode::ReadWrite => {
            // Each request is its own owner: requests never re-enter.
            // Writers already go first; fairness does not apply.
            let lock = ReadWriteLock::with_options(backend, name, options.fair(false))?;
            if method.is_safe() {
                lock.read(&Owner::new(), wait).await
            } else {
                lock.write(&Owner::new(), wait).await
            }
        }
    }
}

fn held<BK: LockBackend>(guard: LockGuard<BK>, metrics: &Arc<Metrics>) -> HeldLock {
    let lost = Box::pin(guard.lost_owned());
    HeldLock {
        fence: guard.fencing_token(),
        guard: Box::new(guard),
        lost,
        release: release_guard::<BK>,
        _timer: HoldTimer {
            metrics: metrics.clone(),
            since: std::time::Instant::now(),
        },
    }
}

/// The layer's own answer, marked as one.
fn refusal(mut response: http::Response<bytes::Bytes>) -> Verdict {
    response.extensions_mut().insert(Refusal);
    Verdict::Respond(response)
}

fn release_guard<BK: LockBackend>(guard: Held) -> BoxFuture<'static, ()> {
    Box::pin(async move {
        if let Ok(guard) = guard.downcast::<LockGuard<BK>>()
            && let Err(error) = guard.release().await
        {
            tracing::warn!(%error, "lock release failed; it expires with its lease");
        }
    })
}

impl<B: LockBackend, K: KeyExtractor> Locking<B, K> {
    /// This layer, as its logs and answers name it.
    fn named(&self) -> Named<'_> {
        Named {
            layer: "lock",
            what: match self.mode {
                Mode::Concurrency(_) => "concurrency limit",
                Mode::Mutex | Mode::ReadWrite => "lock",
            },
            scope: &self.scope,
        }
    }

    fn no_key(&self, missing: &Missing) -> Verdict {
        self.metrics.count_missing_key();
        match no_key(self.missing_key, missing, self.named(), &self.warned) {
            None => Verdict::Proceed(None),
            Some(response) => refusal(response),
        }
    }

    fn busy(&self) -> Verdict {
        self.metrics.count_refused();
        let (status, text, retry) = if self.wait.is_zero() {
            (
                self.busy_status,
                "Busy: another request holds this key\n",
                HeaderValue::from_static("1"),
            )
        } else {
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "Busy: another request held this key too long\n",
                retry_after(self.wait),
            )
        };
        let mut response = plain(status, text);
        response.headers_mut().insert(RETRY_AFTER, retry);
        refusal(response)
    }

    fn proceed<BK: LockBackend>(
        &self,
        taken: Option<LockGuard<BK>>,
        started: std::time::Instant,
    ) -> Verdict {
        self.metrics.record_wait(started.elapsed());
        match taken {
            Some(guard) => {
                self.metrics.count_allowed();
                Verdict::Proceed(Some(held(guard, &self.metrics)))
            }
            None => self.busy(),
        }
    }

    /// Takes the lock for `request` as the layer's services do.
    pub(crate) async fn acquire(&self, request: RequestParts<'_>) -> Verdict {
        match self.key.extract(request) {
            Some(key) => self.acquire_key(key, request.method).await,
            None => self.missing(self.key.missing(request)),
        }
    }

    /// The verdict for a request without a key, for the reason given.
    pub(crate) fn missing(&self, why: Missing) -> Verdict {
        self.no_key(&why)
    }

    /// Takes the lock of `key` for a request with `method`, within the wait
    /// and the decision timeout.
    pub(crate) async fn acquire_key(&self, key: String, method: &Method) -> Verdict {
        // `<scope>:` alone is a valid name: an empty key must be refused
        // here, or every request without one would share a lock.
        if key.is_empty() {
            return self.no_key(&invalid_key(self.named(), &key, ""));
        }
        let name = format!("{}:{key}", self.scope);
        let started = std::time::Instant::now();
        let bound = Failure {
            // Saturating: `Duration::MAX` is a wait a user may ask for.
            timeout: self.wait.saturating_add(self.failure.timeout),
            ..self.failure
        };
        let taking = take(
            self.backend.clone(),
            self.mode,
            self.options,
            &name,
            method,
            self.wait,
        );
        match guarded(bound, &self.breaker, &self.metrics, self.named(), taking).await {
            Ok(taken) => self.proceed(taken, started),
            Err(Fault::InvalidKey(reason)) => self.no_key(&invalid_key(self.named(), &key, reason)),
            Err(Fault::Misconfigured) => refusal(plain(
                StatusCode::INTERNAL_SERVER_ERROR,
                "Lock misconfigured\n",
            )),
            Err(Fault::Backend(OnBackendFailure::FailOpen)) => {
                self.metrics.count_allowed();
                Verdict::Proceed(None)
            }
            // Serialized per instance by a lock of this process.
            Err(Fault::Backend(OnBackendFailure::Fallback)) => {
                let local = take(
                    self.fallback.clone(),
                    self.mode,
                    self.options,
                    &name,
                    method,
                    self.wait,
                );
                match local.await {
                    Ok(taken) => self.proceed(taken, started),
                    Err(_) => refusal(unavailable()),
                }
            }
            Err(Fault::Backend(_)) => {
                self.metrics.count_refused();
                refusal(unavailable())
            }
        }
    }
}
