//! Responses the layers answer with themselves.

use bytes::Bytes;
use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderValue, Response, StatusCode};

/// A plain-text response.
pub(crate) fn plain(status: StatusCode, text: &'static str) -> Response<Bytes> {
    let mut response = Response::new(Bytes::from_static(text.as_bytes()));
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
