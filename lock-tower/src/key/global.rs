//! [`GlobalKey`]: one constant key for every request.

use std::sync::Arc;

use super::{HeadersRead, KeyExtractor, RequestParts};

/// The same key for every request: one limit for the whole service.
#[derive(Debug, Clone)]
pub struct GlobalKey(Arc<str>);

impl GlobalKey {
    /// The key `"global"`.
    pub fn new() -> Self {
        GlobalKey(Arc::from("global"))
    }

    /// A chosen constant key.
    pub fn named(key: &str) -> Self {
        GlobalKey(Arc::from(key))
    }
}

impl Default for GlobalKey {
    fn default() -> Self {
        Self::new()
    }
}

impl KeyExtractor for GlobalKey {
    fn extract(&self, _request: RequestParts<'_>) -> Option<String> {
        Some(self.0.to_string())
    }

    fn with_key<R>(&self, _request: RequestParts<'_>, f: impl FnOnce(Option<&str>) -> R) -> R {
        f(Some(&self.0))
    }

    fn headers_read(&self) -> HeadersRead<'_> {
        HeadersRead::None
    }

    fn reads_route(&self) -> bool {
        false
    }
}
