//! Taking a lock: attempts until granted or the wait is over, waiting for
//! releases (or a handoff) between them, and giving back what an
//! interrupted or stale attempt took.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::guard::{self, Granted};
use super::interface::FAIR_REFRESH;
use super::{
    AcquireRequest, Attempt, Kind, Lock, LockBackend, LockGuard, MAX_LEASE, ReleaseWaiter,
    new_token,
};
use crate::error::{Error, Result};
use crate::name::Name;

impl<B: LockBackend> Lock<B> {
    /// Takes the lock within `wait`, in a `lock.acquire` span (the lock's
    /// name, and whether it was taken).
    pub(crate) async fn acquire(
        &self,
        owner: Option<&str>,
        wait: Duration,
    ) -> Result<Option<LockGuard<B>>> {
        use tracing::Instrument;
        let span = tracing::debug_span!(
            "lock.acquire",
            name = self.name().as_str(),
            ?wait,
            taken = tracing::field::Empty
        );
        let deadline = Instant::now() + wait.min(MAX_LEASE);
        let acquired = async {
            loop {
                match self.acquire_until(owner, deadline).await? {
                    Acquisition::Held(guard) => return Ok(Some(guard)),
                    Acquisition::Busy => return Ok(None),
                    // A grant that ran out before it could be used: given
                    // back; try again with a new token while the wait lasts.
                    Acquisition::Stale if Instant::now() < deadline => {}
                    Acquisition::Stale => return Ok(None),
                }
            }
        }
        .instrument(span.clone())
        .await;
        if let Ok(taken) = &acquired {
            span.record("taken", taken.is_some());
        }
        acquired
    }

    /// One token's attempts until `deadline`: a guard whose lease is still
    /// running, busy when the wait ran out, or stale when Redis granted the
    /// lock but its lease had run out by the time the grant was seen (the
    /// process was paused, a handoff message came late). A stale grant is
    /// released before this returns, in the background if that fails; the
    /// caller must not reuse its token.
    async fn acquire_until(
        &self,
        owner: Option<&str>,
        deadline: Instant,
    ) -> Result<Acquisition<B>> {
        let token: Arc<str> = new_token().into();
        let lease = self.options.lease.duration();
        let mut cleanup = Cleanup {
            backend: &self.backend,
            kind: self.kind,
            name: &self.name,
            token: token.clone(),
            armed: false,
        };
        let mut waiter: Option<B::Waiter> = None;
        loop {
            if let Some(waiter) = waiter.as_mut() {
                waiter.arm().await;
            }
            let started = Instant::now();
            // A fair waiter that is cut off here has joined the line: leave it.
            cleanup.armed = true;
            let request = AcquireRequest {
                kind: self.kind,
                name: &self.name,
                token: &token,
                owner,
                lease,
                fencing: self.options.fencing && self.kind.fences(),
                // Only an attempt made with a waiter armed waits after a
                // busy answer (see the `Busy` arm below).
                waits: waiter.is_some(),
            };
            // A majority that did not answer in time may answer the next
            // attempt: Redlock retries it like a busy lock (the attempt has
            // already undone itself on every server).
            let (attempt, unanswered) = match self.backend.acquire(&request).await {
                Ok(attempt) => (attempt, None),
                Err(error @ Error::NoQuorum { .. }) => (Attempt::busy(None), Some(error)),
                // The connection failed (no answer from the server at all):
                // the attempt may have been granted with its answer lost.
                // Give it back now, on the reconnected connection, so that
                // the caller's next attempt does not meet its own orphan;
                // if that fails too, the cleanup retries in the background.
                Err(Error::Backend(error)) if error.code().is_none() => {
                    cleanup.give_back_now().await;
                    return Err(Error::Backend(error));
                }
                Err(error) => return Err(error),
            };
            let (fence, granted) = match attempt {
                Attempt::Acquired { fence } => (
                    fence,
                    Granted {
                        at: started,
                        claim: None,
                    },
                ),
                Attempt::Busy { retry_in, handoffs } => {
                    cleanup.armed = self.kind.keeps_a_place();
                    let now = Instant::now();
                    if now >= deadline {
                        if self.kind.keeps_a_place() {
                            // Give up our place in line now, not when it lapses
                            // (on failure, the cleanup retries in the background).
                            let left = self.backend.release(self.kind, &self.name, &token).await;
                            cleanup.armed = left.is_err();
                        }
                        return match unanswered {
                            Some(error) => Err(error),
                            None => Ok(Acquisition::Busy),
                        };
                    }
                    let Some(armed) = waiter.as_mut() else {
                        // First miss: subscribe, then retry at once so a
                        // release during the subscription is not missed.
                        waiter = Some(self.backend.waiter(self.kind, &self.name, &token));
                        continue;
                    };
                    let mut max = deadline - now;
                    if let Some(ttl) = retry_in {
                        max = max.min(ttl + Duration::from_millis(1));
                    }
                    if self.kind.keeps_a_place() {
                        max = max.min(FAIR_REFRESH);
                    }
                    armed.wait(max).await;
                    // Handed over after this attempt was answered (a handoff
                    // from before the answer has lapsed: the answer was
                    // busy), so the claim counts from `started` at the
                    // earliest.
                    let Some(handoff) = armed.handed_over(handoffs) else {
                        continue;
                    };
                    if self.backend.confirms_grants() {
                        // Granted by someone else's release, which no
                        // replica was asked to confirm: confirm it (or give
                        // it back) before it counts.
                        cleanup.armed = true;
                        let confirming = Instant::now();
                        match self
                            .backend
                            .extend(self.kind, &self.name, &token, lease)
                            .await
                        {
                            Ok(true) => (
                                handoff.fence,
                                Granted {
                                    at: confirming,
                                    claim: None,
                                },
                            ),
                            // Lapsed before it could be confirmed.
                            Ok(false) => {
                                cleanup.armed = false;
                                return Ok(Acquisition::Stale);
                            }
                            // Too few replicas have it: given back now (or by
                            // the cleanup, in the background).
                            Err(error) => {
                                if matches!(error, Error::NotReplicated { .. }) {
                                    cleanup.give_back_now().await;
                                }
                                return Err(error);
                            }
                        }
                    } else {
                        (
                            handoff.fence,
                            Granted {
                                at: started,
                                claim: Some(handoff.claim),
                            },
                        )
                    }
                }
            };
            cleanup.armed = false;
            let drift = self.backend.clock_drift(lease);
            if granted.valid_until(self.options.lease, drift) <= Instant::now() {
                tracing::debug!(lock = %self.name, "a grant ran out before it was seen; giving it back");
                if self
                    .backend
                    .release(self.kind, &self.name, &token)
                    .await
                    .is_err()
                {
                    cleanup.armed = true;
                }
                return Ok(Acquisition::Stale);
            }
            return Ok(Acquisition::Held(LockGuard::new(
                self.backend.clone(),
                self.kind,
                self.name.clone(),
                token,
                fence,
                self.options.lease,
                granted,
                drift,
            )));
        }
    }
}

/// What one token's attempts came to (see [`Lock::acquire_until`]).
enum Acquisition<B: LockBackend> {
    Held(LockGuard<B>),
    Busy,
    Stale,
}

/// Releases what an interrupted acquisition may have taken.
struct Cleanup<'a, B: LockBackend> {
    backend: &'a B,
    kind: Kind,
    name: &'a Name,
    token: Arc<str>,
    armed: bool,
}

impl<B: LockBackend> Cleanup<'_, B> {
    /// Releases what the acquisition may hold now; disarmed if that
    /// worked, else left to release it in the background.
    async fn give_back_now(&mut self) {
        self.armed = true;
        if self
            .backend
            .release(self.kind, self.name, &self.token)
            .await
            .is_ok()
        {
            self.armed = false;
        }
    }
}

impl<B: LockBackend> Drop for Cleanup<'_, B> {
    fn drop(&mut self) {
        if self.armed {
            guard::release_in_background(
                self.backend.clone(),
                self.kind,
                self.name.clone(),
                self.token.clone(),
                tokio::runtime::Handle::try_current().ok(),
            );
        }
    }
}
