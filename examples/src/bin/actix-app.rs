//! lock-actix's README service on 127.0.0.1:3000 (`REDIS_URL` for Redis).

use actix_web::{App, HttpServer};
use lock_core::counter::Stock;
use lock_examples::minimal::{actix_app, backend_from_env};

#[actix_web::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let backend = backend_from_env().await?;
    Stock::new(backend.clone()).create("tshirt", 100).await?;
    let shop = actix_app::shop(backend)?;
    println!("listening on http://127.0.0.1:3000");
    HttpServer::new(move || {
        let shop = shop.clone();
        App::new()
            .wrap(shop.per_ip.clone())
            .configure(move |config| shop.routes(config))
    })
    .bind(("127.0.0.1", 3000))?
    .run()
    .await?;
    Ok(())
}
