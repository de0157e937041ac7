use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use futures_util::future::BoxFuture;
use http::{Request, Response, StatusCode};
use pin_project::pin_project;
use tower::Service;

use crate::body::GuardedBody;
use crate::response::{Refusal, plain};

use super::{HeldLock as Acquired, LockVerdict as Verdict};

// The request waits in the first state; boxing it would cost an allocation
// per request for no gain (the future is built once per request anyway).
#[allow(clippy::large_enum_variant)]
#[pin_project(project = StateProj)]
enum State<S: Service<Request<ReqBody>>, ReqBody, ResBody> {
    Acquiring {
        verdict: BoxFuture<'static, Verdict>,
        request: Option<Request<ReqBody>>,
        inner: Option<S>,
    },
    Calling {
        #[pin]
        future: S::Future,
        acquired: Option<Acquired>,
    },
    /// The response is ready; the lock is being released before it goes out,
    /// so a client that sends its next request at once finds the key free.
    Releasing {
        release: BoxFuture<'static, ()>,
        response: Option<Response<ResBody>>,
    },
    Done,
}

/// Response future of [`LockService`](super::LockService): takes the lock,
/// calls the inner service, and releases the lock when the response is ready
/// (or hands it to the body). Dropping it releases the lock at once.
#[pin_project]
pub struct ResponseFuture<S: Service<Request<ReqBody>>, ReqBody, ResBody> {
    #[pin]
    state: State<S, ReqBody, ResBody>,
    hold_body: bool,
    cancel_on_loss: bool,
    timeout: std::time::Duration,
}

impl<S: Service<Request<ReqBody>>, ReqBody, ResBody> std::fmt::Debug
    for ResponseFuture<S, ReqBody, ResBody>
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl<S: Service<Request<ReqBody>>, ReqBody, ResBody> ResponseFuture<S, ReqBody, ResBody> {
    pub(super) fn new(
        verdict: BoxFuture<'static, Verdict>,
        request: Request<ReqBody>,
        inner: S,
        hold_body: bool,
        cancel_on_loss: bool,
        timeout: std::time::Duration,
    ) -> Self {
        ResponseFuture {
            state: State::Acquiring {
                verdict,
                request: Some(request),
                inner: Some(inner),
            },
            hold_body,
            cancel_on_loss,
            timeout,
        }
    }
}

impl<S, ReqBody, ResBody> Future for ResponseFuture<S, ReqBody, ResBody>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    ResBody: From<Bytes>,
{
    type Output = Result<Response<GuardedBody<ResBody>>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Acquiring {
                    verdict,
                    request,
                    inner,
                } => {
                    let acquired = match ready!(verdict.as_mut().poll(cx)) {
                        Verdict::Proceed(acquired) => acquired,
                        Verdict::Respond(response) => {
                            this.state.set(State::Done);
                            return Poll::Ready(Ok(response.map(GuardedBody::from)));
                        }
                    };
                    let (Some(request), Some(mut inner)) = (request.take(), inner.take()) else {
                        unreachable!("an acquiring future holds its request and service");
                    };
                    let future = inner.call(request);
                    this.state.set(State::Calling { future, acquired });
                }
                StateProj::Calling { future, acquired } => {
                    let response = match future.poll(cx) {
                        Poll::Ready(response) => response?,
                        Poll::Pending => {
                            if *this.cancel_on_loss
                                && let Some(acquired) = acquired.as_mut()
                                && acquired.lost.as_mut().poll(cx).is_ready()
                            {
                                tracing::warn!("lock lease lost; cancelling the handler");
                                this.state.set(State::Done);
                                let mut response =
                                    plain(StatusCode::SERVICE_UNAVAILABLE, "Lock lease lost\n");
                                // The layer's own answer, as its refusals.
                                response.extensions_mut().insert(Refusal);
                                return Poll::Ready(Ok(response.map(GuardedBody::from)));
                            }
                            return Poll::Pending;
                        }
                    };
                    match acquired.take() {
                        Some(held) if *this.hold_body => {
                            this.state.set(State::Done);
                            let guard = Some(held.guard);
                            return Poll::Ready(Ok(
                                response.map(|body| GuardedBody::new(body, guard))
                            ));
                        }
                        Some(held) => {
                            // Bounded: a slow backend delays the response by at
                            // most the decision timeout (the TTL covers the rest).
                            let release =
                                tokio::time::timeout(*this.timeout, (held.release)(held.guard));
                            this.state.set(State::Releasing {
                                release: Box::pin(async move {
                                    let _ = release.await;
                                }),
                                response: Some(response),
                            });
                        }
                        None => {
                            this.state.set(State::Done);
                            return Poll::Ready(Ok(
                                response.map(|body| GuardedBody::new(body, None))
                            ));
                        }
                    }
                }
                StateProj::Releasing { release, response } => {
                    ready!(release.as_mut().poll(cx));
                    let Some(response) = response.take() else {
                        panic!("ResponseFuture polled after completion");
                    };
                    this.state.set(State::Done);
                    return Poll::Ready(Ok(response.map(|body| GuardedBody::new(body, None))));
                }
                StateProj::Done => panic!("ResponseFuture polled after completion"),
            }
        }
    }
}
