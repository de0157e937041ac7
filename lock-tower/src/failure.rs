//! What the layers do when the backend fails or a request has no key.

use std::future::Future;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Response, StatusCode};
use lock_core::Error;
use lock_core::name::MAX_NAME_LEN;

use crate::key::Missing;
use crate::metrics::Metrics;
use crate::response::plain_text;

/// What to do when the backend fails or does not answer within the decision
/// timeout. Failures are logged with `tracing` and counted in
/// [`Metrics`](crate::Metrics). After a failure the layer does what its
/// policy says without asking the backend for [`BREAKER_OPEN`], so a
/// backend that is down costs one timeout per interval, not one per
/// request; then it asks again. A rate limit's backend that answers
/// without waiting (a `RateBackend::check_now` of your own that answers,
/// as the in-memory backend's does) costs no timeout, and is asked on
/// every request, failed or not.
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
    ///
    /// For a rate limit this bounds what gets through, not the backend's
    /// count: the local limiter knows nothing of what the backend counted,
    /// so in a period that the backend fails in, a caller may be let
    /// through up to the limit by the backend plus the limit again by each
    /// instance's local limiter. Choose [`FailClosed`](Self::FailClosed)
    /// where the limit must hold across instances even then.
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

    pub(crate) fn trip(&self) {
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

/// Which layer speaks, in its logs and answers.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Named<'a> {
    /// The `layer` field of its log lines (`lock`, `rate-limit`): kept as
    /// it was, for the queries operators have written against it.
    pub(crate) layer: &'static str,
    /// What people call it: `lock`, `concurrency limit`, `rate limit`.
    pub(crate) what: &'static str,
    /// Its scope: the limiter's, or the lock layer's `scope`.
    pub(crate) scope: &'a str,
}

impl Named<'_> {
    /// "the `pay` lock", "the `api` rate limit".
    pub(crate) fn the(&self) -> String {
        format!("the `{}` {}", self.scope, self.what)
    }
}

/// Sorts an error from the backend into a [`Fault`], counting and logging
/// it.
pub(crate) fn classify(
    error: Error,
    failure: Failure,
    metrics: &Metrics,
    named: Named<'_>,
) -> Fault {
    let Named { layer, scope, .. } = named;
    match error {
        Error::InvalidName { reason, .. } => Fault::InvalidKey(reason),
        error if !error.is_backend_failure() => {
            tracing::error!(%error, layer, %scope, "the layer cannot decide as configured");
            Fault::Misconfigured
        }
        error => {
            metrics.count_backend_failure();
            let then = match failure.policy {
                OnBackendFailure::Fallback => {
                    "deciding in this process's memory meanwhile, per instance rather than \
                     across instances"
                }
                OnBackendFailure::FailOpen => "letting requests through meanwhile",
                OnBackendFailure::FailClosed => "refusing requests with 503 meanwhile",
            };
            tracing::warn!(
                %error,
                layer,
                %scope,
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
    named: Named<'_>,
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
                tracing::info!(layer = named.layer, scope = %named.scope, "backend answers again");
            }
            Ok(answer)
        }
        Err(error) => {
            let fault = classify(error, failure, metrics, named);
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
    /// header, an empty path parameter, a key with a brace or too long) is
    /// the client's mistake, answered 400 with the reason, which names the
    /// layer; a key no request can have as the server is set up (no peer
    /// address: the server was not started with connect info; a layer
    /// outside routing) is answered 500 with the fix in the body, and the
    /// fix is logged once at `warn`.
    #[default]
    Reject,
    /// Answer with this status, whatever the cause.
    Respond(StatusCode),
    /// Let the request through unchecked.
    PassThrough,
}

/// The answer to a request without a usable key under `policy` (`None`:
/// let it through); `warned` makes a configuration problem logged once per
/// layer. A set-up problem is answered 500 with the fix in the body as
/// well as in the log: whoever meets it first (a developer trying the
/// server out) may have no log subscriber yet, and it says nothing about
/// the client or its data.
pub(crate) fn no_key(
    policy: MissingKey,
    missing: &Missing,
    named: Named<'_>,
    warned: &AtomicBool,
) -> Option<Response<Bytes>> {
    match policy {
        MissingKey::PassThrough => None,
        MissingKey::Respond(status) => {
            Some(plain_text(status, format!("No key for {}\n", named.the())))
        }
        MissingKey::Reject if missing.is_configuration() => {
            if !warned.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    layer = named.layer,
                    scope = %named.scope,
                    fix = missing.reason(),
                    "requests have no key for {}; every one is answered 500 until this is fixed",
                    named.the()
                );
            }
            Some(plain_text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!(
                    "No key for {}: the server is misconfigured.\nFix: {}\n",
                    named.the(),
                    missing.reason()
                ),
            ))
        }
        MissingKey::Reject => Some(plain_text(
            StatusCode::BAD_REQUEST,
            format!("Bad request: {}\n", missing.reason()),
        )),
    }
}

/// Why `key` cannot be the key of the `named` layer, checked from the key
/// itself so that the client is told which layer refused it and, for a key
/// too long, how much room the scope leaves. A key that is fine means the
/// scope is at fault (`reason`, lock-core's word on the whole name): a
/// set-up problem.
pub(crate) fn invalid_key(named: Named<'_>, key: &str, reason: &str) -> Missing {
    // The backend's name is `<scope>:<key>`, for locks and rate limits alike.
    let room = MAX_NAME_LEN.saturating_sub(named.scope.len() + 1);
    let whose = format!("the key of {}", named.the());
    if key.is_empty() {
        Missing::request(format!("{whose} is empty"))
    } else if key.len() > room {
        Missing::request(format!(
            "{whose} is {} bytes long; at most {room} fit",
            key.len()
        ))
    } else if key.contains(['{', '}']) {
        Missing::request(format!(
            "{whose} must not contain `{{` or `}}` (they delimit the Redis Cluster hash tag)"
        ))
    } else if key.chars().any(char::is_control) {
        Missing::request(format!("{whose} must not contain control characters"))
    } else {
        Missing::configuration(format!(
            "the scope of {} is not a valid name: it {reason}",
            named.the()
        ))
    }
}
