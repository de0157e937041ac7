//! The axum service of lock-axum's README.

use std::num::NonZeroU32;
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use lock_axum::backend::AnyBackend;
use lock_axum::counter::{Purchase, Stock};
use lock_axum::key::{PathParam, PeerIp};
use lock_axum::rate::{Algorithm, Policy, Quota, RateLimiter};
use lock_axum::{LockLayer, RateLimitLayer};

/// The routes, on any backend; serve them with
/// `into_make_service_with_connect_info::<SocketAddr>()`.
///
/// # Errors
/// An invalid scope or policy (none here).
pub fn app(backend: AnyBackend) -> lock_axum::Result<Router> {
    // 10 requests a second per client address, /health exempt.
    let ten = Quota::per_second(NonZeroU32::new(10).unwrap_or(NonZeroU32::MIN));
    let limiter = RateLimiter::new(
        backend.clone(),
        "api",
        Policy::new(Algorithm::Gcra).quota(ten),
    )?;
    let per_ip = RateLimitLayer::new(limiter, PeerIp::new()).exempt_paths(["/health"]);
    // One payment at a time per order id, across every instance.
    let per_order = LockLayer::new(backend.clone(), PathParam::new("id")).scope("pay");
    Ok(Router::new()
        .route("/orders/{id}/pay", post(pay).layer(per_order))
        .route("/items/{sku}/buy", post(buy))
        .route("/health", get(|| async { "ok" }))
        .with_state(Stock::new(backend))
        .layer(per_ip))
}

async fn pay(Path(id): Path<String>) -> String {
    // Only one request per order id runs this at a time: the payment
    // provider is called once per order.
    tokio::time::sleep(Duration::from_millis(200)).await;
    format!("order {id} paid\n")
}

async fn buy(
    State(stock): State<Stock<AnyBackend>>,
    Path(sku): Path<String>,
) -> (StatusCode, String) {
    match stock.decrement(&sku, 1).await {
        Ok(Purchase::Done { remaining, .. }) => {
            (StatusCode::OK, format!("bought; {remaining} left\n"))
        }
        Ok(Purchase::SoldOut { .. }) => (StatusCode::CONFLICT, "sold out\n".to_owned()),
        Ok(_) => (StatusCode::NOT_FOUND, "no such item\n".to_owned()),
        Err(error) if error.is_backend_failure() => {
            (StatusCode::SERVICE_UNAVAILABLE, format!("{error}\n"))
        }
        Err(error) => (StatusCode::BAD_REQUEST, format!("{error}\n")),
    }
}
