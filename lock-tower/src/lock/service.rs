//! The lock service: takes the key's lock, calls the inner service, and
//! lets go when the response (or its body) is done.

use std::marker::PhantomData;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use lock_core::lock::LockBackend;
use tower::Service;

use super::acquire::Locking;
use super::future::ResponseFuture;
use crate::body::GuardedBody;
use crate::key::record_route;
use crate::key::{KeyExtractor, RequestParts};
use crate::request::{Neutral, RequestInfo};

/// The service made by [`LockLayer`](super::LockLayer) and
/// [`ConcurrencyLimitLayer`](super::ConcurrencyLimitLayer).
/// `R` is the layer's framework (see [`RequestInfo`]).
pub struct LockService<S, B, K, R = Neutral> {
    inner: S,
    locking: Arc<Locking<B, K>>,
    info: PhantomData<R>,
}

impl<S: Clone, B, K, R> Clone for LockService<S, B, K, R> {
    fn clone(&self) -> Self {
        LockService {
            inner: self.inner.clone(),
            locking: self.locking.clone(),
            info: PhantomData,
        }
    }
}

impl<S: std::fmt::Debug, B, K, R> std::fmt::Debug for LockService<S, B, K, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockService")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S, B, K, R> LockService<S, B, K, R> {
    pub(super) fn new(inner: S, locking: Arc<Locking<B, K>>) -> Self {
        LockService {
            inner,
            locking,
            info: PhantomData,
        }
    }
}

impl<S, B, K, R, ReqBody, ResBody> Service<Request<ReqBody>> for LockService<S, B, K, R>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send,
    B: LockBackend,
    K: KeyExtractor,
    R: RequestInfo,
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
        let request = record_route::<R, _>(&locking.key, request);
        let parts = RequestParts::new(&request).peer_as::<R>();
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
