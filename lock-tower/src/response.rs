//! Responses the layers answer with themselves, and the mark that tells
//! the layers around them to pass them on as they are.

use bytes::Bytes;
use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderValue, Response, StatusCode};

/// Marks a response a layer answered itself instead of the service (a
/// lock's 503 or 423 when its key is busy, its 400 for a request without a
/// key, ...): the layers around it pass it on as it is. A rate limit adds
/// its `RateLimit` fields only to responses without the mark, so that a
/// client told "busy" is not also told about a quota the refusal has
/// nothing to do with.
///
/// The lock layers ([`LockLayer`](crate::LockLayer),
/// [`ConcurrencyLimitLayer`](crate::ConcurrencyLimitLayer)) mark their own
/// answers; an adapter's middleware that answers for a layer marks them the
/// same way, and a layer of its own may too.
///
/// ```
/// use lock_tower::Refusal;
///
/// let mut response = http::Response::new(());
/// *response.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
/// response.extensions_mut().insert(Refusal);
/// assert!(Refusal::marks(response.extensions()));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Refusal;

impl Refusal {
    /// Whether the response whose `extensions` these are is marked.
    pub fn marks(extensions: &http::Extensions) -> bool {
        extensions.get::<Refusal>().is_some()
    }
}

/// A plain-text response.
pub(crate) fn plain(status: StatusCode, text: &'static str) -> Response<Bytes> {
    plain_bytes(status, Bytes::from_static(text.as_bytes()))
}

/// A plain-text response of text made for it.
pub(crate) fn plain_text(status: StatusCode, text: String) -> Response<Bytes> {
    plain_bytes(status, Bytes::from(text))
}

fn plain_bytes(status: StatusCode, text: Bytes) -> Response<Bytes> {
    let mut response = Response::new(text);
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// 503 with `Retry-After: 1`: the backend failed and the policy is to refuse.
pub(crate) fn unavailable() -> Response<Bytes> {
    let mut response = plain(StatusCode::SERVICE_UNAVAILABLE, "Service Unavailable\n");
    response
        .headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from_static("1"));
    response
}
