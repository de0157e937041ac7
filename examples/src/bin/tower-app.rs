//! The plain tower service on 127.0.0.1:3000 (`REDIS_URL` for Redis).

use lock_examples::minimal::{backend_from_env, tower_app};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let backend = backend_from_env().await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    println!("listening on http://{}", listener.local_addr()?);
    tower_app::serve(listener, backend).await?;
    Ok(())
}
