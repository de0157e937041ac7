use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Response};
use lock_core::backend::MemoryBackend;
use lock_core::rate::{Decision, RateBackend, RateLimiter};
use tower::Layer;

use super::service::RateLimit;
use crate::failure::{Metrics, MissingKey, OnBackendFailure};
use crate::headers;
use crate::key::{KeyExtractor, RequestParts};

pub(super) type CostFn = Arc<dyn Fn(RequestParts<'_>) -> u32 + Send + Sync>;
pub(super) type RefusalFn = Arc<dyn Fn(&Decision) -> Response<Bytes> + Send + Sync>;

/// Default bound on one decision; past it the backend counts as failed.
pub const DEFAULT_DECISION_TIMEOUT: Duration = Duration::from_millis(500);

/// Applies a distributed rate limit to every request. See the
/// [module docs](crate::rate_limit).
pub struct RateLimitLayer<B, K> {
    pub(super) limiter: RateLimiter<B>,
    pub(super) fallback: Option<RateLimiter<MemoryBackend>>,
    pub(super) key: K,
    pub(super) cost: Option<CostFn>,
    pub(super) refusal: Option<RefusalFn>,
    pub(super) on_failure: OnBackendFailure,
    pub(super) missing_key: MissingKey,
    pub(super) timeout: Duration,
    pub(super) legacy: bool,
    pub(super) metrics: Arc<Metrics>,
}

impl<B: Clone, K: Clone> Clone for RateLimitLayer<B, K> {
    fn clone(&self) -> Self {
        RateLimitLayer {
            limiter: self.limiter.clone(),
            fallback: self.fallback.clone(),
            key: self.key.clone(),
            cost: self.cost.clone(),
            refusal: self.refusal.clone(),
            on_failure: self.on_failure,
            missing_key: self.missing_key,
            timeout: self.timeout,
            legacy: self.legacy,
            metrics: self.metrics.clone(),
        }
    }
}

impl<B: fmt::Debug, K: fmt::Debug> fmt::Debug for RateLimitLayer<B, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("limiter", &self.limiter)
            .field("key", &self.key)
            .field("on_failure", &self.on_failure)
            .field("missing_key", &self.missing_key)
            .field("timeout", &self.timeout)
            .field("legacy", &self.legacy)
            .finish_non_exhaustive()
    }
}

impl<B: RateBackend, K: KeyExtractor> RateLimitLayer<B, K> {
    /// Limits requests by `key` with `limiter`. Defaults: cost 1, fail closed
    /// (503) on backend failure, 500 for a request without a key, a 500 ms
    /// decision timeout, no legacy headers.
    pub fn new(limiter: RateLimiter<B>, key: K) -> Self {
        // The local limiter a `Fallback` policy decides with, shared by every
        // service of this layer.
        let fallback = RateLimiter::new(
            MemoryBackend::new(),
            limiter.scope(),
            limiter.policy().clone(),
        )
        .ok();
        RateLimitLayer {
            limiter,
            fallback,
            key,
            cost: None,
            refusal: None,
            on_failure: OnBackendFailure::default(),
            missing_key: MissingKey::default(),
            timeout: DEFAULT_DECISION_TIMEOUT,
            legacy: false,
            metrics: Arc::default(),
        }
    }

    /// The cost of each request (default 1; 0 only looks). A cost above the
    /// smallest limit answers 500: it could never be allowed.
    pub fn cost(mut self, cost: impl Fn(RequestParts<'_>) -> u32 + Send + Sync + 'static) -> Self {
        self.cost = Some(Arc::new(cost));
        self
    }

    /// Builds the 429 response (the rate-limit headers are added to it).
    pub fn refusal(
        mut self,
        refusal: impl Fn(&Decision) -> Response<Bytes> + Send + Sync + 'static,
    ) -> Self {
        self.refusal = Some(Arc::new(refusal));
        self
    }

    /// What to do when the backend fails (default [`OnBackendFailure::FailClosed`]).
    pub fn on_backend_failure(mut self, policy: OnBackendFailure) -> Self {
        self.on_failure = policy;
        self
    }

    /// What to do with a request without a key (default 500).
    pub fn on_missing_key(mut self, policy: MissingKey) -> Self {
        self.missing_key = policy;
        self
    }

    /// Longest wait for a decision (default 500 ms); a hung backend never
    /// hangs a request past it.
    pub fn decision_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Also send `X-RateLimit-Limit`, `-Remaining` and `-Reset`.
    pub fn legacy_headers(mut self, on: bool) -> Self {
        self.legacy = on;
        self
    }

    /// The counters of this layer and every service it made.
    pub fn metrics(&self) -> Arc<Metrics> {
        self.metrics.clone()
    }
}

/// What every service of one layer shares.
pub(crate) struct Shared<B, K> {
    pub(super) limiter: RateLimiter<B>,
    pub(super) fallback: Option<RateLimiter<MemoryBackend>>,
    pub(super) key: K,
    pub(super) cost: Option<CostFn>,
    pub(super) refusal: Option<RefusalFn>,
    pub(super) on_failure: OnBackendFailure,
    pub(super) missing_key: MissingKey,
    pub(super) timeout: Duration,
    pub(super) legacy: bool,
    pub(super) policy_value: HeaderValue,
    pub(super) metrics: Arc<Metrics>,
}

impl<S, B: RateBackend, K: KeyExtractor> Layer<S> for RateLimitLayer<B, K> {
    type Service = RateLimit<S, B, K>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimit::new(
            inner,
            Arc::new(Shared {
                limiter: self.limiter.clone(),
                fallback: self.fallback.clone(),
                key: self.key.clone(),
                cost: self.cost.clone(),
                refusal: self.refusal.clone(),
                on_failure: self.on_failure,
                missing_key: self.missing_key,
                timeout: self.timeout,
                legacy: self.legacy,
                policy_value: headers::policy_value(self.limiter.policy()),
                metrics: self.metrics.clone(),
            }),
        )
    }
}
