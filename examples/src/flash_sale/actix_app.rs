//! The shop on actix-web: the rate limits (per user and per client address)
//! are actix middleware on the buy and reserve routes, the per-user lock an
//! actix extractor.

use std::net::SocketAddr;
use std::time::Duration;

use actix_web::dev::ServerHandle;
use actix_web::http::StatusCode;
use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use lock_actix::{Locked, RateLimitMiddleware, RouteLock};
use serde::Deserialize;

use super::shop::{Outcome, Shop};

fn respond(outcome: Outcome) -> HttpResponse {
    let status = StatusCode::from_u16(outcome.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    HttpResponse::build(status).json(outcome.body)
}

fn order_id(request: &HttpRequest) -> Option<&str> {
    request.headers().get("x-order-id")?.to_str().ok()
}

#[derive(Deserialize)]
struct StockQuery {
    stock: u64,
}

#[derive(Deserialize)]
struct HoldQuery {
    hold_ms: Option<u64>,
}

async fn health(shop: web::Data<Shop>) -> HttpResponse {
    respond(shop.health())
}

async fn set_stock(
    shop: web::Data<Shop>,
    item: web::Path<String>,
    query: web::Query<StockQuery>,
) -> HttpResponse {
    respond(shop.set_stock(&item, query.stock).await)
}

async fn stock(shop: web::Data<Shop>, item: web::Path<String>) -> HttpResponse {
    respond(shop.stock(&item).await)
}

/// Rate-limited by the route's middleware; `Locked` holds the buyer's lock
/// while the purchase runs (423 if the same user is already buying).
async fn buy(
    _user: Locked,
    shop: web::Data<Shop>,
    item: web::Path<String>,
    request: HttpRequest,
) -> HttpResponse {
    respond(shop.buy(&item, order_id(&request)).await)
}

/// Rate-limited and locked per user, as a purchase is.
async fn reserve(
    _user: Locked,
    shop: web::Data<Shop>,
    item: web::Path<String>,
    query: web::Query<HoldQuery>,
    request: HttpRequest,
) -> HttpResponse {
    let hold = query.hold_ms.map(Duration::from_millis);
    respond(shop.reserve(&item, order_id(&request), hold).await)
}

async fn confirm(shop: web::Data<Shop>, path: web::Path<(String, String)>) -> HttpResponse {
    respond(shop.confirm(&path.0, &path.1).await)
}

async fn cancel(shop: web::Data<Shop>, path: web::Path<(String, String)>) -> HttpResponse {
    respond(shop.cancel(&path.0, &path.1).await)
}

/// The per-user and per-address rate limits, and the per-user lock.
fn middleware(shop: &Shop) -> (RateLimitMiddleware, RateLimitMiddleware, RouteLock) {
    let backend = shop.backend.clone();
    let user_lock = match &shop.redlock {
        Some(redlock) => RouteLock::new(shop.lock_layer(redlock.clone())),
        None => RouteLock::new(shop.lock_layer(backend.clone())),
    };
    (
        RateLimitMiddleware::new(shop.user_rate_layer(backend.clone())),
        RateLimitMiddleware::new(shop.address_rate_layer(backend)),
        user_lock,
    )
}

/// A running actix-web shop (its own thread and actix system); stopped when
/// dropped.
#[derive(Debug)]
pub struct ActixServer {
    addr: SocketAddr,
    handle: ServerHandle,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ActixServer {
    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Blocks until the server stops.
    pub fn wait(mut self) {
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for ActixServer {
    fn drop(&mut self) {
        // Sends the stop command at once; the server thread winds down alone.
        drop(self.handle.stop(false));
    }
}

/// Serves the shop with actix-web on 127.0.0.1:`port` (0 = any free port),
/// with two workers, on a thread of its own.
///
/// # Errors
/// When the port cannot be bound or the thread cannot start.
pub fn start_actix(shop: Shop, port: u16) -> std::io::Result<ActixServer> {
    let (user_limit, address_limit, user_lock) = middleware(&shop);
    let (tx, rx) = std::sync::mpsc::channel();
    let thread = std::thread::Builder::new()
        .name("flash-sale-actix".into())
        .spawn(move || {
            actix_web::rt::System::new().block_on(async move {
                let shop = web::Data::new(shop);
                let server = HttpServer::new(move || {
                    App::new()
                        .app_data(shop.clone())
                        .app_data(user_lock.clone())
                        .route("/health", web::get().to(health))
                        .route("/items/{item}", web::get().to(stock))
                        .route("/items/{item}", web::put().to(set_stock))
                        .service(
                            web::resource("/items/{item}/buy")
                                .wrap(user_limit.clone())
                                .wrap(address_limit.clone())
                                .route(web::post().to(buy)),
                        )
                        .service(
                            web::resource("/items/{item}/reserve")
                                .wrap(user_limit.clone())
                                .wrap(address_limit.clone())
                                .route(web::post().to(reserve)),
                        )
                        .route(
                            "/items/{item}/reservations/{order}/confirm",
                            web::post().to(confirm),
                        )
                        .route(
                            "/items/{item}/reservations/{order}/cancel",
                            web::post().to(cancel),
                        )
                })
                .workers(2)
                .disable_signals()
                .bind(("127.0.0.1", port));
                match server {
                    Ok(server) => {
                        let Some(addr) = server.addrs().first().copied() else {
                            let _ = tx.send(Err(std::io::Error::other("no address bound")));
                            return;
                        };
                        let server = server.run();
                        let _ = tx.send(Ok((addr, server.handle())));
                        let _ = server.await;
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e));
                    }
                }
            });
        })?;
    let (addr, handle) = rx
        .recv()
        .map_err(|_| std::io::Error::other("actix server thread ended early"))??;
    Ok(ActixServer {
        addr,
        handle,
        thread: Some(thread),
    })
}
