//! The rate-limit layer: its settings, and the services it makes.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Response};
use lock_core::backend::MemoryBackend;
use lock_core::rate::{Decision, RateBackend, RateLimiter};
use tower::Layer;

use super::RateVerdict;
use super::decide::{ErasedDecision, Limit};
use super::service::RateLimit;
use crate::adapter::{Neutral, RequestInfo};
use crate::failure::{Failure, MissingKey, OnBackendFailure};
use crate::headers;
use crate::key::{HeadersRead, KeyExtractor, RequestParts};
use crate::metrics::Metrics;

/// Default bound on one decision; past it the backend counts as failed.
pub const DEFAULT_DECISION_TIMEOUT: Duration = Duration::from_millis(500);

/// Applies a distributed rate limit to every request.
///
/// The layer takes a key from each request (the client's address, a
/// header, a path parameter, ...), asks its
/// [`RateLimiter`](lock_core::rate::RateLimiter) for one decision (one
/// round trip on Redis), and either calls the inner service or answers 429
/// itself. A refusal is a response, not a service error, so the layer goes
/// into `axum::Router::layer` without a `HandleErrorLayer`.
///
/// ```
/// use std::num::NonZeroU32;
/// use axum::Router;
/// use axum::routing::get;
/// use lock_axum::backend::MemoryBackend;
/// use lock_axum::key::PeerIp;
/// use lock_axum::rate::{Algorithm, Policy, Quota, RateLimiter};
/// use lock_axum::{OnBackendFailure, RateLimitLayer};
///
/// let policy = Policy::new(Algorithm::Gcra)
///     .quota(Quota::per_second(NonZeroU32::new(10).unwrap()));
/// let limiter = RateLimiter::new(MemoryBackend::new(), "api", policy).unwrap();
/// let per_ip = RateLimitLayer::new(limiter, PeerIp::new())
///     .exempt_paths(["/health"])
///     // The default: when Redis fails, decide in this process's memory
///     // (logged at `warn`). `FailClosed` answers 503 instead.
///     .on_backend_failure(OnBackendFailure::Fallback);
/// let app: Router = Router::new()
///     .route("/", get(|| async { "hello" }))
///     .route("/health", get(|| async { "ok" }))
///     .layer(per_ip);
/// // Serve it with `app.into_make_service_with_connect_info::<SocketAddr>()`:
/// // `PeerIp` reads the client's address from there.
/// ```
///
/// # Response fields
///
/// Responses carry the two fields of the IETF HTTPAPI working group's
/// draft *RateLimit header fields for HTTP*
/// ([draft-ietf-httpapi-ratelimit-headers](https://datatracker.ietf.org/doc/draft-ietf-httpapi-ratelimit-headers/),
/// in the form of its drafts 08 and later, where each quota has a name), and
/// a refusal adds `Retry-After` (whole seconds, rounded up). With 5 a
/// minute, the sixth request of a minute is answered:
///
/// ```text
/// HTTP/1.1 429 Too Many Requests
/// ratelimit: "default";r=0;t=60
/// ratelimit-policy: "default";q=5;w=60
/// retry-after: 60
/// ```
///
/// * `RateLimit-Policy` describes each quota of the policy: `q` units per
///   `w` seconds (and `burst`, this crate's own parameter, for a GCRA burst
///   set apart from the rate). It is the same on every response.
/// * `RateLimit` is the state of the quota that decided: `r` units
///   remaining, `t` seconds until it is fully available again.
/// * The quoted name ties the two together. It is the quota's own name
///   ([`Quota::named`](lock_core::rate::Quota::named)), else `"default"`
///   for a policy of one quota, or `"q0"`, `"q1"`, ... by position. Name
///   the quotas of a policy of several (`"per-second"`, `"per-day"`) so
///   that clients can tell them apart; names are sent to every client.
/// * [`legacy_headers(true)`](Self::legacy_headers) adds the older
///   `X-RateLimit-Limit`, `X-RateLimit-Remaining` and `X-RateLimit-Reset`
///   (seconds until the reset) that many clients already read.
/// * [`headers_on_success(false)`](Self::headers_on_success) keeps the
///   fields to refusals.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::num::NonZeroU32;
/// use axum::Router;
/// use axum::routing::get;
/// use lock_axum::backend::MemoryBackend;
/// use lock_axum::key::GlobalKey;
/// use lock_axum::rate::{Algorithm, Policy, Quota, RateLimiter};
/// use lock_axum::RateLimitLayer;
/// use tower::ServiceExt;
///
/// let five = Quota::per_minute(NonZeroU32::new(5).unwrap());
/// let limiter = RateLimiter::new(MemoryBackend::new(), "api", Policy::new(Algorithm::FixedWindow).quota(five)).unwrap();
/// let app = Router::new()
///     .route("/", get(|| async { "hello" }))
///     .layer(RateLimitLayer::new(limiter, GlobalKey::new()).legacy_headers(true));
/// let get = || axum::http::Request::get("/").body(axum::body::Body::empty()).unwrap();
/// for _ in 0..5 {
///     app.clone().oneshot(get()).await.unwrap();
/// }
/// let refused = app.oneshot(get()).await.unwrap();
/// let field = |name: &str| refused.headers()[name].to_str().unwrap().to_owned();
/// assert_eq!(refused.status(), 429);
/// assert_eq!(field("ratelimit"), r#""default";r=0;t=60"#);
/// assert_eq!(field("ratelimit-policy"), r#""default";q=5;w=60"#);
/// assert_eq!(field("retry-after"), "60");
/// assert_eq!(field("x-ratelimit-limit"), "5");
/// assert_eq!(field("x-ratelimit-remaining"), "0");
/// assert_eq!(field("x-ratelimit-reset"), "60");
/// # }
/// ```
///
/// # When a request has no usable key
///
/// A request without its key (a missing header) or with a key that cannot
/// be one (empty, too long, with a brace) is refused with 400 and the
/// reason, which names the rate limit. A layer that can find no key in any
/// request as the server is set up (axum served without connect info for
/// [`PeerIp`](crate::key::PeerIp)) answers 500 with the fix in the body,
/// and logs it once at `warn`. See [`on_missing_key`](Self::on_missing_key).
pub type RateLimitLayer<B, K> = RateLimitLayerWith<B, K, Neutral>;

/// [`RateLimitLayer`] for the framework `R` (see [`RequestInfo`]): the
/// type behind lock-tower's `RateLimitLayer` and the adapters' own, which
/// differ only in `R`. Its docs are [`RateLimitLayer`]'s.
pub struct RateLimitLayerWith<B, K, R> {
    limit: Arc<Limit<B, K>>,
    info: PhantomData<R>,
}

impl<B, K, R> Clone for RateLimitLayerWith<B, K, R> {
    fn clone(&self) -> Self {
        RateLimitLayerWith {
            limit: self.limit.clone(),
            info: PhantomData,
        }
    }
}

impl<B: fmt::Debug, K: fmt::Debug, R> fmt::Debug for RateLimitLayerWith<B, K, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let l = &self.limit;
        f.debug_struct("RateLimitLayer")
            .field("limiter", &l.limiter)
            .field("key", &l.key)
            .field("on_failure", &l.failure.policy)
            .field("missing_key", &l.missing_key)
            .field("timeout", &l.failure.timeout)
            .field("legacy", &l.legacy)
            .field("headers_on_success", &l.on_success)
            .finish_non_exhaustive()
    }
}

impl<B: RateBackend, K: KeyExtractor, R: RequestInfo> RateLimitLayerWith<B, K, R> {
    /// Limits requests by `key` with `limiter`. Defaults: cost 1; when the
    /// backend fails, decide with a local in-memory limiter of the same
    /// policy ([`OnBackendFailure::Fallback`], logged at `warn`);
    /// [`MissingKey::Reject`] for a request without a usable key (400, or
    /// 500 for a set-up problem); a 500 ms decision timeout; `RateLimit`
    /// and `RateLimit-Policy` on every response, no legacy headers; no
    /// exempt paths.
    pub fn new(limiter: RateLimiter<B>, key: K) -> Self {
        let fallback = RateLimiter::new(
            MemoryBackend::new(),
            limiter.scope(),
            limiter.policy().clone(),
        )
        .ok();
        let policy_value = headers::policy_value(limiter.policy());
        let labels = headers::quota_labels(limiter.policy());
        let metrics = Metrics::new("rate_limit", limiter.scope().as_str());
        RateLimitLayerWith {
            info: PhantomData,
            limit: Arc::new(Limit {
                limiter,
                key,
                cost: None,
                exempt: None,
                refusal: None,
                failure: Failure {
                    policy: OnBackendFailure::Fallback,
                    timeout: DEFAULT_DECISION_TIMEOUT,
                },
                breaker: Arc::default(),
                fallback,
                missing_key: MissingKey::default(),
                legacy: false,
                on_success: true,
                policy_value,
                labels,
                metrics: Arc::new(metrics),
                warned: AtomicBool::new(false),
                cost_warned: AtomicBool::new(false),
            }),
        }
    }

    fn with(mut self, f: impl FnOnce(&mut Limit<B, K>)) -> Self {
        f(Arc::make_mut(&mut self.limit));
        self
    }

    /// The cost of each request (default 1; 0 only looks). A request that
    /// costs more than the smallest quota's capacity (its burst, or else
    /// its limit) could never be allowed: it is answered 400 with the
    /// reason, counted as refused, and logged once at `warn` in case the
    /// cost comes from the set-up rather than from the client.
    pub fn cost(self, cost: impl Fn(RequestParts<'_>) -> u32 + Send + Sync + 'static) -> Self {
        self.with(|l| l.cost = Some(Arc::new(cost)))
    }

    /// Lets requests for which `exempt` is true through without a decision
    /// and without rate-limit fields (health checks, metrics scrapes).
    pub fn exempt(self, exempt: impl Fn(RequestParts<'_>) -> bool + Send + Sync + 'static) -> Self {
        self.with(|l| l.exempt = Some(Arc::new(exempt)))
    }

    /// Lets requests for these exact paths through without a decision (see
    /// [`exempt`](Self::exempt)).
    ///
    /// ```
    /// # use std::num::NonZeroU32;
    /// # use lock_axum::backend::MemoryBackend;
    /// # use lock_axum::rate::{Algorithm, Policy, Quota, RateLimiter};
    /// # use lock_axum::RateLimitLayer;
    /// # use lock_axum::key::PeerIp;
    /// # let policy = Policy::new(Algorithm::Gcra).quota(Quota::per_second(NonZeroU32::new(5).unwrap()));
    /// # let limiter = RateLimiter::new(MemoryBackend::new(), "api", policy).unwrap();
    /// let layer = RateLimitLayer::new(limiter, PeerIp::new()).exempt_paths(["/health", "/ready"]);
    /// ```
    pub fn exempt_paths<P: Into<String>>(self, paths: impl IntoIterator<Item = P>) -> Self {
        let paths: Vec<String> = paths.into_iter().map(Into::into).collect();
        self.exempt(move |request| paths.iter().any(|path| path == request.uri.path()))
    }

    /// Builds the 429 response (the rate-limit headers are added to it).
    pub fn refusal(
        self,
        refusal: impl Fn(&Decision) -> Response<Bytes> + Send + Sync + 'static,
    ) -> Self {
        self.with(|l| l.refusal = Some(Arc::new(refusal)))
    }

    /// What to do when the backend fails (default [`OnBackendFailure::Fallback`]:
    /// a local in-memory limiter with the same policy decides, per instance).
    pub fn on_backend_failure(self, policy: OnBackendFailure) -> Self {
        self.with(|l| l.failure.policy = policy)
    }

    /// What to do with a request without a usable key (default
    /// [`MissingKey::Reject`]: 400 with the reason when the request is at
    /// fault, 500 and a log line when the set-up is).
    pub fn on_missing_key(self, policy: MissingKey) -> Self {
        self.with(|l| l.missing_key = policy)
    }

    /// Longest wait for a decision (default 500 ms); a hung backend never
    /// hangs a request past it. A decision that times out is a backend
    /// failure, and the [`on_backend_failure`](Self::on_backend_failure)
    /// policy applies. If the request had already reached Redis, Redis
    /// still decides it: its cost counts against the caller even though
    /// the layer stopped waiting for the answer.
    pub fn decision_timeout(self, timeout: Duration) -> Self {
        self.with(|l| l.failure.timeout = timeout)
    }

    /// Also send `X-RateLimit-Limit`, `-Remaining` and `-Reset` (seconds
    /// until the deciding quota is fully available again), the fields many
    /// clients read from before the IETF draft (see
    /// [Response fields](Self#response-fields)). Off by default.
    pub fn legacy_headers(self, on: bool) -> Self {
        self.with(|l| l.legacy = on)
    }

    /// Whether allowed responses carry the rate-limit fields too (default
    /// `true`, so clients can pace themselves). Refusals always carry them,
    /// with `Retry-After`.
    pub fn headers_on_success(self, on: bool) -> Self {
        self.with(|l| l.on_success = on)
    }

    /// The counters of this layer and every service it made.
    pub fn metrics(&self) -> Arc<Metrics> {
        self.limit.metrics.clone()
    }

    /// The header fields a decision reads: the key extractor's, or all of
    /// them when a [`cost`](Self::cost) function is set (it may read any).
    pub fn headers_read(&self) -> HeadersRead<'_> {
        match self.limit.cost {
            Some(_) => HeadersRead::All,
            None => self.limit.key.headers_read(),
        }
    }

    /// The limiter.
    pub fn limiter(&self) -> &RateLimiter<B> {
        &self.limit.limiter
    }

    /// Decides for `request` as the layer's services do: the building block
    /// of framework adapters (axum extractors, actix-web middleware).
    pub async fn decide(&self, request: RequestParts<'_>) -> RateVerdict {
        self.limit.decide_for(request.peer_as::<R>()).await
    }

    /// [`decide`](Self::decide) for type-erased callers, without boxing a
    /// verdict that is reached at once.
    pub(crate) fn decide_erased(&self, request: RequestParts<'_>) -> ErasedDecision<'_> {
        self.limit.decide_erased(request.peer_as::<R>())
    }

    /// Adds the rate-limit fields of `decision` to `headers` (for an allowed
    /// decision, only if [`headers_on_success`](Self::headers_on_success)).
    pub fn apply_headers(&self, headers: &mut http::HeaderMap, decision: &Decision) {
        self.limit.apply_headers(headers, decision);
    }

    /// Hands `f` each field [`apply_headers`](Self::apply_headers) would add,
    /// for adapters whose header map is not `http`'s (actix-web 4): they
    /// convert each field once instead of filling and copying a map.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use lock_axum::backend::MemoryBackend;
    /// use lock_axum::rate::{Algorithm, Policy, Quota, RateLimiter};
    /// use lock_axum::RateLimitLayer;
    /// use lock_axum::key::GlobalKey;
    ///
    /// let policy = Policy::new(Algorithm::FixedWindow)
    ///     .quota(Quota::per_minute(NonZeroU32::new(10).unwrap()));
    /// let limiter = RateLimiter::new(MemoryBackend::new(), "api", policy).unwrap();
    /// let decision = limiter.check_now("k", 1).unwrap().unwrap();
    /// let layer = RateLimitLayer::new(limiter, GlobalKey::new());
    /// let mut fields = Vec::new();
    /// layer.for_each_field(&decision, |name, value| fields.push((name.clone(), value)));
    /// assert_eq!(fields[0].0, "ratelimit");
    /// assert_eq!(fields[0].1, "\"default\";r=9;t=60");
    /// assert_eq!(fields[1].1, "\"default\";q=10;w=60");
    /// ```
    pub fn for_each_field(
        &self,
        decision: &Decision,
        f: impl FnMut(&http::HeaderName, HeaderValue),
    ) {
        if let Some(fields) = self.limit.fields(decision) {
            fields.for_each(f);
        }
    }
}

impl<S, B: RateBackend, K: KeyExtractor, R: RequestInfo> Layer<S> for RateLimitLayerWith<B, K, R> {
    type Service = RateLimit<S, B, K, R>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimit::new(inner, self.limit.clone())
    }
}
