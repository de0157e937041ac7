//! What the adapters' extractors hand to handlers: a rate-limit decision
//! and a lock held for the handler's lifetime, the same for every
//! framework. An adapter's extractor type wraps one and adds its
//! framework's glue (a `FromRequestParts` or `FromRequest` impl, a way to
//! put the rate-limit fields on its response type).

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Response};
use lock_core::rate::Decision;

use super::{LockVerdict, RateVerdict, SharedLock, SharedRateLimit};
use crate::HeldLock;
use crate::key::RequestParts;

/// A rate-limit decision as the adapters hand it to handlers (whatever it
/// is: the handler decides what to do with a refused request).
#[derive(Clone)]
pub struct HandlerDecision {
    decision: Option<Decision>,
    limit: SharedRateLimit,
}

impl std::fmt::Debug for HandlerDecision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HandlerDecision")
            .field("decision", &self.decision)
            .finish()
    }
}

impl HandlerDecision {
    /// The decision; `None` when the backend failed open or the request had
    /// no key and passes through.
    pub fn decision(&self) -> Option<&Decision> {
        self.decision.as_ref()
    }

    /// Whether the request may go ahead.
    pub fn allowed(&self) -> bool {
        self.decision.as_ref().is_none_or(|d| d.allowed)
    }

    /// Adds the `RateLimit*` (and, when refused, `Retry-After`) fields of the
    /// decision to `headers`.
    pub fn apply_headers(&self, headers: &mut HeaderMap) {
        if let Some(decision) = &self.decision {
            self.limit.apply_headers(headers, decision);
        }
    }

    /// Hands `f` each field [`apply_headers`](Self::apply_headers) would add
    /// (see [`RateLimitLayer::for_each_field`](crate::RateLimitLayer::for_each_field)).
    pub fn for_each_field(&self, f: impl FnMut(&HeaderName, HeaderValue)) {
        if let Some(decision) = &self.decision {
            self.limit.for_each_field(decision, f);
        }
    }
}

impl SharedRateLimit {
    /// Decides for a handler: `Ok` with the decision, allowed or not, when
    /// the handler should see it (`refuse_limited` turns a refusal into the
    /// layer's 429 instead); `Err` with the response to answer with when no
    /// decision could be made (backend failed closed, no key).
    pub async fn decide_for_handler(
        &self,
        parts: RequestParts<'_>,
        refuse_limited: bool,
    ) -> Result<HandlerDecision, Response<Bytes>> {
        let decision = match self.decide(parts).await {
            RateVerdict::Allow(decision) => decision,
            RateVerdict::Limited { response, .. } if refuse_limited => return Err(response),
            RateVerdict::Limited { decision, .. } => Some(decision),
            RateVerdict::Respond(response) => return Err(response),
        };
        Ok(HandlerDecision {
            decision,
            limit: self.clone(),
        })
    }
}

/// A lock held for a handler: what the adapters' `Locked` extractors hold
/// (and hand out through `Deref`), from
/// [`SharedLock::acquire_for_handler`]. Dropping it (the handler returns,
/// or the client goes away) releases the lock in the background; a handler
/// that wants the key free before its response leaves calls
/// [`release`](Self::release).
///
/// ```
/// use lock_core::backend::MemoryBackend;
/// use lock_tower::LockLayer;
/// use lock_tower::adapter::RouteLock;
/// use lock_tower::key::{GlobalKey, RequestParts};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let route_lock = RouteLock::new(LockLayer::new(MemoryBackend::new(), GlobalKey::new()));
/// let request = http::Request::post("/reindex").body(()).unwrap();
/// let parts = RequestParts::new(&request);
/// let lock = route_lock.lock().acquire_for_handler(parts).await.unwrap();
/// assert!(lock.held().is_some());
/// assert_eq!(lock.fencing_token(), None); // fencing is not asked for
/// // Busy while held: a second request waits, then is answered 503.
/// let busy = RouteLock::new(
///     LockLayer::new(MemoryBackend::new(), GlobalKey::new()).wait(std::time::Duration::ZERO),
/// );
/// let first = busy.lock().acquire_for_handler(parts).await.unwrap();
/// let refused = busy.lock().acquire_for_handler(parts).await.unwrap_err();
/// assert!(refused.status().is_client_error() || refused.status().is_server_error());
/// first.release().await;
/// lock.release().await;
/// # }
/// ```
#[derive(Debug)]
pub struct HandlerLock {
    held: Option<HeldLock>,
}

impl HandlerLock {
    /// The lock held; `None` when the request went ahead without one (the
    /// backend failed and the policy let it through, or it had no key and
    /// [`MissingKey::PassThrough`](crate::MissingKey::PassThrough)).
    pub fn held(&self) -> Option<&HeldLock> {
        self.held.as_ref()
    }

    /// The lock's fencing token, when its options ask for fencing (see
    /// [`HeldLock::fencing_token`]).
    pub fn fencing_token(&self) -> Option<u64> {
        self.held.as_ref().and_then(HeldLock::fencing_token)
    }

    /// Releases the lock now.
    pub async fn release(self) {
        if let Some(held) = self.held {
            held.release().await;
        }
    }

    /// The held lock, to keep past the handler.
    pub fn into_inner(self) -> Option<HeldLock> {
        self.held
    }
}

impl SharedLock {
    /// Takes the lock for a handler, as the layer would for the request:
    /// `Ok` to go ahead (holding the lock, or without one as the policies
    /// allow); `Err` with the response to answer with (busy, failed closed,
    /// no key), marked [`Refusal`](crate::Refusal) as the layer marks it.
    pub async fn acquire_for_handler(
        &self,
        parts: RequestParts<'_>,
    ) -> Result<HandlerLock, Response<Bytes>> {
        match self.acquire(parts).await {
            LockVerdict::Proceed(held) => Ok(HandlerLock { held }),
            LockVerdict::Respond(response) => Err(response),
        }
    }
}
