//! The shop: stock operations, and the rate-limit and lock configuration the
//! two servers share.

use std::num::NonZeroU32;
use std::time::Duration;

use http::HeaderName;
use ipnet::IpNet;
use lock_core::backend::{AnyBackend, MemoryBackend, RedisBackend};
use lock_core::counter::{Purchase, Reservation, Settle, Stock};
use lock_core::lock::{LockBackend, Redlock};
use lock_core::rate::{Algorithm, Policy, Quota, RateBackend, RateLimiter};
use lock_tower::key::{ClientIp, HeaderKey};
// lock-axum's layers: on axum they read its records (the client's
// address); actix-web's middleware takes them too, and records its own.
use lock_axum::{LockLayer, RateLimitLayer};
use lock_tower::OnBackendFailure;
use serde_json::{Value, json};

/// Tunables of the shop.
#[derive(Debug, Clone)]
pub struct ShopConfig {
    /// Purchases and reservations per user (`x-user-id`) per second (GCRA;
    /// the burst is the same number; at most a million).
    pub buys_per_second: NonZeroU32,
    /// Purchases and reservations per client address per second, whatever
    /// users it claims to be: a client that makes up a new `x-user-id` for
    /// each request still gets only this many (at most a million).
    pub buys_per_second_per_address: NonZeroU32,
    /// Reverse proxies whose `X-Forwarded-For` names the client's address
    /// (default: loopback, where a local proxy, or the `simulate` command,
    /// stands in front of the shop).
    pub trusted_proxies: Vec<IpNet>,
    /// How long a buy waits for the same user's other buy to finish before
    /// answering 503 (0 = answer 423 at once). A user's buys are serialized,
    /// not refused: the lock of a finished buy is released in the background,
    /// so the user's next request may arrive a moment before it is free.
    pub lock_wait: Duration,
    /// Default hold of a reservation.
    pub hold: Duration,
    /// Longest wait for a rate-limit or lock decision before the backend
    /// counts as failed (then the shop answers 503: it fails closed).
    pub decision_timeout: Duration,
}

impl Default for ShopConfig {
    fn default() -> Self {
        ShopConfig {
            buys_per_second: NonZeroU32::new(5).unwrap_or(NonZeroU32::MIN),
            buys_per_second_per_address: NonZeroU32::new(50).unwrap_or(NonZeroU32::MIN),
            trusted_proxies: ["127.0.0.0/8", "::1/128"]
                .iter()
                .filter_map(|net| net.parse().ok())
                .collect(),
            lock_wait: Duration::from_secs(5),
            hold: Duration::from_secs(600),
            decision_timeout: Duration::from_secs(2),
        }
    }
}

/// The shop's state, shared by every request.
#[derive(Clone)]
pub struct Shop {
    pub(crate) backend: AnyBackend,
    pub(crate) redlock: Option<Redlock>,
    pub(crate) config: ShopConfig,
}

impl std::fmt::Debug for Shop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shop")
            .field("backend", &self.backend_name())
            .field("config", &self.config)
            .finish()
    }
}

/// An answer: HTTP status and JSON body.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// The status code.
    pub status: u16,
    /// The JSON body.
    pub body: Value,
}

fn outcome(status: u16, body: Value) -> Outcome {
    Outcome { status, body }
}

fn failure(error: &lock_core::Error) -> Outcome {
    if error.is_backend_failure() {
        outcome(
            503,
            json!({ "error": "backend unavailable", "detail": error.to_string() }),
        )
    } else {
        outcome(400, json!({ "error": error.to_string() }))
    }
}

/// The header buyers name themselves with.
const USER: HeaderName = HeaderName::from_static("x-user-id");

/// The item the `serve` command puts on sale, and how many.
pub const SEED: (&str, u64) = ("flash-tshirt", 100);

const MAX_BUYS_PER_SECOND: NonZeroU32 = match NonZeroU32::new(1_000_000) {
    Some(n) => n,
    None => NonZeroU32::MIN,
};

impl Shop {
    /// A shop on the in-memory backend: nothing to install.
    pub fn memory(config: ShopConfig) -> Self {
        Shop {
            backend: MemoryBackend::new().into(),
            redlock: None,
            config,
        }
    }

    /// A shop on Redis: stock and rate limits on the first URL; user locks on
    /// Redlock over all of them when there are several.
    ///
    /// # Errors
    /// When a server cannot be reached.
    pub async fn redis(urls: &[&str], config: ShopConfig) -> lock_core::Result<Self> {
        let first = urls.first().copied().unwrap_or("redis://127.0.0.1:6379");
        let backend = RedisBackend::connect(first).await?;
        let redlock = if urls.len() > 1 {
            Some(Redlock::connect(urls).await?)
        } else {
            None
        };
        Ok(Shop {
            backend: backend.into(),
            redlock,
            config,
        })
    }

    /// A shop on a Redis Cluster that `urls` (any of its nodes) belong to.
    /// (Redlock is for independent servers, not for a cluster's nodes.)
    ///
    /// # Errors
    /// When the cluster cannot be reached.
    pub async fn cluster(urls: &[&str], config: ShopConfig) -> lock_core::Result<Self> {
        Ok(Shop {
            backend: RedisBackend::connect_cluster(urls).await?.into(),
            redlock: None,
            config,
        })
    }

    /// A shop on the master the Sentinels at `urls` know as `master`; it
    /// follows failovers.
    ///
    /// # Errors
    /// When no Sentinel answers or the master is unknown.
    pub async fn sentinel(
        urls: &[&str],
        master: &str,
        config: ShopConfig,
    ) -> lock_core::Result<Self> {
        Ok(Shop {
            backend: RedisBackend::connect_sentinel(urls, master).await?.into(),
            redlock: None,
            config,
        })
    }

    /// From the environment, in this order: `REDIS_CLUSTER_URLS` (nodes of
    /// one cluster, comma-separated), `REDIS_SENTINEL_URLS` with
    /// `REDIS_SENTINEL_MASTER` (the master's name, default `mymaster`),
    /// `REDIS_URL` (comma-separated: independent servers, Redlock for the
    /// user locks); in memory when none is set.
    ///
    /// # Errors
    /// When Redis is configured but cannot be reached.
    pub async fn from_env(config: ShopConfig) -> lock_core::Result<Self> {
        let var = |name| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let list = |value: &String| {
            value
                .split(',')
                .map(str::trim)
                .map(str::to_owned)
                .collect::<Vec<_>>()
        };
        if let Some(urls) = var("REDIS_CLUSTER_URLS") {
            let urls = list(&urls);
            return Self::cluster(&urls.iter().map(String::as_str).collect::<Vec<_>>(), config)
                .await;
        }
        if let Some(urls) = var("REDIS_SENTINEL_URLS") {
            let urls = list(&urls);
            let master = var("REDIS_SENTINEL_MASTER").unwrap_or_else(|| "mymaster".to_owned());
            let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
            return Self::sentinel(&urls, &master, config).await;
        }
        match var("REDIS_URL") {
            Some(urls) => {
                let urls = list(&urls);
                Self::redis(&urls.iter().map(String::as_str).collect::<Vec<_>>(), config).await
            }
            None => Ok(Self::memory(config)),
        }
    }

    /// "memory", "redis", "redis+redlock", "cluster" or "sentinel".
    pub fn backend_name(&self) -> &'static str {
        match (&self.backend, &self.redlock) {
            (AnyBackend::Redis(_), Some(_)) => "redis+redlock",
            (backend, _) => backend.kind(),
        }
    }

    /// The stock counters.
    fn stock_counters(&self) -> Stock<AnyBackend> {
        Stock::new(self.backend.clone())
    }

    /// A per-second GCRA rate limit of `per_second` under `scope`, keyed by
    /// `key`, as a tower layer on `backend`.
    fn rate_layer<B: RateBackend, K: lock_tower::key::KeyExtractor>(
        &self,
        backend: B,
        scope: &str,
        per_second: NonZeroU32,
        key: K,
    ) -> RateLimitLayer<B, K> {
        // GCRA allows at most one unit per microsecond: a million per second.
        let quota = Quota::per_second(per_second.min(MAX_BUYS_PER_SECOND)).named(scope);
        let policy = Policy::new(Algorithm::Gcra).quota(quota);
        let limiter = RateLimiter::new(backend, scope, policy)
            .unwrap_or_else(|e| unreachable!("a clamped per-second GCRA quota is valid: {e}"));
        RateLimitLayer::new(limiter, key)
            .on_backend_failure(OnBackendFailure::FailClosed)
            .decision_timeout(self.config.decision_timeout)
    }

    /// The per-user limit on purchases and reservations, as a tower layer.
    pub(crate) fn user_rate_layer<B: RateBackend>(
        &self,
        backend: B,
    ) -> RateLimitLayer<B, HeaderKey> {
        let per_second = self.config.buys_per_second;
        self.rate_layer(backend, "buys", per_second, HeaderKey::new(USER))
    }

    /// The per-address limit on purchases and reservations, as a tower
    /// layer: it holds however many users a client claims to be.
    pub(crate) fn address_rate_layer<B: RateBackend>(
        &self,
        backend: B,
    ) -> RateLimitLayer<B, ClientIp> {
        let per_second = self.config.buys_per_second_per_address;
        let key = ClientIp::new(self.config.trusted_proxies.iter().copied());
        self.rate_layer(backend, "address", per_second, key)
            .headers_on_success(false)
    }

    /// The per-user lock, as a tower layer on `backend`.
    pub(crate) fn lock_layer<B: LockBackend>(&self, backend: B) -> LockLayer<B, HeaderKey> {
        LockLayer::new(backend, HeaderKey::new(USER))
            .scope("shop")
            .wait(self.config.lock_wait)
            .decision_timeout(self.config.decision_timeout)
            .lock_options(lock_core::lock::LockOptions::new().lease(Duration::from_secs(10)))
    }

    /// Puts the [`SEED`] item on sale unless it exists: a second instance
    /// started against the same Redis leaves the stock as it is.
    pub async fn seed(&self) -> Outcome {
        let (item, stock) = SEED;
        match self.stock_counters().create(item, stock).await {
            Ok(true) => outcome(
                201,
                json!({ "item": item, "stock": stock, "created": true }),
            ),
            Ok(false) => self.stock(item).await,
            Err(e) => failure(&e),
        }
    }

    /// Health.
    pub fn health(&self) -> Outcome {
        outcome(
            200,
            json!({ "status": "ok", "backend": self.backend_name() }),
        )
    }

    /// Creates or resets an item.
    pub async fn set_stock(&self, item: &str, stock: u64) -> Outcome {
        match self.stock_counters().set(item, stock).await {
            Ok(()) => outcome(200, json!({ "item": item, "stock": stock })),
            Err(e) => failure(&e),
        }
    }

    /// An item's stock.
    pub async fn stock(&self, item: &str) -> Outcome {
        match self.stock_counters().get(item).await {
            Ok(Some(stock)) => outcome(200, json!({ "item": item, "stock": stock })),
            Ok(None) => outcome(404, json!({ "error": "unknown item" })),
            Err(e) => failure(&e),
        }
    }

    /// Buys one unit for `order` (idempotent per order id).
    pub async fn buy(&self, item: &str, order: Option<&str>) -> Outcome {
        let Some(order) = order else {
            return outcome(400, json!({ "error": "x-order-id is required" }));
        };
        match self.stock_counters().decrement_once(item, 1, order).await {
            Ok(Purchase::Done {
                remaining,
                replayed,
            }) => outcome(
                200,
                json!({ "result": "sold", "order": order, "remaining": remaining, "replayed": replayed }),
            ),
            Ok(Purchase::SoldOut { .. }) => {
                outcome(409, json!({ "result": "sold_out", "order": order }))
            }
            Ok(Purchase::UnknownItem) => outcome(404, json!({ "error": "unknown item" })),
            Ok(_) => outcome(500, json!({ "error": "unexpected outcome" })),
            Err(e) => failure(&e),
        }
    }

    /// Holds one unit for `order` for `hold` (default from the config).
    pub async fn reserve(
        &self,
        item: &str,
        order: Option<&str>,
        hold: Option<Duration>,
    ) -> Outcome {
        let Some(order) = order else {
            return outcome(400, json!({ "error": "x-order-id is required" }));
        };
        let hold = hold.unwrap_or(self.config.hold);
        match self.stock_counters().reserve(item, 1, order, hold).await {
            Ok(Reservation::Held {
                remaining,
                expires_in,
            }) => outcome(
                201,
                json!({ "result": "held", "order": order, "remaining": remaining,
                        "expires_in_ms": expires_in.as_millis() as u64 }),
            ),
            Ok(Reservation::AlreadyHeld { expires_in, .. }) => outcome(
                200,
                json!({ "result": "already_held", "order": order,
                        "expires_in_ms": expires_in.as_millis() as u64 }),
            ),
            Ok(Reservation::AlreadyConfirmed) => outcome(
                200,
                json!({ "result": "already_confirmed", "order": order }),
            ),
            Ok(Reservation::SoldOut { .. }) => {
                outcome(409, json!({ "result": "sold_out", "order": order }))
            }
            Ok(Reservation::UnknownItem) => outcome(404, json!({ "error": "unknown item" })),
            Ok(_) => outcome(500, json!({ "error": "unexpected outcome" })),
            Err(e) => failure(&e),
        }
    }

    /// Confirms `order`'s hold.
    pub async fn confirm(&self, item: &str, order: &str) -> Outcome {
        self.settle(
            order,
            true,
            self.stock_counters().confirm(item, order).await,
        )
    }

    /// Cancels `order`'s hold.
    pub async fn cancel(&self, item: &str, order: &str) -> Outcome {
        self.settle(
            order,
            false,
            self.stock_counters().cancel(item, order).await,
        )
    }

    fn settle(&self, order: &str, confirming: bool, result: lock_core::Result<Settle>) -> Outcome {
        match result {
            Ok(Settle::Confirmed) => outcome(200, json!({ "result": "confirmed", "order": order })),
            // Confirming twice is fine; cancelling a confirmed order is not.
            Ok(Settle::AlreadyConfirmed) => outcome(
                if confirming { 200 } else { 409 },
                json!({ "result": "already_confirmed", "order": order }),
            ),
            Ok(Settle::Cancelled { available }) => outcome(
                200,
                json!({ "result": "cancelled", "order": order, "stock": available }),
            ),
            Ok(Settle::NotHeld) => outcome(404, json!({ "result": "not_held", "order": order })),
            Ok(_) => outcome(500, json!({ "error": "unexpected outcome" })),
            Err(e) => failure(&e),
        }
    }
}
