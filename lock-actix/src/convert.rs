//! Conversions between actix-web 4 (`http` 0.2) and the `http` 1 types
//! lock-tower speaks.

use actix_web::HttpRequest;
use actix_web::HttpResponse;
use actix_web::http::StatusCode as ActixStatus;
use actix_web::http::header::{HeaderName as ActixName, HeaderValue as ActixValue};
use bytes::Bytes;
use lock_tower::key::{HeadersRead, RequestParts, RouteParams};

/// The parts of an actix request, in the `http` 1 types the key extractors
/// read (actix-web 4 uses `http` 0.2).
pub(crate) struct View {
    method: http::Method,
    uri: http::Uri,
    headers: http::HeaderMap,
    extensions: http::Extensions,
}

impl View {
    /// The view of `request`, with the header fields the key extractor or
    /// a cost function reads (`read`), and no others.
    pub(crate) fn of(request: &HttpRequest, read: HeadersRead<'_>) -> Self {
        let mut headers = http::HeaderMap::new();
        match read {
            HeadersRead::None => {}
            HeadersRead::Only(names) => {
                for name in names {
                    for value in request.headers().get_all(name.as_str()) {
                        if let Ok(value) = http::HeaderValue::from_bytes(value.as_bytes()) {
                            headers.append(name.clone(), value);
                        }
                    }
                }
            }
            _ => {
                headers.reserve(request.headers().len());
                for (name, value) in request.headers() {
                    if let (Ok(name), Ok(value)) = (
                        http::HeaderName::from_bytes(name.as_str().as_bytes()),
                        http::HeaderValue::from_bytes(value.as_bytes()),
                    ) {
                        headers.append(name, value);
                    }
                }
            }
        }
        let mut extensions = http::Extensions::new();
        if let Some(peer) = request.peer_addr() {
            extensions.insert(peer);
        }
        // Known once a resource matched (not yet in `App::wrap` middleware).
        if let Some(pattern) = request.match_pattern() {
            let params = request
                .match_info()
                .iter()
                .map(|(name, value)| (name.to_owned(), value.to_owned()));
            extensions.insert(RouteParams::new(Some(pattern), params));
        }
        // A server-side request is almost always in origin form: the path
        // and query are the whole URI, and parse without formatting.
        let uri = request.uri();
        let uri = match (uri.scheme(), uri.path_and_query()) {
            (None, Some(path)) => path.as_str().parse(),
            _ => uri.to_string().parse(),
        };
        View {
            method: http::Method::from_bytes(request.method().as_str().as_bytes())
                .unwrap_or_default(),
            uri: uri.unwrap_or_default(),
            headers,
            extensions,
        }
    }

    pub(crate) fn parts(&self) -> RequestParts<'_> {
        RequestParts::from_pieces(&self.method, &self.uri, &self.headers, &self.extensions)
    }
}

fn copy_headers(from: &http::HeaderMap, to: &mut actix_web::http::header::HeaderMap) {
    for (name, value) in from {
        insert_header(to, name, value);
    }
}

/// Sets one field, converted to actix-web's types, on `to`.
pub(crate) fn insert_header(
    to: &mut actix_web::http::header::HeaderMap,
    name: &http::HeaderName,
    value: &http::HeaderValue,
) {
    if let (Some(name), Ok(value)) = (actix_name(name), ActixValue::from_bytes(value.as_bytes())) {
        to.insert(name, value);
    }
}

/// The actix-web name of a header: the rate-limit fields (on every limited
/// response) without parsing, others parsed.
fn actix_name(name: &http::HeaderName) -> Option<ActixName> {
    use lock_tower::headers::{RATELIMIT, RATELIMIT_POLICY};
    if name == RATELIMIT {
        Some(ActixName::from_static("ratelimit"))
    } else if name == RATELIMIT_POLICY {
        Some(ActixName::from_static("ratelimit-policy"))
    } else {
        ActixName::from_bytes(name.as_str().as_bytes()).ok()
    }
}

pub(crate) fn to_actix(response: http::Response<Bytes>) -> HttpResponse {
    let status = ActixStatus::from_u16(response.status().as_u16())
        .unwrap_or(ActixStatus::INTERNAL_SERVER_ERROR);
    let (parts, body) = response.into_parts();
    let mut out = HttpResponse::build(status).body(body);
    copy_headers(&parts.headers, out.headers_mut());
    out
}
