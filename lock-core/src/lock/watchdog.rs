//! Lease state shared by a guard and its watchdog, and the watchdog itself.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::task::AbortHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{Kind, LockBackend};
use crate::name::Name;

/// What a watchdog renews.
pub(super) struct Target {
    pub(super) kind: Kind,
    pub(super) name: Name,
    pub(super) token: std::sync::Arc<str>,
    pub(super) lease: Duration,
    pub(super) drift: Duration,
}

/// How long the lease is known to be valid (measured on the monotonic clock
/// from *before* the request that granted or renewed it), and whether it has
/// been found lost.
#[derive(Debug)]
pub(super) struct LeaseState {
    lost: CancellationToken,
    valid_until: Mutex<Instant>,
}

impl LeaseState {
    pub(super) fn new(valid_until: Instant) -> Self {
        LeaseState {
            lost: CancellationToken::new(),
            valid_until: Mutex::new(valid_until),
        }
    }

    pub(super) fn valid_until(&self) -> Instant {
        *self
            .valid_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn renewed(&self, valid_until: Instant) {
        *self
            .valid_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = valid_until;
    }

    pub(super) fn mark_lost(&self) {
        self.lost.cancel();
    }

    pub(super) fn is_lost(&self) -> bool {
        self.lost.is_cancelled() || self.valid_until() <= Instant::now()
    }

    /// Completes when the lease is marked lost or runs out. Every poll
    /// first looks at the clock, so the future is ready as soon as
    /// [`is_lost`](Self::is_lost) is true, whoever polls it (a `select!`
    /// woken by another branch, after the process was paused), not only
    /// once the runtime's timer has fired.
    pub(super) async fn lost(&self) {
        let cancelled = self.lost.cancelled();
        tokio::pin!(cancelled);
        let mut timer: Option<(Instant, std::pin::Pin<Box<tokio::time::Sleep>>)> = None;
        std::future::poll_fn(|cx| {
            if self.is_lost() || cancelled.as_mut().poll(cx).is_ready() {
                return std::task::Poll::Ready(());
            }
            // Wake up at the deadline (renewals move it: re-arm then).
            let until = self.valid_until();
            match &mut timer {
                Some((at, sleep)) if *at == until => {
                    let _ = sleep.as_mut().poll(cx);
                }
                _ => {
                    let mut sleep = Box::pin(tokio::time::sleep_until(until));
                    let _ = sleep.as_mut().poll(cx);
                    timer = Some((until, sleep));
                }
            }
            std::task::Poll::Pending
        })
        .await;
    }
}

/// How a lease is renewed.
#[derive(Debug, Clone, Copy)]
pub(super) enum Renewal {
    /// Every `lease / 3`.
    Periodic {
        /// Whether the first renewal goes out at once (a lock handed over
        /// for less than its lease) rather than after a period.
        at_once: bool,
    },
    /// Once, at once (a lock handed over for less than its fixed lease).
    Once,
}

/// Renews the lease as `renewal` says until aborted; marks it lost when the
/// lock turns out not to be ours or the lease runs out before a renewal
/// succeeds. Failed renewals are retried sooner.
pub(super) fn spawn<B: LockBackend>(
    backend: B,
    target: Target,
    state: std::sync::Arc<LeaseState>,
    renewal: Renewal,
) -> AbortHandle {
    let Target {
        kind,
        name,
        token,
        lease,
        drift,
    } = target;
    let period = lease / 3;
    tokio::spawn(async move {
        let mut next = match renewal {
            Renewal::Periodic { at_once: false } => period,
            Renewal::Periodic { at_once: true } | Renewal::Once => Duration::ZERO,
        };
        loop {
            tokio::time::sleep(next).await;
            let started = Instant::now();
            match backend.extend(kind, &name, &token, lease).await {
                Ok(true) => {
                    state.renewed(started + lease.saturating_sub(drift));
                    if matches!(renewal, Renewal::Once) {
                        return;
                    }
                    next = period;
                }
                Ok(false) => {
                    tracing::warn!(lock = %name, "lock lease lost: held by someone else or expired");
                    state.mark_lost();
                    return;
                }
                Err(error) => {
                    tracing::warn!(lock = %name, %error, "lock lease renewal failed");
                    next = period / 4;
                }
            }
            if state.valid_until() <= Instant::now() {
                tracing::warn!(lock = %name, "lock lease ran out before it could be renewed");
                state.mark_lost();
                return;
            }
        }
    })
    .abort_handle()
}
