//! Distributed rate limiting as a tower layer: [`RateLimitLayer`], whose
//! own docs say what it does, which response fields it sends, and how to
//! set it up.

mod decide;
mod future;
mod layer;
mod service;
#[cfg(test)]
mod tests;

use bytes::Bytes;
use http::Response;
use lock_core::rate::Decision;

pub(crate) use self::decide::ErasedDecision;
pub use self::future::ResponseFuture;
pub use self::layer::{DEFAULT_DECISION_TIMEOUT, RateLimitLayer, RateLimitLayerWith};
pub use self::service::RateLimit;

/// What a [`RateLimitLayer`] decided for one request.
#[derive(Debug)]
#[non_exhaustive]
pub enum RateVerdict {
    /// Go ahead; the decision (for headers) unless the backend failed open or
    /// the request had no key and passes through.
    Allow(Option<Decision>),
    /// Refused by the limit: the decision, and the 429 to answer with.
    Limited {
        /// The decision.
        decision: Decision,
        /// The refusal, with `RateLimit*` and `Retry-After` fields.
        response: Response<Bytes>,
    },
    /// No decision could be made (backend failed closed, no key, bad
    /// configuration): answer with this.
    Respond(Response<Bytes>),
}
