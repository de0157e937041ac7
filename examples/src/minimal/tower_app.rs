//! A plain tower service (no framework), served by hyper: a per-IP rate
//! limit and a lock per order, from the same layers the adapters use.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use lock_core::backend::AnyBackend;
use lock_core::rate::{Algorithm, Policy, Quota, RateLimiter};
use lock_tower::body::GuardedBody;
use lock_tower::key::{PeerIp, RequestParts};
use lock_tower::{LockLayer, RateLimitLayer};
use tower::util::BoxCloneSyncService;
use tower::{ServiceBuilder, ServiceExt};

/// The order id of `/orders/{id}/pay`: with no router, the key extractor
/// reads the path itself.
fn order_id(request: RequestParts<'_>) -> Option<String> {
    let rest = request.uri.path().strip_prefix("/orders/")?;
    let (id, tail) = rest.split_once('/')?;
    (tail == "pay" && !id.is_empty()).then(|| id.to_owned())
}

/// The handler: pays `/orders/{id}/pay`, and 404 for anything else.
async fn handle<B>(request: Request<B>) -> Result<Response<Full<Bytes>>, Infallible> {
    let reply = |status: StatusCode, text: String| {
        let mut response = Response::new(Full::new(Bytes::from(text)));
        *response.status_mut() = status;
        response
    };
    Ok(match order_id(RequestParts::new(&request)) {
        Some(id) => {
            // One request per order id at a time calls the provider.
            tokio::time::sleep(Duration::from_millis(200)).await;
            reply(StatusCode::OK, format!("order {id} paid\n"))
        }
        None => reply(StatusCode::NOT_FOUND, "not found\n".to_owned()),
    })
}

/// A cloneable, type-erased HTTP service; the lock layer's body holds the
/// lock until it has been sent when asked to.
pub type HttpService<B> =
    BoxCloneSyncService<Request<B>, Response<GuardedBody<Full<Bytes>>>, Infallible>;

/// The service: the rate limit, then the lock, then the handler. Requests
/// need their peer's `SocketAddr` in their extensions (see [`serve`]).
///
/// # Errors
/// An invalid scope or policy (none here).
pub fn service<B: Send + 'static>(backend: AnyBackend) -> lock_core::Result<HttpService<B>> {
    let ten = Quota::per_second(NonZeroU32::new(10).unwrap_or(NonZeroU32::MIN));
    let limiter = RateLimiter::new(
        backend.clone(),
        "api",
        Policy::new(Algorithm::Gcra).quota(ten),
    )?;
    let service = ServiceBuilder::new()
        .layer(RateLimitLayer::new(limiter, PeerIp::new()))
        .layer(LockLayer::new(backend, order_id).scope("pay"))
        .service_fn(handle);
    Ok(BoxCloneSyncService::new(service))
}

/// Serves `service` on `listener`, one hyper connection per client, each
/// request carrying its peer's address.
pub async fn serve(listener: tokio::net::TcpListener, backend: AnyBackend) -> std::io::Result<()> {
    loop {
        let (stream, peer) = listener.accept().await?;
        let service =
            service::<hyper::body::Incoming>(backend.clone()).map_err(std::io::Error::other)?;
        tokio::spawn(async move {
            let service =
                hyper::service::service_fn(move |mut request: Request<hyper::body::Incoming>| {
                    request.extensions_mut().insert::<SocketAddr>(peer);
                    service.clone().oneshot(request)
                });
            let io = hyper_util::rt::TokioIo::new(stream);
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(io, service)
                .await;
        });
    }
}
