//! The actix-web service of lock-actix's README.

use std::num::NonZeroU32;
use std::time::Duration;

use actix_web::{HttpResponse, web};
use lock_actix::backend::AnyBackend;
use lock_actix::counter::{Purchase, Stock};
use lock_actix::key::{PathParam, PeerIp};
use lock_actix::rate::{Algorithm, Policy, Quota, RateLimiter};
use lock_actix::{LockLayer, LockMiddleware, RateLimitLayer, RateLimitMiddleware};

/// The middleware and state, made once and shared by every worker.
#[derive(Clone)]
pub struct Shop {
    /// 10 requests a second per client address: `App::new().wrap(shop.per_ip.clone())`.
    pub per_ip: RateLimitMiddleware,
    per_order: LockMiddleware,
    stock: Stock<AnyBackend>,
}

/// The shop on any backend.
///
/// # Errors
/// An invalid scope or policy (none here).
pub fn shop(backend: AnyBackend) -> lock_actix::Result<Shop> {
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
    Ok(Shop {
        per_ip: RateLimitMiddleware::new(per_ip),
        per_order: LockMiddleware::new(per_order),
        stock: Stock::new(backend),
    })
}

impl Shop {
    /// The routes. The lock is on the resource, where the path is matched.
    pub fn routes(&self, config: &mut web::ServiceConfig) {
        config
            .app_data(web::Data::new(self.stock.clone()))
            .service(
                web::resource("/orders/{id}/pay")
                    .wrap(self.per_order.clone())
                    .route(web::post().to(pay)),
            )
            .route("/items/{sku}/buy", web::post().to(buy))
            .route("/health", web::get().to(|| async { "ok" }));
    }
}

async fn pay(id: web::Path<String>) -> String {
    // Only one request per order id runs this at a time: the payment
    // provider is called once per order.
    tokio::time::sleep(Duration::from_millis(200)).await;
    format!("order {id} paid\n")
}

async fn buy(stock: web::Data<Stock<AnyBackend>>, sku: web::Path<String>) -> HttpResponse {
    match stock.decrement(&sku, 1).await {
        Ok(Purchase::Done { remaining, .. }) => {
            HttpResponse::Ok().body(format!("bought; {remaining} left\n"))
        }
        Ok(Purchase::SoldOut { .. }) => HttpResponse::Conflict().body("sold out\n"),
        Ok(_) => HttpResponse::NotFound().body("no such item\n"),
        Err(error) if error.is_backend_failure() => {
            HttpResponse::ServiceUnavailable().body(format!("{error}\n"))
        }
        Err(error) => HttpResponse::BadRequest().body(format!("{error}\n")),
    }
}
