//! A response body that holds a lock until it has been sent.

use std::any::Any;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project::pin_project;

/// Something held while a body is sent (a lock guard, a permit).
pub(crate) type Held = Box<dyn Any + Send + Sync>;

/// The response body of [`LockLayer`](crate::LockLayer) services: the inner
/// body, plus the lock guard when the layer holds the lock until the body has
/// been sent. The guard is dropped (and the lock released) at the end of the
/// stream, or when the body is dropped (the client went away).
#[pin_project]
pub struct GuardedBody<B> {
    #[pin]
    inner: B,
    guard: Option<Held>,
}

impl<B> GuardedBody<B> {
    pub(crate) fn new(inner: B, guard: Option<Held>) -> Self {
        GuardedBody { inner, guard }
    }

    /// Whether the body still holds a lock.
    pub fn holds_lock(&self) -> bool {
        self.guard.is_some()
    }
}

impl<B> std::fmt::Debug for GuardedBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuardedBody")
            .field("holds_lock", &self.guard.is_some())
            .finish_non_exhaustive()
    }
}

impl<B: From<Bytes>> From<Bytes> for GuardedBody<B> {
    fn from(bytes: Bytes) -> Self {
        GuardedBody::new(B::from(bytes), None)
    }
}

impl<B: Body> Body for GuardedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let frame = ready!(this.inner.poll_frame(cx));
        if frame.is_none() {
            this.guard.take();
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
