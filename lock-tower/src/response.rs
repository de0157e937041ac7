//! Responses the layers answer with themselves.

use bytes::Bytes;
use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderValue, Response, StatusCode};

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
