//! The shop on axum: the rate limits (per user and per client address) are
//! tower layers on the buy and reserve routes, the per-user lock an axum
//! extractor.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::{FromRef, Path, Query, State};
use axum::handler::Handler;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post};
use axum::{Json, Router};
use lock_axum::{Locked, RouteLock};
use lock_core::rate::RateBackend;
use serde::Deserialize;

use super::shop::{Outcome, Shop};

#[derive(Clone)]
struct AppState {
    shop: Shop,
    user_lock: RouteLock,
}

impl FromRef<AppState> for RouteLock {
    fn from_ref(state: &AppState) -> Self {
        state.user_lock.clone()
    }
}

impl IntoResponse for Outcome {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (status, Json(self.body)).into_response()
    }
}

fn order_id(headers: &HeaderMap) -> Option<&str> {
    headers.get("x-order-id")?.to_str().ok()
}

#[derive(Deserialize)]
struct StockQuery {
    stock: u64,
}

#[derive(Deserialize)]
struct HoldQuery {
    hold_ms: Option<u64>,
}

async fn health(State(state): State<AppState>) -> Outcome {
    state.shop.health()
}

async fn set_stock(
    State(state): State<AppState>,
    Path(item): Path<String>,
    Query(query): Query<StockQuery>,
) -> Outcome {
    state.shop.set_stock(&item, query.stock).await
}

async fn stock(State(state): State<AppState>, Path(item): Path<String>) -> Outcome {
    state.shop.stock(&item).await
}

/// Rate-limited by the route layer; `Locked` holds the buyer's lock while
/// the purchase runs (423 if the same user is already buying).
async fn buy(
    _user: Locked,
    State(state): State<AppState>,
    Path(item): Path<String>,
    headers: HeaderMap,
) -> Outcome {
    state.shop.buy(&item, order_id(&headers)).await
}

/// Rate-limited and locked per user, as a purchase is.
async fn reserve(
    _user: Locked,
    State(state): State<AppState>,
    Path(item): Path<String>,
    Query(query): Query<HoldQuery>,
    headers: HeaderMap,
) -> Outcome {
    let hold = query.hold_ms.map(Duration::from_millis);
    state.shop.reserve(&item, order_id(&headers), hold).await
}

async fn confirm(
    State(state): State<AppState>,
    Path((item, order)): Path<(String, String)>,
) -> Outcome {
    state.shop.confirm(&item, &order).await
}

async fn cancel(
    State(state): State<AppState>,
    Path((item, order)): Path<(String, String)>,
) -> Outcome {
    state.shop.cancel(&item, &order).await
}

/// `handler` behind the shop's two rate limits, on `backend`.
fn limited<H, T, B>(shop: &Shop, backend: B, handler: H) -> MethodRouter<AppState>
where
    H: Handler<T, AppState>,
    T: 'static,
    B: RateBackend,
{
    post(handler)
        .layer::<_, Infallible>(shop.user_rate_layer(backend.clone()))
        .layer::<_, Infallible>(shop.address_rate_layer(backend))
}

/// The shop's axum router (serve it with `ConnectInfo<SocketAddr>`).
pub fn axum_router(shop: Shop) -> Router {
    let backend = shop.backend.clone();
    let (buy_route, reserve_route) = (
        limited(&shop, backend.clone(), buy),
        limited(&shop, backend.clone(), reserve),
    );
    let user_lock = match &shop.redlock {
        Some(redlock) => RouteLock::new(shop.lock_layer(redlock.clone())),
        None => RouteLock::new(shop.lock_layer(backend)),
    };
    Router::new()
        .route("/health", get(health))
        .route("/items/{item}", get(stock).put(set_stock))
        .route("/items/{item}/buy", buy_route)
        .route("/items/{item}/reserve", reserve_route)
        .route("/items/{item}/reservations/{order}/confirm", post(confirm))
        .route("/items/{item}/reservations/{order}/cancel", post(cancel))
        .with_state(AppState { shop, user_lock })
}

/// A running axum shop; aborted when dropped.
#[derive(Debug)]
pub struct AxumServer {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl AxumServer {
    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves until the task ends (it does not, unless the listener fails).
    pub async fn wait(mut self) {
        let _ = (&mut self.task).await;
    }
}

impl Drop for AxumServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves the shop with axum on 127.0.0.1:`port` (0 = any free port).
///
/// # Errors
/// When the port cannot be bound.
pub async fn start_axum(shop: Shop, port: u16) -> std::io::Result<AxumServer> {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    let addr = listener.local_addr()?;
    let app = axum_router(shop).into_make_service_with_connect_info::<SocketAddr>();
    let task = tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, app).await {
            tracing::error!(%error, "flash-sale server stopped");
        }
    });
    Ok(AxumServer { addr, task })
}
