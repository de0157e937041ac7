use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::future::Either;
use http::{Request, Response, StatusCode};
use lock_core::Error;
use lock_core::rate::{Decision, RateBackend};
use tower::Service;

use super::RateVerdict as Verdict;
use super::future::ResponseFuture;
use super::layer::Shared;
use crate::failure::{OnBackendFailure, no_key};
use crate::headers;
use crate::key::{KeyExtractor, Missing, RequestParts};
use crate::response::{plain, unavailable};

/// A decision for a type-erased caller: ready at once, or boxed.
pub(crate) type ErasedDecision<'a> =
    Either<std::future::Ready<Verdict>, futures_util::future::BoxFuture<'a, Verdict>>;

/// The service made by [`RateLimitLayer`](super::RateLimitLayer). Clones share
/// the limiter, so limits hold across clones (and, on Redis, instances).
pub struct RateLimit<S, B, K> {
    inner: S,
    shared: Arc<Shared<B, K>>,
}

impl<S: Clone, B, K> Clone for RateLimit<S, B, K> {
    fn clone(&self) -> Self {
        RateLimit {
            inner: self.inner.clone(),
            shared: self.shared.clone(),
        }
    }
}

impl<S: std::fmt::Debug, B, K> std::fmt::Debug for RateLimit<S, B, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimit")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S, B, K> RateLimit<S, B, K> {
    pub(super) fn new(inner: S, shared: Arc<Shared<B, K>>) -> Self {
        RateLimit { inner, shared }
    }
}

/// How a decision starts. Small on purpose: it is returned by value on
/// every request, and a refusal's response is built only once it is known
/// to be needed.
enum Start {
    /// Settled without waiting.
    Now(Now),
    /// Ask the backend, asynchronously.
    Ask { key: String, cost: u32 },
}

/// A decision reached without waiting.
enum Now {
    /// Allowed; no fields are sent on success, so no decision was built.
    Allowed,
    /// The backend decided.
    Decided(Decision),
    /// The request has no key.
    NoKey,
    /// The request's key is not a valid name, for this reason.
    Invalid(&'static str),
    /// The backend cannot decide with this configuration.
    Misconfigured,
}

impl<B: RateBackend, K: KeyExtractor> Shared<B, K> {
    fn refuse(&self, decision: &Decision) -> Response<Bytes> {
        self.metrics.count_refused();
        let mut response = match &self.refusal {
            Some(refusal) => refusal(decision),
            None => plain(StatusCode::TOO_MANY_REQUESTS, "Too Many Requests\n"),
        };
        self.apply_headers(response.headers_mut(), decision);
        response
    }

    fn verdict(&self, decision: Decision) -> Verdict {
        if decision.allowed {
            self.metrics.count_allowed();
            Verdict::Allow(Some(decision))
        } else {
            let response = self.refuse(&decision);
            Verdict::Limited { decision, response }
        }
    }

    pub(super) fn apply_headers(&self, headers: &mut http::HeaderMap, decision: &Decision) {
        if let Some(fields) = self.fields(decision) {
            fields.insert_into(headers);
        }
    }

    /// The fields a response to `decision` carries, if any.
    pub(super) fn fields(&self, decision: &Decision) -> Option<headers::Fields> {
        (!decision.allowed || self.on_success)
            .then(|| headers::Fields::new(&self.labels, &self.policy_value, decision, self.legacy))
    }

    /// Extracts the key and cost of `request` and decides.
    pub(super) async fn decide_for(&self, request: RequestParts<'_>) -> Verdict {
        match self.start(request) {
            Start::Now(now) => self.settle(now),
            Start::Ask { key, cost } => self.decide(key, cost).await,
        }
    }

    /// As [`decide_for`](Self::decide_for), for type-erased callers: a
    /// verdict reached at once (no key, or a backend that decides without
    /// waiting) comes back ready, without boxing a future.
    pub(crate) fn decide_erased(&self, request: RequestParts<'_>) -> ErasedDecision<'_> {
        match self.start(request) {
            Start::Now(now) => Either::Left(std::future::ready(self.settle(now))),
            Start::Ask { key, cost } => Either::Right(Box::pin(self.decide(key, cost))),
        }
    }

    /// Decides `request` at once if it has no key or the backend decides
    /// without waiting; otherwise hands back the owned key to ask with.
    /// Only that second case copies the key out of the request.
    #[inline(always)]
    fn start(&self, request: RequestParts<'_>) -> Start {
        let cost = self.cost.as_ref().map_or(1, |cost| cost(request));
        self.key.with_caller(request, |caller| {
            let Some(caller) = caller else {
                return Start::Now(Now::NoKey);
            };
            match self.limiter.check_now(caller, cost) {
                Some(Ok(decision)) if decision.allowed && !self.on_success => {
                    Start::Now(Now::Allowed)
                }
                Some(Ok(decision)) => Start::Now(Now::Decided(decision)),
                // A backend that waits, or one that failed: the failure
                // policy applies on the asynchronous path.
                Some(Err(error)) => failed(error).unwrap_or_else(|| ask(caller, cost)),
                None => ask(caller, cost),
            }
        })
    }

    /// The verdict of a decision reached without waiting.
    fn settle(&self, now: Now) -> Verdict {
        match now {
            Now::Allowed => {
                self.metrics.count_allowed();
                Verdict::Allow(None)
            }
            Now::Decided(decision) => self.verdict(decision),
            Now::NoKey => self.no_key(&self.key.missing()),
            Now::Invalid(reason) => self.no_key(&invalid(reason)),
            Now::Misconfigured => misconfigured(),
        }
    }

    fn no_key(&self, missing: &Missing) -> Verdict {
        self.metrics.count_missing_key();
        match no_key(self.missing_key, missing, "rate-limit", &self.warned) {
            None => Verdict::Allow(None),
            Some(response) => Verdict::Respond(response),
        }
    }

    /// One decision for `key`, bounded by the decision timeout, with the
    /// failure policy applied.
    async fn decide(&self, key: String, cost: u32) -> Verdict {
        let result = tokio::time::timeout(self.timeout, self.limiter.check_cost(&key, cost))
            .await
            .unwrap_or(Err(Error::Timeout(self.timeout)));
        let error = match result {
            Ok(decision) => return self.verdict(decision),
            Err(Error::InvalidName { reason, .. }) => return self.no_key(&invalid(reason)),
            Err(error) if !error.is_backend_failure() => {
                tracing::error!(%error, "rate limit cannot decide");
                return misconfigured();
            }
            Err(error) => error,
        };
        self.metrics.count_backend_failure();
        tracing::warn!(%error, policy = ?self.on_failure, "rate-limit backend failed");
        match (self.on_failure, &self.fallback) {
            (OnBackendFailure::FailOpen, _) => {
                self.metrics.count_allowed();
                Verdict::Allow(None)
            }
            (OnBackendFailure::Fallback, Some(fallback)) => {
                match fallback.check_cost(&key, cost).await {
                    Ok(decision) => self.verdict(decision),
                    Err(_) => Verdict::Respond(unavailable()),
                }
            }
            _ => {
                self.metrics.count_refused();
                Verdict::Respond(unavailable())
            }
        }
    }
}

/// A decision to ask the backend for, with the key copied out of the
/// request. Out of line: a backend that waits pays a round trip anyway,
/// and the path of a decision reached at once stays short.
#[inline(never)]
fn ask(caller: lock_core::rate::Caller<'_>, cost: u32) -> Start {
    Start::Ask {
        key: caller.to_string(),
        cost,
    }
}

/// How a decision the backend could not reach at once starts: out of the
/// common path.
#[cold]
#[inline(never)]
fn failed(error: Error) -> Option<Start> {
    match error {
        Error::InvalidName { reason, .. } => Some(Start::Now(Now::Invalid(reason))),
        error if !error.is_backend_failure() => {
            tracing::error!(%error, "rate limit cannot decide");
            Some(Start::Now(Now::Misconfigured))
        }
        _ => None,
    }
}

/// A key the request gave that is not a valid name: its own mistake.
fn invalid(reason: &str) -> Missing {
    Missing::request(format!("the request's key {reason}"))
}

fn misconfigured() -> Verdict {
    Verdict::Respond(plain(
        StatusCode::INTERNAL_SERVER_ERROR,
        "Rate limit misconfigured\n",
    ))
}

impl<S, B, K, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<S, B, K>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send,
    B: RateBackend,
    K: KeyExtractor,
    ReqBody: Send + 'static,
    ResBody: From<Bytes>,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = ResponseFuture<S, ReqBody>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        // A request without a key, or a backend that decides without
        // waiting (in memory), is answered here: no boxed future, no shared
        // state carried along, and the ready service itself is called.
        match self.shared.start(RequestParts::new(&request)) {
            // The common case, kept apart so that no verdict is built.
            Start::Now(Now::Allowed) => {
                self.shared.metrics.count_allowed();
                ResponseFuture::calling(self.inner.call(request), None)
            }
            start => self.call_decided(request, start),
        }
    }
}

impl<S, B: RateBackend, K: KeyExtractor> RateLimit<S, B, K> {
    /// Every start but an allowed call without fields: out of line, so that
    /// the layer's call stays a few cache lines of code.
    #[inline(never)]
    fn call_decided<ReqBody>(
        &mut self,
        request: Request<ReqBody>,
        start: Start,
    ) -> ResponseFuture<S, ReqBody>
    where
        S: Service<Request<ReqBody>> + Clone,
    {
        let shared = &self.shared;
        let (key, cost) = match start {
            Start::Now(Now::Decided(decision)) if decision.allowed => {
                shared.metrics.count_allowed();
                let fields = shared.fields(&decision);
                return ResponseFuture::calling(self.inner.call(request), fields);
            }
            Start::Now(now) => match shared.settle(now) {
                Verdict::Allow(decision) => {
                    let fields = decision.and_then(|decision| shared.fields(&decision));
                    return ResponseFuture::calling(self.inner.call(request), fields);
                }
                Verdict::Limited { response, .. } | Verdict::Respond(response) => {
                    return ResponseFuture::ready(response);
                }
            },
            Start::Ask { key, cost } => (key, cost),
        };
        // The clone that was driven to readiness serves this request.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let verdict = {
            let shared = self.shared.clone();
            async move { shared.decide(key, cost).await }
        };
        ResponseFuture::new(Box::pin(verdict), request, inner, self.shared.clone())
    }
}

impl<B: RateBackend, K: KeyExtractor> super::future::MakeFields for Shared<B, K> {
    fn fields(&self, decision: &Decision) -> Option<headers::Fields> {
        Shared::fields(self, decision)
    }
}
