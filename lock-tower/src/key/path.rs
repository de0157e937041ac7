//! [`PathKey`]: the request path.

use super::{HeadersRead, KeyExtractor, RequestParts};

/// The request path (e.g. one lock per `/orders/42`).
#[derive(Debug, Clone, Copy, Default)]
pub struct PathKey;

impl KeyExtractor for PathKey {
    fn extract(&self, request: RequestParts<'_>) -> Option<String> {
        Some(request.uri.path().to_owned())
    }

    fn with_key<R>(&self, request: RequestParts<'_>, f: impl FnOnce(Option<&str>) -> R) -> R {
        f(Some(request.uri.path()))
    }

    fn headers_read(&self) -> HeadersRead<'_> {
        HeadersRead::None
    }

    fn reads_route(&self) -> bool {
        false
    }
}
