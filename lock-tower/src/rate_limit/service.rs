//! The rate-limit service: decides each request, then calls the inner
//! service or answers the refusal itself.

use std::marker::PhantomData;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use lock_core::rate::RateBackend;
use tower::Service;

use super::RateVerdict as Verdict;
use super::decide::{Limit, Now, Start};
use super::future::ResponseFuture;
use crate::key::record_route;
use crate::key::{KeyExtractor, RequestParts};
use crate::request::{Neutral, RequestInfo};

/// The service made by [`RateLimitLayer`](super::RateLimitLayer). Clones share
/// the limiter, so limits hold across clones (and, on Redis, instances).
/// `R` is the layer's framework (see [`RequestInfo`]).
pub struct RateLimit<S, B, K, R = Neutral> {
    inner: S,
    limit: Arc<Limit<B, K>>,
    info: PhantomData<R>,
}

impl<S: Clone, B, K, R> Clone for RateLimit<S, B, K, R> {
    fn clone(&self) -> Self {
        RateLimit {
            inner: self.inner.clone(),
            limit: self.limit.clone(),
            info: PhantomData,
        }
    }
}

impl<S: std::fmt::Debug, B, K, R> std::fmt::Debug for RateLimit<S, B, K, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimit")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S, B, K, R> RateLimit<S, B, K, R> {
    pub(super) fn new(inner: S, limit: Arc<Limit<B, K>>) -> Self {
        RateLimit {
            inner,
            limit,
            info: PhantomData,
        }
    }

    /// The future of a request decided at once other than allowed
    /// quietly. Kept out of line: inlined, its paths make the compiler
    /// build the quiet path's future apart and copy it into place.
    #[inline(never)]
    fn settled<ReqBody>(
        &mut self,
        request: Request<ReqBody>,
        now: Now,
    ) -> ResponseFuture<S, ReqBody>
    where
        S: Service<Request<ReqBody>>,
        B: RateBackend,
        K: KeyExtractor,
    {
        match self.limit.settle(now) {
            Verdict::Allow(decision) => {
                let fields = decision.and_then(|decision| self.limit.fields(&decision));
                ResponseFuture::calling(self.inner.call(request), fields)
            }
            Verdict::Limited { response, .. } | Verdict::Respond(response) => {
                ResponseFuture::ready(response)
            }
        }
    }
}

impl<S, B, K, R, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<S, B, K, R>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send,
    B: RateBackend,
    K: KeyExtractor,
    R: RequestInfo,
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
        // waiting (in memory), is answered here: no boxed future, and the
        // ready service itself is called.
        let request = record_route::<R, _>(&self.limit.key, request);
        let deferred = match self.limit.start(RequestParts::new(&request).peer_as::<R>()) {
            // Most requests: allowed, with no fields to send. No verdict
            // is built for them, so nothing but the future is moved.
            Start::Now(Now::Allowed) => {
                self.limit.metrics.count_allowed();
                return ResponseFuture::calling(self.inner.call(request), None);
            }
            Start::Now(now) => return self.settled(request, now),
            Start::Ask(deferred) => deferred,
        };
        // The clone that was driven to readiness serves this request.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let verdict = {
            let limit = self.limit.clone();
            async move { limit.decide(deferred).await }
        };
        ResponseFuture::new(Box::pin(verdict), request, inner, self.limit.clone())
    }
}
