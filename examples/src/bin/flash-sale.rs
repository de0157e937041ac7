//! The flash-sale demo.
//!
//! ```text
//! flash-sale simulate [--framework axum|actix] [--buyers N] [--stock N]
//! flash-sale serve    [--framework axum|actix] [--port N]
//! ```
//!
//! Runs on the in-memory backend. On Redis: `REDIS_URL` (one server; several
//! comma-separated independent servers use Redlock for the per-user locks),
//! `REDIS_CLUSTER_URLS` (nodes of one Redis Cluster), or
//! `REDIS_SENTINEL_URLS` and `REDIS_SENTINEL_MASTER` (the master Sentinels
//! name, followed through failovers).

use std::process::ExitCode;

use lock_examples::flash_sale::simulate::{self, Options};
use lock_examples::flash_sale::{Framework, RunningServer, Shop, ShopConfig};

struct Args {
    command: String,
    framework: Framework,
    port: u16,
    options: Options,
}

fn parse() -> Result<Args, String> {
    let mut args = std::env::args().skip(1);
    let mut parsed = Args {
        command: "simulate".into(),
        framework: Framework::Axum,
        port: 3000,
        options: Options::default(),
    };
    let mut first = true;
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "simulate" | "serve" if first => parsed.command = arg,
            "--framework" => parsed.framework = value("--framework")?.parse()?,
            "--port" => {
                parsed.port = value("--port")?
                    .parse()
                    .map_err(|e| format!("--port: {e}"))?
            }
            "--buyers" => {
                parsed.options.buyers = value("--buyers")?
                    .parse()
                    .map_err(|e| format!("--buyers: {e}"))?
            }
            "--stock" => {
                parsed.options.stock = value("--stock")?
                    .parse()
                    .map_err(|e| format!("--stock: {e}"))?
            }
            "-h" | "--help" => {
                return Err(
                    "usage: flash-sale [simulate|serve] [--framework axum|actix] \
                            [--port N] [--buyers N] [--stock N]"
                        .into(),
                );
            }
            other => return Err(format!("unknown argument {other:?} (try --help)")),
        }
        first = false;
    }
    Ok(parsed)
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(code) => code,
        Err(error) => {
            eprintln!("flash-sale: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<ExitCode, String> {
    let args = parse()?;
    let shop = Shop::from_env(ShopConfig::default())
        .await
        .map_err(|e| format!("cannot reach Redis: {e}"))?;
    let hint = match shop.backend_name() {
        "memory" => " (set REDIS_URL, REDIS_CLUSTER_URLS or REDIS_SENTINEL_URLS to use Redis)",
        _ => " (from the environment)",
    };
    println!("backend: {}{hint}", shop.backend_name());
    match args.command.as_str() {
        "serve" => {
            let server = RunningServer::start(args.framework, shop.clone(), args.port)
                .await
                .map_err(|e| e.to_string())?;
            println!("{:?} shop on http://{}", args.framework, server.addr());
            // Only if it does not exist: another instance may be selling it.
            let seeded = shop.seed().await;
            println!(
                "item {}: {}",
                lock_examples::flash_sale::SEED.0,
                seeded.body
            );
            tokio::signal::ctrl_c().await.map_err(|e| e.to_string())?;
            Ok(ExitCode::SUCCESS)
        }
        _ => {
            let server = RunningServer::start(args.framework, shop, 0)
                .await
                .map_err(|e| e.to_string())?;
            println!(
                "{:?} shop on http://{}: {} buyers for {} units",
                args.framework,
                server.addr(),
                args.options.buyers,
                args.options.stock
            );
            let summary = simulate::run(server.addr(), &args.options).await?;
            println!("{summary}");
            Ok(if summary.oversold == 0 && summary.errors == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
    }
}
