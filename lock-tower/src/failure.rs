//! What the layers do when the backend fails or a request has no key, and the
//! counters they keep.

use std::sync::atomic::{AtomicU64, Ordering};

use http::StatusCode;

/// What to do when the backend fails or does not answer within the decision
/// timeout. Failures are logged with `tracing` and counted in [`Metrics`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OnBackendFailure {
    /// Let the request through unchecked (availability over enforcement).
    FailOpen,
    /// Refuse it with 503 and `Retry-After` (enforcement over availability).
    #[default]
    FailClosed,
    /// Decide with a local in-memory backend: the limit or lock then holds per
    /// instance instead of across them.
    Fallback,
}

/// What to do with a request whose key cannot be extracted (or is not a valid
/// name: empty, too long, braces).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum MissingKey {
    /// Answer with this status (400 for a client's fault, 500 for a
    /// misconfigured extractor).
    Respond(StatusCode),
    /// Let the request through unchecked.
    PassThrough,
}

impl Default for MissingKey {
    fn default() -> Self {
        MissingKey::Respond(StatusCode::INTERNAL_SERVER_ERROR)
    }
}

/// Counters shared by a layer and all its services.
#[derive(Debug, Default)]
pub struct Metrics {
    allowed: AtomicU64,
    refused: AtomicU64,
    backend_failures: AtomicU64,
    missing_keys: AtomicU64,
}

impl Metrics {
    /// Requests let through.
    pub fn allowed(&self) -> u64 {
        self.allowed.load(Ordering::Relaxed)
    }

    /// Requests refused (limited, locked, or failed closed).
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Decisions the backend failed to make in time.
    pub fn backend_failures(&self) -> u64 {
        self.backend_failures.load(Ordering::Relaxed)
    }

    /// Requests without a usable key.
    pub fn missing_keys(&self) -> u64 {
        self.missing_keys.load(Ordering::Relaxed)
    }

    pub(crate) fn count_allowed(&self) {
        self.allowed.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_refused(&self) {
        self.refused.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_backend_failure(&self) {
        self.backend_failures.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_missing_key(&self) {
        self.missing_keys.fetch_add(1, Ordering::Relaxed);
    }
}
