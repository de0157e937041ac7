//! A backend chosen at run time: memory, one Redis server, a cluster, or
//! the master Sentinels name, as one type that every primitive and layer
//! takes.
//!
//! It lives above the primitives, not in `backend/`, because it implements
//! every primitive's backend trait; `backend/` (the transports) names no
//! primitive. The public path stays `lock_core::backend::AnyBackend`.

use std::time::Duration;

use crate::backend::MemoryBackend;
#[cfg(feature = "redis")]
use crate::backend::{ClusterBackend, RedisBackend, SentinelBackend};
use crate::counter::{CounterBackend, Purchase, Reservation, Settle};
use crate::error::Result;
use crate::lock::backend::{
    AcquireRequest, Attempt, Handoff, Kind, LockBackend, LockState, ReleaseWaiter,
};
use crate::name::Name;
use crate::rate::{Decision, RateBackend, RateRequest};

/// Any backend of this crate but Redlock (which only keeps locks), chosen
/// at run time: configuration picks it, and the code that uses it is
/// written once. Cheap to clone.
///
/// ```no_run
/// # #[cfg(feature = "redis")] // the `redis` feature, on by default
/// # async fn run() -> lock_core::Result<()> {
/// use lock_core::backend::{AnyBackend, MemoryBackend, RedisBackend};
/// use lock_core::lock::Lock;
///
/// let backend: AnyBackend = match std::env::var("REDIS_URL") {
///     Ok(url) => RedisBackend::connect(&url).await?.into(),
///     Err(_) => MemoryBackend::new().into(),
/// };
/// let lock = Lock::new(backend, "report:daily")?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum AnyBackend {
    /// In memory, for one process.
    Memory(MemoryBackend),
    /// One Redis server.
    #[cfg(feature = "redis")]
    Redis(RedisBackend),
    /// A Redis Cluster.
    #[cfg(feature = "redis")]
    Cluster(ClusterBackend),
    /// The master that Redis Sentinels name.
    #[cfg(feature = "redis")]
    Sentinel(SentinelBackend),
}

impl AnyBackend {
    /// What it is: `memory`, `redis`, `cluster` or `sentinel`.
    pub fn kind(&self) -> &'static str {
        match self {
            AnyBackend::Memory(_) => "memory",
            #[cfg(feature = "redis")]
            AnyBackend::Redis(_) => "redis",
            #[cfg(feature = "redis")]
            AnyBackend::Cluster(_) => "cluster",
            #[cfg(feature = "redis")]
            AnyBackend::Sentinel(_) => "sentinel",
        }
    }
}

impl From<MemoryBackend> for AnyBackend {
    fn from(backend: MemoryBackend) -> Self {
        AnyBackend::Memory(backend)
    }
}

#[cfg(feature = "redis")]
impl From<RedisBackend> for AnyBackend {
    fn from(backend: RedisBackend) -> Self {
        AnyBackend::Redis(backend)
    }
}

#[cfg(feature = "redis")]
impl From<ClusterBackend> for AnyBackend {
    fn from(backend: ClusterBackend) -> Self {
        AnyBackend::Cluster(backend)
    }
}

#[cfg(feature = "redis")]
impl From<SentinelBackend> for AnyBackend {
    fn from(backend: SentinelBackend) -> Self {
        AnyBackend::Sentinel(backend)
    }
}

/// `$body` with `$b` bound to the backend inside `$any`, whatever it is.
macro_rules! each {
    ($any:expr, $b:ident => $body:expr) => {
        match $any {
            AnyBackend::Memory($b) => $body,
            #[cfg(feature = "redis")]
            AnyBackend::Redis($b) => $body,
            #[cfg(feature = "redis")]
            AnyBackend::Cluster($b) => $body,
            #[cfg(feature = "redis")]
            AnyBackend::Sentinel($b) => $body,
        }
    };
}

/// What waits for a release on an [`AnyBackend`]: its
/// [`LockBackend::Waiter`], which no one needs to name.
#[derive(Debug)]
pub enum AnyWaiter {
    /// In memory.
    Memory(<MemoryBackend as LockBackend>::Waiter),
    /// On Redis (any deployment).
    #[cfg(feature = "redis")]
    Redis(<RedisBackend as LockBackend>::Waiter),
}

impl ReleaseWaiter for AnyWaiter {
    async fn arm(&mut self) {
        match self {
            AnyWaiter::Memory(w) => w.arm().await,
            #[cfg(feature = "redis")]
            AnyWaiter::Redis(w) => w.arm().await,
        }
    }

    async fn wait(&mut self, max: Duration) {
        match self {
            AnyWaiter::Memory(w) => w.wait(max).await,
            #[cfg(feature = "redis")]
            AnyWaiter::Redis(w) => w.wait(max).await,
        }
    }

    fn handed_over(&self, after: u64) -> Option<Handoff> {
        match self {
            AnyWaiter::Memory(w) => w.handed_over(after),
            #[cfg(feature = "redis")]
            AnyWaiter::Redis(w) => w.handed_over(after),
        }
    }
}

impl LockBackend for AnyBackend {
    type Waiter = AnyWaiter;

    async fn acquire(&self, request: &AcquireRequest<'_>) -> Result<Attempt> {
        each!(self, b => b.acquire(request).await)
    }

    async fn release(&self, kind: Kind, name: &Name, token: &str) -> Result<bool> {
        each!(self, b => b.release(kind, name, token).await)
    }

    async fn extend(&self, kind: Kind, name: &Name, token: &str, lease: Duration) -> Result<bool> {
        each!(self, b => b.extend(kind, name, token, lease).await)
    }

    async fn force_release(&self, kind: Kind, name: &Name) -> Result<bool> {
        each!(self, b => b.force_release(kind, name).await)
    }

    async fn inspect(&self, kind: Kind, name: &Name) -> Result<Option<LockState>> {
        each!(self, b => b.inspect(kind, name).await)
    }

    fn waiter(&self, kind: Kind, name: &Name, token: &str) -> AnyWaiter {
        match self {
            AnyBackend::Memory(b) => AnyWaiter::Memory(b.waiter(kind, name, token)),
            #[cfg(feature = "redis")]
            AnyBackend::Redis(b) => AnyWaiter::Redis(b.waiter(kind, name, token)),
            #[cfg(feature = "redis")]
            AnyBackend::Cluster(b) => AnyWaiter::Redis(b.waiter(kind, name, token)),
            #[cfg(feature = "redis")]
            AnyBackend::Sentinel(b) => AnyWaiter::Redis(b.waiter(kind, name, token)),
        }
    }

    fn clock_drift(&self, lease: Duration) -> Duration {
        each!(self, b => b.clock_drift(lease))
    }

    fn confirms_grants(&self) -> bool {
        each!(self, b => b.confirms_grants())
    }
}

impl RateBackend for AnyBackend {
    async fn check(&self, request: &RateRequest<'_>) -> Result<Decision> {
        each!(self, b => b.check(request).await)
    }

    fn check_now(&self, request: &RateRequest<'_>) -> Option<Result<Decision>> {
        each!(self, b => b.check_now(request))
    }

    async fn reset(&self, request: &RateRequest<'_>) -> Result<()> {
        each!(self, b => b.reset(request).await)
    }
}

impl CounterBackend for AnyBackend {
    async fn set(&self, item: &Name, quantity: u64) -> Result<()> {
        each!(self, b => b.set(item, quantity).await)
    }

    async fn create(&self, item: &Name, quantity: u64) -> Result<bool> {
        each!(self, b => b.create(item, quantity).await)
    }

    async fn get(&self, item: &Name) -> Result<Option<u64>> {
        each!(self, b => b.get(item).await)
    }

    async fn restock(&self, item: &Name, quantity: u64) -> Result<Option<u64>> {
        each!(self, b => b.restock(item, quantity).await)
    }

    async fn decrement(
        &self,
        item: &Name,
        n: u64,
        op: Option<(&Name, Duration)>,
    ) -> Result<Purchase> {
        each!(self, b => b.decrement(item, n, op).await)
    }

    async fn reserve(
        &self,
        item: &Name,
        n: u64,
        order: &Name,
        hold: Duration,
    ) -> Result<Reservation> {
        each!(self, b => b.reserve(item, n, order, hold).await)
    }

    async fn confirm(&self, item: &Name, order: &Name, remember: Duration) -> Result<Settle> {
        each!(self, b => b.confirm(item, order, remember).await)
    }

    async fn cancel(&self, item: &Name, order: &Name) -> Result<Settle> {
        each!(self, b => b.cancel(item, order).await)
    }

    async fn delete(&self, item: &Name) -> Result<bool> {
        each!(self, b => b.delete(item).await)
    }
}
