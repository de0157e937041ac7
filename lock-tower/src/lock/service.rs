//! The lock service: takes the key's lock, calls the inner service, and
//! lets go when the response (or its body) is done.

use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use lock_core::lock::LockBackend;
use tower::Service;

use super::acquire::Locking;
use super::future::ResponseFuture;
use crate::body::GuardedBody;
use crate::key::{KeyExtractor, RequestParts};

/// The service made by [`LockLayer`](super::LockLayer) and
/// [`ConcurrencyLimitLayer`](super::ConcurrencyLimitLayer).
pub struct LockService<S, B, K> {
    inner: S,
    locking: Arc<Locking<B, K>>,
}

impl<S: Clone, B, K> Clone for LockService<S, B, K> {
    fn clone(&self) -> Self {
        LockService {
            inner: self.inner.clone(),
            locking: self.locking.clone(),
        }
    }
}

impl<S: std::fmt::Debug, B, K> std::fmt::Debug for LockService<S, B, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockService")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S, B, K> LockService<S, B, K> {
    pub(super) fn new(inner: S, locking: Arc<Locking<B, K>>) -> Self {
        LockService { inner, locking }
    }
}

impl<S, B, K, ReqBody, ResBody> Service<Request<ReqBody>> for LockService<S, B, K>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send,
    B: LockBackend,
    K: KeyExtractor,
    ReqBody: Send + 'static,
    ResBody: From<Bytes>,
{
    type Response = Response<GuardedBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S, ReqBody, ResBody>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let locking = self.locking.clone();
        let parts = RequestParts::new(&request);
        let method = request.method().clone();
        let key = locking
            .key
            .extract(parts)
            .ok_or_else(|| locking.key.missing(parts));
        let verdict = async move {
            match key {
                Ok(key) => locking.acquire_key(key, &method).await,
                Err(why) => locking.missing(why),
            }
        };
        ResponseFuture::new(
            Box::pin(verdict),
            request,
            inner,
            self.locking.hold_body,
            self.locking.cancel_on_loss,
            self.locking.failure.timeout,
        )
    }
}
