use std::marker::PhantomData;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;
use lock_core::backend::MemoryBackend;
use lock_core::lock::{LockBackend, LockOptions};
use tower::Layer;

use super::LockVerdict;
use super::acquire::{Locking, Mode};
use super::service::LockService;
use crate::adapter::{Neutral, RequestInfo};
use crate::failure::{Failure, MissingKey, OnBackendFailure};
use crate::key::{HeadersRead, KeyExtractor, RequestParts};
use crate::metrics::Metrics;

/// Default bound on lock calls beyond the wait itself.
pub const DEFAULT_LOCK_TIMEOUT: Duration = Duration::from_millis(500);

/// Default longest wait for a busy key: requests that share a key are
/// served one after another, and one that waited this long is answered 503
/// with `Retry-After`.
pub const DEFAULT_LOCK_WAIT: Duration = Duration::from_secs(5);

/// Serializes requests that share a key, across every instance.
///
/// A request takes the lock of its key (from the key extractor: a path
/// parameter, a header, ...), runs, and releases it once the response is
/// produced, or once its body has been sent with
/// [`hold_until_body_sent`](Self::hold_until_body_sent). A client that
/// goes away drops the request, which releases the lock at once. A request
/// that finds its key busy waits, up to [`DEFAULT_LOCK_WAIT`] by default
/// (then 503 with `Retry-After`), or with a zero [`wait`](Self::wait) is
/// refused at once (423 Locked, or the [`busy_status`](Self::busy_status)).
/// The layer's own refusals carry the [`Refusal`](crate::Refusal) mark,
/// and a rate-limit layer around it sends no `RateLimit` fields on them.
///
/// A request whose key is empty, too long or holds a brace is refused with
/// 400 and the reason, which names the lock (``Bad request: the key of the
/// `pay` lock is empty``); a layer that finds no key in any request as the
/// server is set up (a path parameter the route lacks, a layer outside
/// routing) answers 500 with the fix in the body, and logs it once at
/// `warn`.
///
/// With [`read_write`](Self::read_write), the lock of a key is a
/// read-write lock instead: requests with a safe method share it.
///
/// ```
/// use std::time::Duration;
/// use axum::Router;
/// use axum::routing::{get, post};
/// use lock_axum::backend::MemoryBackend;
/// use lock_axum::key::PathParam;
/// use lock_axum::LockLayer;
///
/// // One payment at a time per order, across instances, waiting up to 2 s.
/// let per_order = LockLayer::new(MemoryBackend::new(), PathParam::new("id"))
///     .scope("pay")
///     .wait(Duration::from_secs(2));
/// let app: Router = Router::new()
///     // On the route that has `{id}`, not on the router: a route without
///     // it (`/health`) would answer 500.
///     .route("/orders/{id}/pay", post(|| async { "paid" }).layer(per_order))
///     .route("/health", get(|| async { "ok" }));
/// ```
pub type LockLayer<B, K> = LockLayerWith<B, K, Neutral>;

/// [`LockLayer`] for the framework `R` (see [`RequestInfo`]): the type
/// behind lock-tower's `LockLayer` and the adapters' own, which differ
/// only in `R`. Its docs are [`LockLayer`]'s.
#[derive(Debug, Clone)]
pub struct LockLayerWith<B, K, R> {
    locking: Locking<B, K>,
    info: PhantomData<R>,
}

impl<B: LockBackend, K: KeyExtractor, R: RequestInfo> LockLayerWith<B, K, R> {
    /// One request at a time per key. Defaults: wait up to
    /// [`DEFAULT_LOCK_WAIT`] for a busy key (then 503 with `Retry-After`), a
    /// 30 s watchdog lease, release when the response is produced, a
    /// handler whose lease is lost stopped with a 503
    /// ([`cancel_on_lease_loss`](Self::cancel_on_lease_loss)), fail
    /// closed (503) when the backend fails, [`MissingKey::Reject`] for a
    /// request without a usable key (400, or 500 for a set-up problem),
    /// lock names `http:<key>`.
    pub fn new(backend: B, key: K) -> Self {
        LockLayerWith {
            info: PhantomData,
            locking: Locking {
                backend,
                fallback: MemoryBackend::new(),
                key,
                scope: Arc::from("http"),
                mode: Mode::Mutex,
                options: LockOptions::new(),
                wait: DEFAULT_LOCK_WAIT,
                busy_status: StatusCode::LOCKED,
                hold_body: false,
                cancel_on_loss: true,
                failure: Failure {
                    policy: OnBackendFailure::FailClosed,
                    timeout: DEFAULT_LOCK_TIMEOUT,
                },
                breaker: Arc::default(),
                missing_key: MissingKey::default(),
                metrics: Arc::new(Metrics::new("lock", "http")),
                warned: Arc::default(),
            },
        }
    }

    /// Lock names are `<scope>:<key>` (default scope `http`), so that code
    /// of the application can take the same lock by name. Two layers whose
    /// requests must never wait on each other need scopes neither of which
    /// is the other followed by `:` (scope `orders` with key `v2:7` names
    /// the lock of scope `orders:v2` with key `7`); layers whose scopes
    /// have no `:` never meet.
    pub fn scope(mut self, scope: &str) -> Self {
        self.locking.scope = Arc::from(scope);
        let layer = match self.locking.mode {
            Mode::Mutex => "lock",
            Mode::Concurrency(_) => "concurrency",
            Mode::ReadWrite => "read_write",
        };
        self.locking.metrics = Arc::new(Metrics::new(layer, scope));
        self
    }

    /// A read-write lock per key instead of a mutex: requests with a safe
    /// method (`GET`, `HEAD`, `OPTIONS`, `TRACE`) take the read side and run
    /// side by side; any other method takes the write side and runs alone.
    /// A waiting writer goes before readers that come after it
    /// ([`ReadWriteLock`](lock_core::lock::ReadWriteLock)), so a stream of
    /// reads never starves a write. Fencing tokens
    /// ([`LockOptions::fencing`]) come with writes only; fairness does not
    /// apply.
    ///
    /// ```
    /// use std::time::Duration;
    /// use lock_axum::backend::MemoryBackend;
    /// use lock_axum::key::PathKey;
    /// use lock_axum::LockLayer;
    ///
    /// // Reads of a document share it; a write waits for them and has it alone.
    /// let layer = LockLayer::new(MemoryBackend::new(), PathKey)
    ///     .read_write()
    ///     .wait(Duration::from_secs(2));
    /// # let _ = layer;
    /// ```
    pub fn read_write(mut self) -> Self {
        self.locking.mode = Mode::ReadWrite;
        let scope = self.locking.scope.clone();
        self.scope(&scope)
    }

    /// Lease and fencing options of each lock (default: 30 s watchdog).
    /// With [`LockOptions::fair`] and a [`wait`](Self::wait), requests that
    /// wait for one key get it in arrival order; on Redis each release
    /// hands the lock straight to the next of them.
    pub fn lock_options(mut self, options: LockOptions) -> Self {
        self.locking.options = options;
        self
    }

    /// Waits up to `wait` for a busy key (default [`DEFAULT_LOCK_WAIT`]),
    /// then answers 503 with `Retry-After`. Zero refuses a busy key at once
    /// with the [`busy_status`](Self::busy_status).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.locking.wait = wait;
        self
    }

    /// Status of an immediate refusal (default 423 Locked; 409 Conflict is
    /// the other usual choice).
    pub fn busy_status(mut self, status: StatusCode) -> Self {
        self.locking.busy_status = status;
        self
    }

    /// Keep the lock until the response body has been sent, not just produced.
    pub fn hold_until_body_sent(mut self, on: bool) -> Self {
        self.locking.hold_body = on;
        self
    }

    /// Cancel the handler (and answer 503 `Lock lease lost`) when the
    /// lock's lease is lost: its renewal found the lock gone, or could not
    /// reach the backend before the lease ran out, or (with a fixed lease
    /// in [`lock_options`](Self::lock_options), no watchdog) the lease ran
    /// out while the handler still ran (default on). Another
    /// request may take the key from then on, so the handler is stopped at
    /// its next `.await` rather than left running beside it. Turn it off
    /// only for a handler that must run to its end whatever happens; it
    /// may then overlap the next holder (a fencing token, see
    /// [`HeldLock::fencing_token`](crate::HeldLock::fencing_token), lets
    /// the resource refuse its late writes).
    pub fn cancel_on_lease_loss(mut self, on: bool) -> Self {
        self.locking.cancel_on_loss = on;
        self
    }

    /// What to do when the backend fails (default fail closed: 503). With
    /// `Fallback`, requests that find the backend failing are serialized
    /// per instance by a local lock, which does not see the requests that
    /// took the backend's lock before it failed (nor, once it answers
    /// again, the backend those still holding the local one): while it
    /// switches, two requests of one key may run at once, on one instance
    /// too. Keep the default where they never may.
    pub fn on_backend_failure(mut self, policy: OnBackendFailure) -> Self {
        self.locking.failure.policy = policy;
        self
    }

    /// What to do with a request without a usable key (default
    /// [`MissingKey::Reject`]: 400 with the reason when the request is at
    /// fault, 500 and a log line when the set-up is).
    pub fn on_missing_key(mut self, policy: MissingKey) -> Self {
        self.locking.missing_key = policy;
        self
    }

    /// Bound on lock calls beyond the wait (default 500 ms): a hung backend
    /// never holds a request longer than `wait + timeout`.
    pub fn decision_timeout(mut self, timeout: Duration) -> Self {
        self.locking.failure.timeout = timeout;
        self
    }

    /// The counters of this layer and every service it made.
    pub fn metrics(&self) -> Arc<Metrics> {
        self.locking.metrics.clone()
    }

    /// Whether handlers are cancelled when the lease is lost.
    pub fn cancels_on_lease_loss(&self) -> bool {
        self.locking.cancel_on_loss
    }

    /// How long a release before the response may take: the decision
    /// timeout, as for every call of the layer's.
    pub(crate) fn release_timeout(&self) -> Duration {
        self.locking.failure.timeout
    }

    /// Whether the lock is held until the response body has been sent.
    pub fn holds_until_body_sent(&self) -> bool {
        self.locking.hold_body
    }

    /// The header fields the key extractor reads.
    pub fn headers_read(&self) -> HeadersRead<'_> {
        self.locking.key.headers_read()
    }

    /// Takes the lock for `request` as the layer's services do: the building
    /// block of framework adapters (axum extractors, actix-web middleware).
    pub async fn acquire(&self, request: RequestParts<'_>) -> LockVerdict {
        self.locking.acquire(request.peer_as::<R>()).await
    }
}

impl<S, B: LockBackend, K: KeyExtractor, R: RequestInfo> Layer<S> for LockLayerWith<B, K, R> {
    type Service = LockService<S, B, K, R>;

    fn layer(&self, inner: S) -> Self::Service {
        LockService::new(inner, Arc::new(self.locking.clone()))
    }
}

/// At most N requests in flight per key, across every instance (a
/// distributed semaphore per key). Built on [`LockLayer`], with the same
/// options; a busy key is refused with 503 by default.
///
/// ```
/// use lock_axum::backend::MemoryBackend;
/// use lock_axum::key::PathKey;
/// use lock_axum::ConcurrencyLimitLayer;
///
/// // At most 4 requests per path at once, refusing the 5th.
/// let limit = ConcurrencyLimitLayer::new(MemoryBackend::new(), PathKey, 4.try_into().unwrap());
/// # let _ = limit;
/// ```
pub type ConcurrencyLimitLayer<B, K> = ConcurrencyLimitLayerWith<B, K, Neutral>;

/// [`ConcurrencyLimitLayer`] for the framework `R` (see [`RequestInfo`]),
/// as [`LockLayerWith`] is for [`LockLayer`]. Its docs are
/// [`ConcurrencyLimitLayer`]'s.
#[derive(Debug, Clone)]
pub struct ConcurrencyLimitLayerWith<B, K, R>(LockLayerWith<B, K, R>);

impl<B: LockBackend, K: KeyExtractor, R: RequestInfo> ConcurrencyLimitLayerWith<B, K, R> {
    /// At most `permits` requests per key at once; permits have a 30 s
    /// watchdog lease, so a crashed instance's permits come back. `permits`
    /// is at most [`MAX_PERMITS`](lock_core::lock::MAX_PERMITS): past it,
    /// every request is answered 500 and the reason logged.
    pub fn new(backend: B, key: K, permits: NonZeroU32) -> Self {
        let mut layer = LockLayerWith::new(backend, key)
            .wait(Duration::ZERO)
            .busy_status(StatusCode::SERVICE_UNAVAILABLE);
        layer.locking.mode = Mode::Concurrency(permits);
        ConcurrencyLimitLayerWith(layer.scope("http-concurrency"))
    }

    /// Adjusts the underlying [`LockLayer`] options (wait, statuses, failure
    /// policy, ...). Fencing options are ignored.
    pub fn configure(
        self,
        f: impl FnOnce(LockLayerWith<B, K, R>) -> LockLayerWith<B, K, R>,
    ) -> Self {
        let mode = self.0.locking.mode;
        let mut layer = f(self.0);
        layer.locking.mode = mode;
        layer.locking.options = layer.locking.options.fencing(false).fair(false);
        ConcurrencyLimitLayerWith(layer)
    }

    /// The counters of this layer and every service it made.
    pub fn metrics(&self) -> Arc<Metrics> {
        self.0.metrics()
    }

    /// Whether handlers are cancelled when the lease is lost.
    pub fn cancels_on_lease_loss(&self) -> bool {
        self.0.cancels_on_lease_loss()
    }

    /// Whether the permit is held until the response body has been sent.
    pub fn holds_until_body_sent(&self) -> bool {
        self.0.holds_until_body_sent()
    }

    /// The header fields the key extractor reads.
    pub fn headers_read(&self) -> HeadersRead<'_> {
        self.0.headers_read()
    }

    /// The lock layer it is built on (its mode a semaphore's).
    pub(crate) fn into_lock(self) -> LockLayerWith<B, K, R> {
        self.0
    }

    /// Takes a permit for `request` as the layer's services do.
    pub async fn acquire(&self, request: RequestParts<'_>) -> LockVerdict {
        self.0.acquire(request).await
    }
}

impl<S, B: LockBackend, K: KeyExtractor, R: RequestInfo> Layer<S>
    for ConcurrencyLimitLayerWith<B, K, R>
{
    type Service = LockService<S, B, K, R>;

    fn layer(&self, inner: S) -> Self::Service {
        self.0.layer(inner)
    }
}
