//! lock-axum's README service on 127.0.0.1:3000 (`REDIS_URL` for Redis).

use std::net::SocketAddr;

use lock_core::counter::Stock;
use lock_examples::minimal::{axum_app, backend_from_env};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let backend = backend_from_env().await?;
    Stock::new(backend.clone()).create("tshirt", 100).await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    println!("listening on http://{}", listener.local_addr()?);
    let app = axum_app::app(backend)?.into_make_service_with_connect_info::<SocketAddr>();
    axum::serve(listener, app).await?;
    Ok(())
}
