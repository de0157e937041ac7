//! Stock counters that never oversell.
//!
//! A [`Stock`] handle manages items by name: [`set`](Stock::set) creates or
//! resets an item, [`decrement`](Stock::decrement) takes `n` units only if at
//! least `n` remain (stock never goes below zero), [`restock`](Stock::restock)
//! adds units. Each operation is one atomic round trip.
//!
//! * **Idempotent decrements**: [`decrement_once`](Stock::decrement_once) takes
//!   an operation id; a retry with the same id returns the first outcome and
//!   takes nothing more. Ids are remembered for [`Stock::remember_for`].
//! * **Reservations**: [`reserve`](Stock::reserve) holds units for an order for
//!   a while; [`confirm`](Stock::confirm) makes them final, [`cancel`](Stock::cancel)
//!   or expiry gives them back. A hold that expired counts as available at
//!   once, however many expired together (on Redis time), so a client that
//!   crashes after reserving loses nothing and a read never reports less
//!   than is there.
//!
//! Stock counters are the one kind of key written without a TTL: the item
//! exists until [`delete`](Stock::delete)d. Its holds live beside it and
//! expire with the last of them; operation ids and confirmations expire.
//! Every count stays at most [`MAX_QUANTITY`] (exact in Redis's Lua
//! numbers): a change that would pass it is refused, on both backends.
//!
//! ```
//! # use lock_core as lock_axum; // lock_axum re-exports these modules as they are
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> lock_core::Result<()> {
//! use std::time::Duration;
//! use lock_axum::backend::MemoryBackend;
//! use lock_axum::counter::{Purchase, Reservation, Stock};
//!
//! let stock = Stock::new(MemoryBackend::new());
//! stock.set("sku-1", 2).await?;
//! assert!(matches!(stock.decrement("sku-1", 1).await?, Purchase::Done { remaining: 1, .. }));
//! assert!(matches!(stock.decrement("sku-1", 5).await?, Purchase::SoldOut { available: 1 }));
//!
//! // A retried order is not charged twice.
//! let first = stock.decrement_once("sku-1", 1, "order-7").await?;
//! assert!(matches!(first, Purchase::Done { remaining: 0, replayed: false }));
//! let retry = stock.decrement_once("sku-1", 1, "order-7").await?;
//! assert!(matches!(retry, Purchase::Done { remaining: 0, replayed: true }));
//!
//! stock.restock("sku-1", 3).await?;
//! let held = stock.reserve("sku-1", 2, "order-8", Duration::from_secs(60)).await?;
//! assert!(matches!(held, Reservation::Held { remaining: 1, .. }));
//! stock.cancel("sku-1", "order-8").await?; // the 2 units come back
//! assert_eq!(stock.get("sku-1").await?, Some(3));
//! # Ok(()) }
//! ```

pub(crate) mod memory;
#[cfg(feature = "redis")]
mod redis;

use std::future::Future;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::name::Name;
use crate::time::MAX_LEASE;

/// Largest quantity accepted, and the most an item may hold in all,
/// available and held (2^53 - 1: exact in Lua's numbers).
pub const MAX_QUANTITY: u64 = (1 << 53) - 1;

fn too_much() -> Error {
    Error::invalid_argument(
        "quantity",
        "the item would hold more than 2^53 - 1 units (MAX_QUANTITY)",
    )
}
/// How long operation ids and confirmations are remembered by default.
pub const DEFAULT_REMEMBER: Duration = Duration::from_secs(24 * 3600);

/// Outcome of a decrement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Purchase {
    /// The units were taken.
    Done {
        /// Stock left after this decrement.
        remaining: u64,
        /// True when this is a retry of an operation id that already succeeded.
        replayed: bool,
    },
    /// Fewer units than asked for remain; nothing was taken.
    SoldOut {
        /// Stock available at the time.
        available: u64,
    },
    /// No such item.
    UnknownItem,
}

/// Outcome of a reservation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reservation {
    /// The units are held for the order.
    Held {
        /// Stock left after the hold.
        remaining: u64,
        /// When the hold expires unless confirmed.
        expires_in: Duration,
    },
    /// The order already holds units (a retry); nothing more was taken.
    AlreadyHeld {
        /// Units the order holds.
        quantity: u64,
        /// When that hold expires.
        expires_in: Duration,
    },
    /// The order was already confirmed.
    AlreadyConfirmed,
    /// Fewer units than asked for remain; nothing was held.
    SoldOut {
        /// Stock available at the time.
        available: u64,
    },
    /// No such item.
    UnknownItem,
}

/// Outcome of confirming or cancelling a reservation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Settle {
    /// The hold became final.
    Confirmed,
    /// The hold was released and its units returned.
    Cancelled {
        /// Stock available after the return.
        available: u64,
    },
    /// The order had already been confirmed (a retry, or a cancel too late).
    AlreadyConfirmed,
    /// The order holds nothing: never reserved, cancelled, or expired (its
    /// units have gone back).
    NotHeld,
}

/// A store that can keep stock counters. Implemented by
/// [`RedisBackend`](crate::backend::RedisBackend) and
/// [`MemoryBackend`](crate::backend::MemoryBackend). Arguments are validated
/// by [`Stock`]; each method is one atomic round trip.
pub trait CounterBackend: Clone + Send + Sync + 'static {
    /// Creates `item` with `quantity` units available, or resets its
    /// available stock (its live holds stay held).
    fn set(&self, item: &Name, quantity: u64) -> impl Future<Output = Result<()>> + Send;
    /// Creates `item` unless it exists; says whether it did.
    fn create(&self, item: &Name, quantity: u64) -> impl Future<Output = Result<bool>> + Send;
    /// The available stock (after returning expired holds); `None` for an
    /// unknown item.
    fn get(&self, item: &Name) -> impl Future<Output = Result<Option<u64>>> + Send;
    /// Adds `quantity` units; returns the new available stock, `None` for
    /// an unknown item (which is not created).
    fn restock(
        &self,
        item: &Name,
        quantity: u64,
    ) -> impl Future<Output = Result<Option<u64>>> + Send;
    /// Takes `n` units if at least `n` remain. With `op` (an operation id
    /// and how long to remember it), the outcome is remembered for that
    /// long: a retry with the same id returns the first outcome and takes
    /// nothing more.
    fn decrement(
        &self,
        item: &Name,
        n: u64,
        op: Option<(&Name, Duration)>,
    ) -> impl Future<Output = Result<Purchase>> + Send;
    /// Holds `n` units for `order` for `hold`; they come back unless
    /// confirmed.
    fn reserve(
        &self,
        item: &Name,
        n: u64,
        order: &Name,
        hold: Duration,
    ) -> impl Future<Output = Result<Reservation>> + Send;
    /// Makes `order`'s hold final, remembering the confirmation for
    /// `remember`.
    fn confirm(
        &self,
        item: &Name,
        order: &Name,
        remember: Duration,
    ) -> impl Future<Output = Result<Settle>> + Send;
    /// Gives `order`'s held units back.
    fn cancel(&self, item: &Name, order: &Name) -> impl Future<Output = Result<Settle>> + Send;
    /// Deletes `item` and its holds; says whether it existed.
    fn delete(&self, item: &Name) -> impl Future<Output = Result<bool>> + Send;
}

/// Stock counters on a backend. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Stock<B> {
    backend: B,
    remember: Duration,
}

fn quantity(argument: &'static str, n: u64) -> Result<u64> {
    if n == 0 {
        return Err(Error::invalid_argument(argument, "must be at least 1"));
    }
    if n > MAX_QUANTITY {
        return Err(Error::invalid_argument(argument, "must be below 2^53"));
    }
    Ok(n)
}

fn duration_ms(argument: &'static str, d: Duration) -> Result<Duration> {
    if d < Duration::from_millis(1) || d > MAX_LEASE {
        return Err(Error::invalid_argument(
            argument,
            "must be between 1 ms and a year",
        ));
    }
    Ok(d)
}

impl<B: CounterBackend> Stock<B> {
    /// Stock counters on `backend`, remembering operation ids for
    /// [`DEFAULT_REMEMBER`].
    pub fn new(backend: B) -> Self {
        Stock {
            backend,
            remember: DEFAULT_REMEMBER,
        }
    }

    /// How long operation ids and confirmations are remembered; at least 1 ms.
    pub fn remember_for(mut self, remember: Duration) -> Self {
        self.remember = remember.clamp(Duration::from_millis(1), MAX_LEASE);
        self
    }

    /// Creates `item` with `quantity` units available, or resets its
    /// available stock (its live holds stay held).
    ///
    /// # Errors
    /// Bad item name; `quantity` above [`MAX_QUANTITY`], or one that with
    /// the live holds would pass it; backend failures.
    pub async fn set(&self, item: &str, quantity: u64) -> Result<()> {
        if quantity > MAX_QUANTITY {
            return Err(too_much());
        }
        self.backend.set(&Name::new(item)?, quantity).await
    }

    /// Creates `item` with `quantity` units unless it exists; says whether
    /// it did. An item that exists keeps its stock: several instances may
    /// all seed the same items at start-up, and none sells a unit twice.
    /// It also means that an app restarted on the same Redis starts with
    /// what was left, sold out if it was: to start a demo or a test over
    /// with `quantity` units, use [`set`](Self::set).
    ///
    /// ```
    /// # use lock_core as lock_axum; // lock_axum re-exports these modules as they are
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> lock_core::Result<()> {
    /// use lock_axum::backend::MemoryBackend;
    /// use lock_axum::counter::Stock;
    ///
    /// let stock = Stock::new(MemoryBackend::new());
    /// assert!(stock.create("sku-1", 100).await?);
    /// stock.decrement("sku-1", 3).await?;
    /// assert!(!stock.create("sku-1", 100).await?); // a second instance starts
    /// assert_eq!(stock.get("sku-1").await?, Some(97));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// Bad item name, `quantity` above [`MAX_QUANTITY`], backend failures.
    pub async fn create(&self, item: &str, quantity: u64) -> Result<bool> {
        if quantity > MAX_QUANTITY {
            return Err(too_much());
        }
        self.backend.create(&Name::new(item)?, quantity).await
    }

    /// The available stock (after returning expired holds); `None` for an
    /// unknown item.
    ///
    /// # Errors
    /// Bad item name, backend failures.
    pub async fn get(&self, item: &str) -> Result<Option<u64>> {
        self.backend.get(&Name::new(item)?).await
    }

    /// Adds `quantity` units; returns the new available stock, `None` for an
    /// unknown item.
    ///
    /// # Errors
    /// Bad item name, zero or too large quantity, a total that would pass
    /// [`MAX_QUANTITY`] (nothing is added), backend failures.
    pub async fn restock(&self, item: &str, quantity: u64) -> Result<Option<u64>> {
        let quantity = self::quantity("quantity", quantity)?;
        self.backend.restock(&Name::new(item)?, quantity).await
    }

    /// Takes `n` units if at least `n` remain.
    ///
    /// # Errors
    /// Bad item name, zero or too large `n`, backend failures.
    pub async fn decrement(&self, item: &str, n: u64) -> Result<Purchase> {
        let n = quantity("n", n)?;
        self.backend.decrement(&Name::new(item)?, n, None).await
    }

    /// Like [`decrement`](Self::decrement), once per `operation` id: a retry
    /// with the same id returns the first outcome and takes nothing more.
    ///
    /// # Errors
    /// As [`decrement`](Self::decrement), and a bad operation id.
    pub async fn decrement_once(&self, item: &str, n: u64, operation: &str) -> Result<Purchase> {
        let n = quantity("n", n)?;
        let operation = Name::new(operation)?;
        self.backend
            .decrement(&Name::new(item)?, n, Some((&operation, self.remember)))
            .await
    }

    /// Holds `n` units for `order` for `hold`; they come back unless confirmed.
    ///
    /// # Errors
    /// Bad names, zero `n` or `hold`, backend failures.
    pub async fn reserve(
        &self,
        item: &str,
        n: u64,
        order: &str,
        hold: Duration,
    ) -> Result<Reservation> {
        let n = quantity("n", n)?;
        let hold = duration_ms("hold", hold)?;
        self.backend
            .reserve(&Name::new(item)?, n, &Name::new(order)?, hold)
            .await
    }

    /// Makes `order`'s hold final.
    ///
    /// # Errors
    /// Bad names, backend failures.
    pub async fn confirm(&self, item: &str, order: &str) -> Result<Settle> {
        self.backend
            .confirm(&Name::new(item)?, &Name::new(order)?, self.remember)
            .await
    }

    /// Gives `order`'s held units back.
    ///
    /// # Errors
    /// Bad names, backend failures.
    pub async fn cancel(&self, item: &str, order: &str) -> Result<Settle> {
        self.backend
            .cancel(&Name::new(item)?, &Name::new(order)?)
            .await
    }

    /// Deletes `item` and its holds; says whether it existed.
    ///
    /// # Errors
    /// Bad item name, backend failures.
    pub async fn delete(&self, item: &str) -> Result<bool> {
        self.backend.delete(&Name::new(item)?).await
    }
}
