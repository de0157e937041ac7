//! [`HeaderKey`]: a header's value.

use http::header::HeaderName;

use super::{HeadersRead, KeyExtractor, Missing, RequestParts};

/// A header's value, e.g. an API key; requests without it have no key.
#[derive(Debug, Clone)]
pub struct HeaderKey(HeaderName);

impl HeaderKey {
    /// Keys by `header`.
    pub fn new(header: HeaderName) -> Self {
        HeaderKey(header)
    }
}

impl HeaderKey {
    fn value<'r>(&self, request: RequestParts<'r>) -> Option<&'r str> {
        let value = request.headers.get(&self.0)?.to_str().ok()?;
        (!value.is_empty()).then_some(value)
    }
}

impl KeyExtractor for HeaderKey {
    fn extract(&self, request: RequestParts<'_>) -> Option<String> {
        self.value(request).map(str::to_owned)
    }

    fn missing(&self, _request: RequestParts<'_>) -> Missing {
        Missing::request(format!(
            "the `{}` header is missing, empty or not text",
            self.0
        ))
    }

    fn with_key<R>(&self, request: RequestParts<'_>, f: impl FnOnce(Option<&str>) -> R) -> R {
        f(self.value(request))
    }

    fn headers_read(&self) -> HeadersRead<'_> {
        HeadersRead::Only(std::slice::from_ref(&self.0))
    }

    fn reads_route(&self) -> bool {
        false
    }
}
