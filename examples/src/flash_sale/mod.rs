//! The flash-sale demo.
//!
//! Routes (the same in the axum and the actix-web server):
//!
//! | route | what it does |
//! | --- | --- |
//! | `GET /health` | liveness and the backend in use |
//! | `PUT /items/{id}?stock=N` | create or reset an item's stock |
//! | `GET /items/{id}` | the item's stock |
//! | `POST /items/{id}/buy` | buy one: per-user and per-address rate limits, per-user lock, idempotent decrement keyed by `x-order-id` |
//! | `POST /items/{id}/reserve?hold_ms=N` | hold one for the order in `x-order-id`, limited and locked as a purchase is |
//! | `POST /items/{id}/reservations/{order}/confirm` | make a hold final |
//! | `POST /items/{id}/reservations/{order}/cancel` | give a hold back |
//!
//! Buyers identify themselves with `x-user-id` (the rate-limit and lock key)
//! and each purchase with `x-order-id` (a retry with the same id never buys
//! twice); a request without them, or with one that is not a valid name,
//! is answered 400 with the reason. Each client address is limited too
//! (`X-Forwarded-For` is read only from trusted proxies, loopback by
//! default), so inventing a new `x-user-id` per request buys no more room.
//!
//! Runs in memory by default; on Redis as [`Shop::from_env`] says (one
//! server, independent servers with Redlock for the user locks, a cluster,
//! or Sentinel).

mod actix_app;
mod axum_app;
mod shop;
pub mod simulate;

pub use actix_app::{ActixServer, start_actix};
pub use axum_app::{axum_router, start_axum};
pub use shop::{Outcome, SEED, Shop, ShopConfig};

/// Which web framework serves the shop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framework {
    /// axum (tower layers and axum extractors).
    Axum,
    /// actix-web (actix middleware and extractors).
    Actix,
}

impl std::str::FromStr for Framework {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "axum" => Ok(Framework::Axum),
            "actix" | "actix-web" => Ok(Framework::Actix),
            other => Err(format!("unknown framework {other:?} (axum or actix)")),
        }
    }
}

/// A running shop server on either framework; stopped when dropped.
#[derive(Debug)]
pub enum RunningServer {
    /// An axum server task.
    Axum(axum_app::AxumServer),
    /// An actix-web server thread.
    Actix(ActixServer),
}

impl RunningServer {
    /// Starts `framework` on 127.0.0.1:`port` (0 = any free port).
    ///
    /// # Errors
    /// When the port cannot be bound.
    pub async fn start(framework: Framework, shop: Shop, port: u16) -> std::io::Result<Self> {
        Ok(match framework {
            Framework::Axum => RunningServer::Axum(start_axum(shop, port).await?),
            Framework::Actix => RunningServer::Actix(start_actix(shop, port)?),
        })
    }

    /// The bound address.
    pub fn addr(&self) -> std::net::SocketAddr {
        match self {
            RunningServer::Axum(s) => s.addr(),
            RunningServer::Actix(s) => s.addr(),
        }
    }
}
