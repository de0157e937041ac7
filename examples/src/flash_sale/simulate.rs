//! `simulate`: thousands of concurrent buyers against a running shop, over
//! real HTTP, and a summary of what happened.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::Value;
use tokio::sync::Semaphore;

/// What to simulate.
#[derive(Debug, Clone)]
pub struct Options {
    /// How many buyers (default 2,000).
    pub buyers: usize,
    /// Units on sale (default 100).
    pub stock: u64,
    /// Requests in flight at once at most (default 256).
    pub concurrency: usize,
    /// The item's id.
    pub item: String,
    /// Show a progress bar.
    pub progress: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            buyers: 2000,
            stock: 100,
            concurrency: 256,
            item: "flash-tshirt".into(),
            progress: true,
        }
    }
}

/// What happened.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Summary {
    /// Buy requests sent (retries included).
    pub requests: usize,
    /// Units sold (first-time successes).
    pub sold: u64,
    /// Retries answered with the first sale (never charged twice).
    pub replayed: u64,
    /// Buys refused because the item was gone.
    pub sold_out: u64,
    /// Buys refused by the per-client rate limit (429).
    pub rate_limited: u64,
    /// Buys refused because the same user was already buying (423).
    pub locked: u64,
    /// Anything else (should be 0).
    pub errors: u64,
    /// The statuses counted as errors.
    pub error_statuses: std::collections::BTreeMap<u16, u64>,
    /// Units sold beyond the stock (must be 0).
    pub oversold: u64,
    /// The item's stock afterwards.
    pub final_stock: u64,
    /// Whether every 429 carried `Retry-After` and `RateLimit`.
    pub limit_headers_ok: bool,
    /// Median latency.
    pub p50: Duration,
    /// 99th percentile latency.
    pub p99: Duration,
    /// Requests per second over the run.
    pub requests_per_second: f64,
}

impl Summary {
    /// The error count, then the statuses behind it, e.g. `3 (500: 1, 503: 2)`.
    fn errors_cell(&self) -> String {
        if self.error_statuses.is_empty() {
            return self.errors.to_string();
        }
        let statuses: Vec<String> = self
            .error_statuses
            .iter()
            .map(|(status, count)| format!("{status}: {count}"))
            .collect();
        format!("{} ({})", self.errors, statuses.join(", "))
    }
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let rows = [
            ("requests", self.requests.to_string()),
            ("sold", self.sold.to_string()),
            ("retries replayed", self.replayed.to_string()),
            ("sold out", self.sold_out.to_string()),
            ("rate limited (429)", self.rate_limited.to_string()),
            ("locked (423)", self.locked.to_string()),
            ("errors", self.errors_cell()),
            ("oversold (must be 0)", self.oversold.to_string()),
            ("stock left", self.final_stock.to_string()),
            ("429 headers ok", self.limit_headers_ok.to_string()),
            (
                "latency p50",
                format!("{:.2} ms", self.p50.as_secs_f64() * 1e3),
            ),
            (
                "latency p99",
                format!("{:.2} ms", self.p99.as_secs_f64() * 1e3),
            ),
            ("requests/s", format!("{:.0}", self.requests_per_second)),
        ];
        writeln!(f, "+----------------------+--------------+")?;
        for (name, value) in rows {
            writeln!(f, "| {name:<20} | {value:>12} |")?;
        }
        write!(f, "+----------------------+--------------+")
    }
}

type HttpClient = Client<HttpConnector, Empty<Bytes>>;

struct Reply {
    status: StatusCode,
    retry_after: bool,
    ratelimit: bool,
    body: Value,
    took: Duration,
}

async fn send(
    client: &HttpClient,
    method: Method,
    url: &str,
    headers: &[(&str, &str)],
) -> Result<Reply, String> {
    let mut builder = Request::builder().method(method).uri(url);
    for (k, v) in headers {
        builder = builder.header(*k, *v);
    }
    let request = builder.body(Empty::new()).map_err(|e| e.to_string())?;
    let started = Instant::now();
    let exchange = async {
        let response = client.request(request).await.map_err(|e| e.to_string())?;
        let (parts, body) = response.into_parts();
        let body = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
        Ok::<_, String>((parts, body))
    };
    let (parts, body) = tokio::time::timeout(Duration::from_secs(30), exchange)
        .await
        .map_err(|_| format!("{url}: no answer in 30 s"))??;
    Ok(Reply {
        status: parts.status,
        retry_after: parts.headers.contains_key("retry-after"),
        ratelimit: parts.headers.contains_key("ratelimit"),
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
        took: started.elapsed(),
    })
}

/// One buyer's script, chosen by its number so runs are repeatable.
fn plan(buyer: usize) -> Vec<(String, bool)> {
    // (order id, sent concurrently with the previous one)
    match buyer % 10 {
        // A bot hammering the button: 8 orders at once (rate limited past
        // the burst, and locked while its own first order runs).
        0 => (0..8).map(|i| (format!("b{buyer}-o{i}"), i > 0)).collect(),
        // A double click: two orders at once.
        1 => vec![
            (format!("b{buyer}-o0"), false),
            (format!("b{buyer}-o1"), true),
        ],
        // Everyone else: one order, retried once (a lost response).
        _ => vec![
            (format!("b{buyer}-o0"), false),
            (format!("b{buyer}-o0"), false),
        ],
    }
}

/// Fires `options.buyers` buyers at the shop on `addr` and summarizes.
///
/// # Errors
/// When the shop cannot be set up or read back.
pub async fn run(addr: SocketAddr, options: &Options) -> Result<Summary, String> {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let client: HttpClient = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(options.concurrency)
        .build(connector);
    let base = format!("http://{addr}");
    let item_url = format!("{base}/items/{}", options.item);
    let reply = send(
        &client,
        Method::PUT,
        &format!("{item_url}?stock={}", options.stock),
        &[],
    )
    .await?;
    if reply.status != StatusCode::OK {
        return Err(format!("cannot create the item: {}", reply.status));
    }

    let bar = if options.progress {
        let bar = ProgressBar::new(options.buyers as u64);
        bar.set_style(
            ProgressStyle::with_template("{spinner} buyers {bar:40} {pos}/{len} {elapsed}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar
    } else {
        ProgressBar::hidden()
    };
    let slots = Arc::new(Semaphore::new(options.concurrency.max(1)));
    let buy_url = Arc::new(format!("{item_url}/buy"));
    let started = Instant::now();
    let mut buyers = Vec::with_capacity(options.buyers);
    for buyer in 0..options.buyers {
        let (client, slots, buy_url, bar) =
            (client.clone(), slots.clone(), buy_url.clone(), bar.clone());
        buyers.push(tokio::spawn(async move {
            let user = format!("user-{buyer}");
            // Each buyer from an address of its own, as a local proxy in
            // front of the shop would say.
            let address = format!(
                "10.{}.{}.{}",
                buyer >> 16 & 255,
                buyer >> 8 & 255,
                buyer & 255
            );
            let mut replies = Vec::new();
            let mut pending: Vec<tokio::task::JoinHandle<Result<Reply, String>>> = Vec::new();
            for (order, concurrent) in plan(buyer) {
                let permit = slots
                    .clone()
                    .acquire_owned()
                    .await
                    .map_err(|e| e.to_string())?;
                let (client, url, user) = (client.clone(), buy_url.clone(), user.clone());
                let address = address.clone();
                let request = tokio::spawn(async move {
                    let reply = send(
                        &client,
                        Method::POST,
                        &url,
                        &[
                            ("x-user-id", user.as_str()),
                            ("x-order-id", order.as_str()),
                            ("x-forwarded-for", address.as_str()),
                        ],
                    )
                    .await;
                    drop(permit);
                    reply
                });
                if !concurrent {
                    // A sequential step waits for everything before it.
                    for previous in pending.drain(..) {
                        replies.push(previous.await.map_err(|e| e.to_string())??);
                    }
                }
                pending.push(request);
            }
            for last in pending {
                replies.push(last.await.map_err(|e| e.to_string())??);
            }
            bar.inc(1);
            Ok::<_, String>(replies)
        }));
    }
    let mut summary = Summary {
        limit_headers_ok: true,
        ..Summary::default()
    };
    let mut latencies = Vec::new();
    for buyer in buyers {
        for reply in buyer.await.map_err(|e| e.to_string())?? {
            summary.requests += 1;
            latencies.push(reply.took);
            match reply.status {
                StatusCode::OK if reply.body["replayed"] == Value::Bool(true) => {
                    summary.replayed += 1
                }
                StatusCode::OK => summary.sold += 1,
                StatusCode::CONFLICT => summary.sold_out += 1,
                StatusCode::TOO_MANY_REQUESTS => {
                    summary.rate_limited += 1;
                    summary.limit_headers_ok &= reply.retry_after && reply.ratelimit;
                }
                StatusCode::LOCKED => summary.locked += 1,
                other => {
                    summary.errors += 1;
                    *summary.error_statuses.entry(other.as_u16()).or_default() += 1;
                }
            }
        }
    }
    let elapsed = started.elapsed();
    bar.finish_and_clear();
    latencies.sort_unstable();
    let at = |q: f64| {
        latencies
            .get(((latencies.len() as f64 - 1.0) * q).round() as usize)
            .copied()
            .unwrap_or_default()
    };
    summary.p50 = at(0.50);
    summary.p99 = at(0.99);
    summary.requests_per_second = summary.requests as f64 / elapsed.as_secs_f64();
    let reply = send(&client, Method::GET, &item_url, &[]).await?;
    summary.final_stock = reply.body["stock"]
        .as_u64()
        .ok_or("no stock in the answer")?;
    summary.oversold = summary.sold.saturating_sub(options.stock);
    if summary.sold + summary.final_stock != options.stock {
        summary.errors += 1;
    }
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::Summary;

    #[test]
    fn errors_are_shown_with_their_statuses() {
        let mut summary = Summary::default();
        assert_eq!(summary.errors_cell(), "0");
        summary.errors = 3;
        summary.error_statuses.insert(503, 2);
        summary.error_statuses.insert(500, 1);
        assert_eq!(summary.errors_cell(), "3 (500: 1, 503: 2)");
        // A stock mismatch is an error without a status.
        summary.errors = 4;
        assert_eq!(summary.errors_cell(), "4 (500: 1, 503: 2)");
    }
}
