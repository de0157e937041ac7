//! The refusal type of the extractors and middleware.

use actix_web::http::StatusCode as ActixStatus;
use actix_web::{HttpResponse, ResponseError};
use bytes::Bytes;

use crate::convert::to_actix;

/// A refusal: the response the lock-tower layers would answer with (429, 423,
/// 409, 503, 500), as an actix-web error.
#[derive(Debug)]
pub struct Rejection(pub(crate) http::Response<Bytes>);

impl Rejection {
    /// The status.
    pub fn status(&self) -> http::StatusCode {
        self.0.status()
    }
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "request refused with {}", self.0.status())
    }
}

impl ResponseError for Rejection {
    fn status_code(&self) -> ActixStatus {
        ActixStatus::from_u16(self.0.status().as_u16())
            .unwrap_or(ActixStatus::INTERNAL_SERVER_ERROR)
    }

    fn error_response(&self) -> HttpResponse {
        let mut response = http::Response::new(self.0.body().clone());
        *response.status_mut() = self.0.status();
        *response.headers_mut() = self.0.headers().clone();
        to_actix(response)
    }
}
