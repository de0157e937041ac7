//! A response body that holds a lock until it has been sent.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use actix_web::body::{BodySize, MessageBody};
use bytes::Bytes;
use lock_tower::HeldLock;
use pin_project::pin_project;

/// The response body of [`LockMiddleware`](crate::LockMiddleware) when its
/// layer holds the lock until the body has been sent: the inner body, and
/// the lock, released when the body ends or is dropped (the client went
/// away).
#[pin_project]
pub struct HeldBody<B> {
    #[pin]
    body: B,
    held: Option<HeldLock>,
}

impl<B> HeldBody<B> {
    pub(crate) fn new(body: B, held: Option<HeldLock>) -> Self {
        HeldBody { body, held }
    }

    /// Whether the body still holds its lock.
    pub fn holds_lock(&self) -> bool {
        self.held.is_some()
    }
}

impl<B> std::fmt::Debug for HeldBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeldBody")
            .field("holds_lock", &self.held.is_some())
            .finish_non_exhaustive()
    }
}

impl<B: MessageBody> MessageBody for HeldBody<B> {
    type Error = B::Error;

    fn size(&self) -> BodySize {
        self.body.size()
    }

    fn poll_next(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, Self::Error>>> {
        let this = self.project();
        let next = ready!(this.body.poll_next(cx));
        if next.is_none() {
            // Sent: the lock goes (released in the background).
            this.held.take();
        }
        Poll::Ready(next)
    }
}
