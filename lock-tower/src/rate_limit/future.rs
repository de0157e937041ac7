use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use futures_util::future::BoxFuture;
use http::{Request, Response};
use lock_core::rate::Decision;
use pin_project::pin_project;
use tower::Service;

use super::RateVerdict as Verdict;
use crate::Refusal;
use crate::headers::Fields;

/// Builds the rate-limit fields of a decision.
pub(crate) trait MakeFields: Send + Sync {
    fn fields(&self, decision: &Decision) -> Option<Fields>;
}

pub(super) type AddHeaders = std::sync::Arc<dyn MakeFields>;

// The request waits in the first state; boxing it would cost an allocation
// per request for no gain (the future is built once per request anyway).
/// A decision the backend is still making, with what the call needs once
/// it is made.
struct Pending<S, ReqBody> {
    verdict: BoxFuture<'static, Verdict>,
    request: Request<ReqBody>,
    inner: S,
    add_headers: AddHeaders,
}

#[pin_project(project = StateProj)]
enum State<S: Service<Request<ReqBody>>, ReqBody> {
    /// Boxed, as the verdict already is: a request is large, and the
    /// future is moved by value before it is first polled, on every path.
    Deciding(Option<Box<Pending<S, ReqBody>>>),
    Calling {
        #[pin]
        future: S::Future,
        /// Boxed: most responses carry none, and the future is moved by
        /// value before it is polled.
        fields: Option<Box<Fields>>,
    },
    Ready {
        response: Option<Response<Bytes>>,
    },
    Done,
}

/// Response future of [`RateLimit`](super::RateLimit): decides, then calls the
/// inner service and adds the rate-limit headers.
#[pin_project]
pub struct ResponseFuture<S: Service<Request<ReqBody>>, ReqBody> {
    #[pin]
    state: State<S, ReqBody>,
}

impl<S: Service<Request<ReqBody>>, ReqBody> std::fmt::Debug for ResponseFuture<S, ReqBody> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl<S: Service<Request<ReqBody>>, ReqBody> ResponseFuture<S, ReqBody> {
    pub(super) fn new(
        verdict: BoxFuture<'static, Verdict>,
        request: Request<ReqBody>,
        inner: S,
        add_headers: AddHeaders,
    ) -> Self {
        ResponseFuture {
            state: State::Deciding(Some(Box::new(Pending {
                verdict,
                request,
                inner,
                add_headers,
            }))),
        }
    }
}

impl<S: Service<Request<ReqBody>>, ReqBody> ResponseFuture<S, ReqBody> {
    /// Decided at once: the inner service is already called, and `fields`
    /// go on its response.
    #[inline]
    pub(super) fn calling(future: S::Future, fields: Option<Fields>) -> Self {
        ResponseFuture {
            state: State::Calling {
                future,
                fields: fields.map(Box::new),
            },
        }
    }

    /// Decided at once: answer with `response`.
    pub(super) fn ready(response: Response<Bytes>) -> Self {
        ResponseFuture {
            state: State::Ready {
                response: Some(response),
            },
        }
    }
}

impl<S, ReqBody, ResBody> Future for ResponseFuture<S, ReqBody>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    ResBody: From<Bytes>,
{
    type Output = Result<Response<ResBody>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Deciding(pending) => {
                    let Some(deciding) = pending.as_mut() else {
                        panic!("ResponseFuture polled after completion");
                    };
                    let decision = match ready!(deciding.verdict.as_mut().poll(cx)) {
                        Verdict::Allow(decision) => decision,
                        Verdict::Limited { response, .. } | Verdict::Respond(response) => {
                            this.state.set(State::Done);
                            return Poll::Ready(Ok(response.map(ResBody::from)));
                        }
                    };
                    let Some(deciding) = pending.take() else {
                        unreachable!("checked above");
                    };
                    let Pending {
                        request,
                        mut inner,
                        add_headers,
                        ..
                    } = *deciding;
                    let fields = decision.and_then(|decision| add_headers.fields(&decision));
                    let future = inner.call(request);
                    let fields = fields.map(Box::new);
                    this.state.set(State::Calling { future, fields });
                }
                StateProj::Calling { future, fields } => {
                    let mut response = ready!(future.poll(cx))?;
                    // A refusal an inner layer answered (a busy lock) is
                    // about something else than the rate.
                    if let Some(fields) = fields.take()
                        && !Refusal::marks(response.extensions())
                    {
                        (*fields).insert_into(response.headers_mut());
                    }
                    return Poll::Ready(Ok(response));
                }
                StateProj::Ready { response } => {
                    let Some(response) = response.take() else {
                        panic!("ResponseFuture polled after completion");
                    };
                    return Poll::Ready(Ok(response.map(ResBody::from)));
                }
                StateProj::Done => panic!("ResponseFuture polled after completion"),
            }
        }
    }
}
