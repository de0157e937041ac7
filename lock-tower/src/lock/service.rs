use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use http::header::RETRY_AFTER;
use http::{HeaderValue, Request, Response, StatusCode};
use lock_core::Error;
use lock_core::lock::{Lock, LockBackend, LockGuard, Semaphore};
use tower::Service;

use super::future::ResponseFuture;
use super::layer::{LockLayer, Mode};
use super::{HeldLock as Acquired, LockVerdict as Verdict};
use crate::body::{GuardedBody, Held};
use crate::failure::{OnBackendFailure, no_key};
use crate::headers::retry_after;
use crate::key::{KeyExtractor, Missing, RequestParts};
use crate::response::{plain, unavailable};

/// The service made by [`LockLayer`] and
/// [`ConcurrencyLimitLayer`](super::ConcurrencyLimitLayer).
pub struct LockService<S, B, K> {
    inner: S,
    config: Arc<LockLayer<B, K>>,
}

impl<S: Clone, B, K> Clone for LockService<S, B, K> {
    fn clone(&self) -> Self {
        LockService {
            inner: self.inner.clone(),
            config: self.config.clone(),
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
    pub(super) fn new(inner: S, config: Arc<LockLayer<B, K>>) -> Self {
        LockService { inner, config }
    }
}

/// Takes the lock (or a permit) `name` on `backend`.
async fn take<BK: LockBackend>(
    backend: BK,
    config_mode: Mode,
    options: lock_core::lock::LockOptions,
    name: &str,
    wait: Duration,
) -> lock_core::Result<Option<LockGuard<BK>>> {
    match config_mode {
        Mode::Mutex => Lock::with_options(backend, name, options)?.lock(wait).await,
        Mode::Concurrency(permits) => {
            Semaphore::with_options(backend, name, permits, options)?
                .acquire(wait)
                .await
        }
    }
}

fn held<BK: LockBackend>(guard: LockGuard<BK>) -> Acquired {
    let lost = Box::pin(guard.lost_owned());
    Acquired {
        guard: Box::new(guard),
        lost,
        release: release_guard::<BK>,
    }
}

fn release_guard<BK: LockBackend>(guard: Held) -> BoxFuture<'static, ()> {
    Box::pin(async move {
        if let Ok(guard) = guard.downcast::<LockGuard<BK>>()
            && let Err(error) = guard.release().await
        {
            tracing::warn!(%error, "lock release failed; it expires with its lease");
        }
    })
}

impl<B: LockBackend, K: KeyExtractor> LockLayer<B, K> {
    fn missing(&self) -> Verdict {
        self.no_key(&self.key.missing())
    }

    fn no_key(&self, missing: &Missing) -> Verdict {
        self.metrics.count_missing_key();
        match no_key(self.missing_key, missing, "lock", &self.warned) {
            None => Verdict::Proceed(None),
            Some(response) => Verdict::Respond(response),
        }
    }

    fn busy(&self) -> Verdict {
        self.metrics.count_refused();
        if self.wait.is_zero() {
            let mut response = plain(self.busy_status, "Busy: another request holds this key\n");
            response
                .headers_mut()
                .insert(RETRY_AFTER, HeaderValue::from_static("1"));
            Verdict::Respond(response)
        } else {
            let mut response = plain(
                StatusCode::SERVICE_UNAVAILABLE,
                "Busy: another request held this key too long\n",
            );
            response
                .headers_mut()
                .insert(RETRY_AFTER, retry_after(self.wait));
            Verdict::Respond(response)
        }
    }

    /// Takes the lock for `request` as the layer's services do: the building
    /// block of framework adapters (axum extractors, actix-web middleware).
    pub async fn acquire(&self, request: RequestParts<'_>) -> Verdict {
        match self.key.extract(request) {
            Some(key) => self.acquire_key(key).await,
            None => self.missing(),
        }
    }

    async fn acquire_key(&self, key: String) -> Verdict {
        let name = format!("{}:{key}", self.scope);
        let bound = self.wait + self.timeout;
        let result = tokio::time::timeout(
            bound,
            take(
                self.backend.clone(),
                self.mode,
                self.options,
                &name,
                self.wait,
            ),
        )
        .await
        .unwrap_or(Err(Error::Timeout(bound)));
        let error = match result {
            Ok(Some(guard)) => {
                self.metrics.count_allowed();
                return Verdict::Proceed(Some(held(guard)));
            }
            Ok(None) => return self.busy(),
            Err(Error::InvalidName { reason, .. }) => {
                return self.no_key(&Missing::request(format!("the request's key {reason}")));
            }
            Err(error) if !error.is_backend_failure() => {
                tracing::error!(%error, "lock layer misconfigured");
                return Verdict::Respond(plain(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "Lock misconfigured\n",
                ));
            }
            Err(error) => error,
        };
        self.metrics.count_backend_failure();
        tracing::warn!(%error, policy = ?self.on_failure, "lock backend failed");
        match self.on_failure {
            OnBackendFailure::FailOpen => {
                self.metrics.count_allowed();
                Verdict::Proceed(None)
            }
            OnBackendFailure::Fallback => {
                match take(
                    self.fallback.clone(),
                    self.mode,
                    self.options,
                    &name,
                    self.wait,
                )
                .await
                {
                    Ok(Some(guard)) => {
                        self.metrics.count_allowed();
                        Verdict::Proceed(Some(held(guard)))
                    }
                    Ok(None) => self.busy(),
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
        let config = self.config.clone();
        let key = config.key.extract(RequestParts::new(&request));
        let verdict = async move {
            match key {
                Some(key) => config.acquire_key(key).await,
                None => config.missing(),
            }
        };
        ResponseFuture::new(
            Box::pin(verdict),
            request,
            inner,
            self.config.hold_body,
            self.config.cancel_on_loss,
            self.config.timeout,
        )
    }
}
