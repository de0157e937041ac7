//! Conversions between actix-web 4 (`http` 0.2) and the `http` 1 types
//! lock-tower speaks.

use actix_web::HttpRequest;
use actix_web::HttpResponse;
use actix_web::http::StatusCode as ActixStatus;
use actix_web::http::header::{HeaderName as ActixName, HeaderValue as ActixValue};
use bytes::Bytes;
use lock_tower::adapter::RouteParams;
use lock_tower::key::{HeadersRead, RequestParts};

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
        if let Some(route) = route_params(request) {
            extensions.insert(route);
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

/// The route `request` matched and its parameters, each decoded as
/// actix-web's own `web::Path` hands it to handlers, so that a key is what
/// the handler sees.
///
/// actix-web's router decodes the path once (keeping `%25`, `%2F` and
/// `%2B` encoded) and makes a value that is not UTF-8 lossy, so that every
/// such value reads `\u{FFFD}`; `web::Path` decodes the rest. Both are done
/// here, and a value that is not UTF-8 is marked so rather than keyed by
/// its lossy copy.
fn route_params(request: &HttpRequest) -> Option<RouteParams> {
    // actix-web finds the pattern in its resource map even before routing,
    // in `App::wrap` middleware; the parameters only exist once a resource
    // or scope matched and consumed (some of) the path.
    let pattern = request.match_pattern();
    let info = request.match_info();
    if info.unprocessed().len() == info.as_str().len() {
        return pattern.map(|pattern| RouteParams::before_routing(Some(pattern)));
    }
    pattern.as_ref()?;
    // Whether the router replaced bytes that are not UTF-8: only then may a
    // U+FFFD in a value be its doing rather than the client's.
    let lossy = || percent_decode(request.uri().path()).is_err();
    let mut not_utf8 = Vec::new();
    let mut params = Vec::with_capacity(info.segment_count());
    for (name, value) in info.iter() {
        match percent_decode(value) {
            Ok(value) if !(value.contains('\u{FFFD}') && lossy()) => {
                params.push((name.to_owned(), value));
            }
            _ => {
                not_utf8.push(name.to_owned());
                params.push((name.to_owned(), String::new()));
            }
        }
    }
    Some(RouteParams::new(pattern, params).not_utf8(not_utf8))
}

/// `text` with every `%XX` escape decoded (a `%` not followed by two hex
/// digits is kept as it is, as actix-web and axum keep it); `Err` when the
/// result is not UTF-8.
fn percent_decode(text: &str) -> Result<String, std::str::Utf8Error> {
    percent_encoding::percent_decode_str(text)
        .decode_utf8()
        .map(std::borrow::Cow::into_owned)
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

#[cfg(test)]
mod tests {
    use super::percent_decode;

    #[test]
    fn percent_decoding_is_one_pass_and_strict() {
        assert_eq!(percent_decode("a%2Fb").as_deref(), Ok("a/b"));
        // One pass: `%25` becomes `%`, and what follows stays.
        assert_eq!(percent_decode("a%252Fb").as_deref(), Ok("a%2Fb"));
        assert_eq!(percent_decode("%C3%A9").as_deref(), Ok("é"));
        assert_eq!(percent_decode("100%").as_deref(), Ok("100%"));
        assert_eq!(percent_decode("%zz%4").as_deref(), Ok("%zz%4"));
        assert!(percent_decode("%FF").is_err());
        assert!(percent_decode("%C3").is_err());
    }
}
