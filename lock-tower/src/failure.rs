//! What the layers do when the backend fails or a request has no key.

use std::future::Future;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Response, StatusCode};
use lock_core::Error;

use crate::key::Missing;
use crate::metrics::Metrics;
use crate::response::plain_text;

/// What to do when the backend fails or does not answer within the decision
/// timeout. Failures are logged with `tracing` and counted in
/// [`Metrics`](crate::Metrics). After a failure the layer does what its
/// policy says without asking the backend for [`BREAKER_OPEN`], so a
/// backend that is down costs one timeout per interval, not one per
/// request; then it asks again.
///
/// Rate limits default to [`Fallback`](Self::Fallback), locks to
/// [`FailClosed`](Self::FailClosed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum OnBackendFailure {
    /// Let the request through unchecked (availability over enforcement).
    FailOpen,
    /// Refuse it with 503 and `Retry-After` (enforcement over availability).
    FailClosed,
    /// Decide with a local in-memory backend with the same policy: the
    /// limit or lock then holds per instance instead of across them (and
    /// the layer logs so at `warn`).
    Fallback,
}

/// How long a layer decides without its backend after the backend failed.
pub const BREAKER_OPEN: Duration = Duration::from_secs(1);

/// Whether a layer skips its backend, after a failure, for [`BREAKER_OPEN`].
#[derive(Debug, Default)]
pub(crate) struct Breaker {
    /// Until when the backend is skipped, in milliseconds of [`now_ms`]
    /// (0: it is not).
    open_until: AtomicU64,
}

/// Milliseconds since the first call, from 1.
fn now_ms() -> u64 {
    static BASE: OnceLock<Instant> = OnceLock::new();
    let elapsed = BASE.get_or_init(Instant::now).elapsed().as_millis();
    u64::try_from(elapsed).unwrap_or(u64::MAX - 1) + 1
}

impl Breaker {
    fn is_open(&self) -> bool {
        let until = self.open_until.load(Ordering::Relaxed);
        until != 0 && now_ms() < until
    }

    fn trip(&self) {
        let open = u64::try_from(BREAKER_OPEN.as_millis()).unwrap_or(u64::MAX);
        self.open_until
            .store(now_ms().saturating_add(open), Ordering::Relaxed);
    }

    /// Closes it after an answer; whether it had been tripped.
    fn close(&self) -> bool {
        self.open_until.load(Ordering::Relaxed) != 0
            && self.open_until.swap(0, Ordering::Relaxed) != 0
    }
}

/// How a layer treats its backend: the bound on each call, and what to do
/// when a call fails or runs past it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Failure {
    pub(crate) policy: OnBackendFailure,
    pub(crate) timeout: Duration,
}

/// Why a call to the backend brought no answer to act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// The request's key is not a valid name: the client's mistake.
    InvalidKey(&'static str),
    /// The layer cannot work as configured (logged at `error`).
    Misconfigured,
    /// The backend failed or did not answer in time (counted and logged at
    /// `warn`): do what the policy says.
    Backend(OnBackendFailure),
}

/// Sorts an error from the backend into a [`Fault`], counting and logging
/// it; `layer` names the layer in the log.
pub(crate) fn classify(error: Error, failure: Failure, metrics: &Metrics, layer: &str) -> Fault {
    match error {
        Error::InvalidName { reason, .. } => Fault::InvalidKey(reason),
        error if !error.is_backend_failure() => {
            tracing::error!(%error, layer, "the layer cannot decide as configured");
            Fault::Misconfigured
        }
        error => {
            metrics.count_backend_failure();
            let then = match failure.policy {
                OnBackendFailure::Fallback => "deciding in this process's memory meanwhile",
                OnBackendFailure::FailOpen => "letting requests through meanwhile",
                OnBackendFailure::FailClosed => "refusing requests with 503 meanwhile",
            };
            tracing::warn!(
                %error,
                layer,
                policy = ?failure.policy,
                retry_in = ?BREAKER_OPEN,
                "backend failed; {then}"
            );
            Fault::Backend(failure.policy)
        }
    }
}

/// The one sequence both layers follow for a call to the backend: skip it
/// while the breaker is open, bound it by the timeout, then sort any
/// failure ([`classify`]), tripping the breaker on a backend failure.
pub(crate) async fn guarded<T>(
    failure: Failure,
    breaker: &Breaker,
    metrics: &Metrics,
    layer: &str,
    call: impl Future<Output = lock_core::Result<T>>,
) -> Result<T, Fault> {
    if breaker.is_open() {
        return Err(Fault::Backend(failure.policy));
    }
    let answer = tokio::time::timeout(failure.timeout, call)
        .await
        .unwrap_or(Err(Error::Timeout(failure.timeout)));
    match answer {
        Ok(answer) => {
            if breaker.close() {
                tracing::info!(layer, "backend answers again");
            }
            Ok(answer)
        }
        Err(error) => {
            let fault = classify(error, failure, metrics, layer);
            if matches!(fault, Fault::Backend(_)) {
                breaker.trip();
            }
            Err(fault)
        }
    }
}

/// What to do with a request whose key cannot be extracted, or is not a
/// valid name (empty, too long, braces, control characters).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum MissingKey {
    /// The default: a key the request itself lacks or spoils (a missing
    /// header, a key with a brace) is the client's mistake, answered 400
    /// with the reason; a key no request can have as the server is set up
    /// (no peer address: the server was not started with connect info) is
    /// answered 500, and logged once at `warn` with the fix.
    #[default]
    Reject,
    /// Answer with this status, whatever the cause.
    Respond(StatusCode),
    /// Let the request through unchecked.
    PassThrough,
}

/// The answer to a request without a usable key under `policy` (`None`:
/// let it through). `what` names the layer in the log; `warned` makes a
/// configuration problem logged once per layer.
pub(crate) fn no_key(
    policy: MissingKey,
    missing: &Missing,
    what: &str,
    warned: &AtomicBool,
) -> Option<Response<Bytes>> {
    match policy {
        MissingKey::PassThrough => None,
        MissingKey::Respond(status) => Some(plain_text(status, format!("No {what} key\n"))),
        MissingKey::Reject if missing.is_configuration() => {
            if !warned.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    layer = what,
                    fix = missing.reason(),
                    "requests have no {what} key; every one is answered 500 until this is fixed"
                );
            }
            Some(plain_text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("No {what} key: the server is misconfigured\n"),
            ))
        }
        MissingKey::Reject => Some(plain_text(
            StatusCode::BAD_REQUEST,
            format!("Bad request: {}\n", missing.reason()),
        )),
    }
}
