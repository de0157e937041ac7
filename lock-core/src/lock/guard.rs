//! The guard of a held lock.

use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use super::watchdog::{self, LeaseState};
use super::{Kind, Lease, LockBackend, MAX_LEASE};
use crate::error::{Error, Result};
use crate::name::Name;

/// A held lock. Dropping it releases the lock in the background (on the
/// runtime it was taken on); [`release`](Self::release) does it in the
/// foreground and says whether we still owned it.
#[must_use = "dropping the guard releases the lock at once"]
pub struct LockGuard<B: LockBackend> {
    backend: B,
    kind: Kind,
    name: Name,
    token: Arc<str>,
    fence: Option<u64>,
    state: Arc<LeaseState>,
    watchdog: Option<AbortHandle>,
    runtime: Option<Handle>,
    released: bool,
}

impl<B: LockBackend> std::fmt::Debug for LockGuard<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("kind", &self.kind)
            .field("name", &self.name)
            .field("fence", &self.fence)
            .field("watchdog", &self.watchdog.is_some())
            .field("lost", &self.is_lost())
            .finish_non_exhaustive()
    }
}

/// When and for how long a lock was granted.
pub(super) struct Granted {
    /// Before the request that granted it.
    pub(super) at: Instant,
    /// Held for at most this long until the lease is confirmed (a lock
    /// handed over to a waiter); `None` when granted for the whole lease.
    pub(super) claim: Option<Duration>,
}

impl Granted {
    /// How long the grant is held for before any renewal: the lease, or
    /// the claim when that is shorter.
    fn held_for(&self, lease: Lease) -> Duration {
        let full = lease.duration();
        self.claim.map_or(full, |claim| claim.min(full))
    }

    /// Until when the grant is known to be valid: counted from before the
    /// request that granted it, less what clock drift may take.
    pub(super) fn valid_until(&self, lease: Lease, drift: Duration) -> Instant {
        self.at + self.held_for(lease).saturating_sub(drift)
    }
}

impl<B: LockBackend> LockGuard<B> {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        backend: B,
        kind: Kind,
        name: Name,
        token: Arc<str>,
        fence: Option<u64>,
        lease: Lease,
        granted: Granted,
        drift: Duration,
    ) -> Self {
        // Held for less than the lease until confirmed: confirm at once.
        let confirm = granted.held_for(lease) < lease.duration();
        let state = Arc::new(LeaseState::new(granted.valid_until(lease, drift)));
        let renewal = match lease {
            Lease::Watchdog(d) => Some((d, watchdog::Renewal::Periodic { at_once: confirm })),
            Lease::Fixed(d) if confirm => Some((d, watchdog::Renewal::Once)),
            Lease::Fixed(_) => None,
        };
        let watchdog = renewal.map(|(d, renewal)| {
            watchdog::spawn(
                backend.clone(),
                watchdog::Target {
                    kind,
                    name: name.clone(),
                    token: token.clone(),
                    lease: d,
                    drift,
                },
                state.clone(),
                renewal,
            )
        });
        LockGuard {
            backend,
            kind,
            name,
            token,
            fence,
            state,
            watchdog,
            runtime: Handle::try_current().ok(),
            released: false,
        }
    }

    /// The lock's name.
    pub fn name(&self) -> &Name {
        &self.name
    }

    /// The lock's kind.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The owner token stored under the lock key (128 random bits, hex).
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The fencing token of this acquisition, when the lock was built with
    /// [`LockOptions::fencing`](super::LockOptions::fencing). Later
    /// acquisitions of the same lock get larger tokens.
    pub fn fencing_token(&self) -> Option<u64> {
        self.fence
    }

    /// How much longer the lease is known to be valid (zero once lost).
    pub fn valid_for(&self) -> Duration {
        if self.state.is_lost() {
            return Duration::ZERO;
        }
        self.state
            .valid_until()
            .saturating_duration_since(Instant::now())
    }

    /// Whether the lease is lost: renewal found the lock gone or taken, or the
    /// lease ran out.
    pub fn is_lost(&self) -> bool {
        self.state.is_lost()
    }

    /// Completes when the lease is lost: at the moment its validity runs
    /// out, whoever polls it (it looks at the clock on every poll, so a
    /// `select!` woken after a pause sees it at once), or when renewal finds
    /// the lock gone. Use it to stop work that must not run without the
    /// lock, and still check [`is_lost`](Self::is_lost) right before each
    /// outside write (see the [module docs](super#what-no-client-library-can-prevent)):
    ///
    /// ```
    /// # async fn run(guard: lock_core::lock::LockGuard<lock_core::backend::MemoryBackend>) {
    /// tokio::select! {
    ///     () = guard.lost() => eprintln!("lease lost, giving up"),
    ///     () = async { /* critical section */ } => {}
    /// }
    /// # }
    /// ```
    pub async fn lost(&self) {
        self.state.lost().await;
    }

    /// Like [`lost`](Self::lost), but owning what it needs: a `'static`
    /// future to store beside the guard (in a response future, a task).
    pub fn lost_owned(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let state = self.state.clone();
        async move { state.lost().await }
    }

    /// Sets the lease to `ttl` from now, if we still own the lock.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a zero or over-long `ttl`; backend failures.
    pub async fn extend(&self, ttl: Duration) -> Result<bool> {
        if ttl.is_zero() || ttl > MAX_LEASE {
            return Err(Error::invalid_argument(
                "ttl",
                "must be between 1 ms and a year",
            ));
        }
        let started = Instant::now();
        let extended = self
            .backend
            .extend(self.kind, &self.name, &self.token, ttl)
            .await?;
        if extended {
            let drift = self.backend.clock_drift(ttl);
            self.state.renewed(started + ttl.saturating_sub(drift));
        } else {
            self.state.mark_lost();
        }
        Ok(extended)
    }

    /// Releases the lock; `Ok(false)` when it was no longer ours (it expired,
    /// or was taken over).
    ///
    /// # Errors
    /// Backend failures; the lock is then released in the background again and
    /// expires at the end of its lease at the latest.
    pub async fn release(mut self) -> Result<bool> {
        if let Some(watchdog) = self.watchdog.take() {
            watchdog.abort();
        }
        let released = match self
            .backend
            .release(self.kind, &self.name, &self.token)
            .await
        {
            Ok(released) => released,
            // The release may have been made with only its answer lost: ask
            // once more; the lock remembers its last release
            // (RELEASE_REMEMBERED), so the answer is the first one.
            Err(error) if error.is_backend_failure() => {
                self.backend
                    .release(self.kind, &self.name, &self.token)
                    .await?
            }
            Err(error) => return Err(error),
        };
        self.released = true;
        self.state.mark_lost();
        Ok(released)
    }
}

impl<B: LockBackend> Drop for LockGuard<B> {
    fn drop(&mut self) {
        if let Some(watchdog) = self.watchdog.take() {
            watchdog.abort();
        }
        if !self.released {
            release_in_background(
                self.backend.clone(),
                self.kind,
                self.name.clone(),
                self.token.clone(),
                self.runtime.take(),
            );
        }
    }
}

/// Releases `name` for `token` on `runtime` (or the current one), logging failures.
pub(super) fn release_in_background<B: LockBackend>(
    backend: B,
    kind: Kind,
    name: Name,
    token: Arc<str>,
    runtime: Option<Handle>,
) {
    let Some(runtime) = runtime.or_else(|| Handle::try_current().ok()) else {
        tracing::warn!(lock = %name, "no tokio runtime to release the lock on; it expires with its lease");
        return;
    };
    runtime.spawn(async move {
        if let Err(error) = backend.release(kind, &name, &token).await {
            tracing::warn!(lock = %name, %error, "background lock release failed; it expires with its lease");
        }
    });
}
