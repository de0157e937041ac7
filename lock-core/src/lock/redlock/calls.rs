//! Redlock as a [`LockBackend`]: each call sent to every server, and
//! counted.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::Either;
use tokio::time::Instant;

use super::Redlock;
use super::order::{SetState, Unsent, detached, place, refused, until_answered};
use super::tally::agreed;
use super::waiter::RedlockWaiter;
use crate::error::{Error, Result};
use crate::lock::interface::{AcquireRequest, Attempt, Kind, LockBackend, LockState};
use crate::lock::kinds::redlock_only;
use crate::name::Name;
use crate::time::sum;

impl LockBackend for Redlock {
    type Waiter = RedlockWaiter;

    async fn acquire(&self, request: &AcquireRequest<'_>) -> Result<Attempt> {
        redlock_only(request.kind)?;
        if request.fencing {
            return Err(Error::invalid_argument(
                "fencing",
                "Redlock cannot issue monotonic fencing tokens",
            ));
        }
        let started = Instant::now();
        let (name, token, lease) = (request.name, request.token, request.lease);
        let waits = request.waits;
        let quorum = self.quorum();
        let (lines, _) = self.lines(token, lease);
        let bound = self.per_server_timeout;
        let sets: Arc<[SetState]> = self.servers.iter().map(|_| SetState::default()).collect();
        // One copy of the token for every server's call and undo.
        let shared: Arc<str> = token.into();
        let results = self
            .on_all_until(
                |i, server| {
                    let (name, token, sets) = (name.clone(), shared.clone(), sets.clone());
                    let place = place(&lines, i);
                    async move {
                        let set = &sets[i];
                        let _unsent = Unsent(set);
                        place
                            .run(bound, async {
                                set.note(SetState::SENT);
                                let attempt = server.set_nx_px(&name, &token, lease, waits).await;
                                match &attempt {
                                    Ok(Attempt::Busy { .. }) => set.note(SetState::REFUSED),
                                    // No connection: the `SET` never left.
                                    Err(error) if refused(error) => set.note(SetState::UNSENT),
                                    _ => {}
                                }
                                attempt
                            })
                            .await
                    }
                },
                // Settled once a majority granted it, or a majority refused.
                |results| {
                    let taken = results
                        .iter()
                        .filter(|r| matches!(r, Ok(Attempt::Acquired { .. })))
                        .count();
                    let busy = results
                        .iter()
                        .filter(|r| matches!(r, Ok(Attempt::Busy { .. })))
                        .count();
                    taken >= quorum || busy >= quorum
                },
            )
            .await;
        let taken = results
            .iter()
            .filter(|r| matches!(r, Ok(Attempt::Acquired { .. })))
            .count();
        let validity = request
            .lease
            .checked_sub(started.elapsed() + self.clock_drift(request.lease));
        if taken >= self.quorum() && validity.is_some_and(|v| !v.is_zero()) {
            self.tokens.count(token, started + lease);
            return Ok(Attempt::Acquired { fence: None });
        }
        // Not ours: undo everywhere, including servers whose answer was lost
        // or not awaited, without waking waiters (a failed attempt frees
        // nothing that another attempt could get). Each undo runs after
        // its server's `SET` and before anything sent later for this token
        // (the next attempt's `SET`), and is sent again while it fails,
        // until the attempt's keys would have expired anyway. A `SET` that
        // was refused, or never went out, has nothing to undo.
        let until = started + sum(lease, bound);
        let wait = self.turn_bound(Some(until));
        let _ = self
            .on_all(|i, server| {
                if sets[i].nothing_to_undo() {
                    return Either::Left(std::future::ready(Ok(false)));
                }
                let (name, token, sets) = (name.clone(), shared.clone(), sets.clone());
                let place = place(&lines, i);
                Either::Right(detached(async move {
                    place
                        .run(wait, async {
                            // In line after the `SET`: now its fate is known.
                            if sets[i].nothing_to_undo() {
                                return Ok(false);
                            }
                            until_answered(until, || {
                                server.release_plain_whole(&name, &token, false)
                            })
                            .await
                        })
                        .await
                }))
            })
            .await;
        // Nothing of this attempt can be left on any server: forget the
        // token (a later attempt with it records it again), so refused
        // attempts do not gather records for their whole lease.
        if sets.iter().all(SetState::nothing_to_undo) {
            self.tokens.forget(token);
        }
        let answered = results.iter().filter(|r| r.is_ok()).count();
        if answered < self.quorum() {
            return Err(Error::NoQuorum {
                answered,
                needed: self.quorum(),
            });
        }
        let retry_in = results
            .iter()
            .filter_map(|r| match r {
                Ok(Attempt::Busy { retry_in, .. }) => *retry_in,
                _ => None,
            })
            .min();
        Ok(Attempt::busy(retry_in))
    }

    async fn release(&self, kind: Kind, name: &Name, token: &str) -> Result<bool> {
        redlock_only(kind)?;
        // After everything sent for this token, on every server; sent again
        // to a server where it fails (an error says nothing of the key
        // there, whatever the majority said) until the server answers or
        // the longest lease sent would have ended.
        let (lines, ends) = self.tokens.take(token, self.servers.len());
        let until = ends.unwrap_or_else(Instant::now);
        let wait = self.turn_bound(ends);
        let shared: Arc<str> = token.into();
        let results = self
            .on_all_until(
                |i, server| {
                    let (name, token) = (name.clone(), shared.clone());
                    let place = place(&lines, i);
                    detached(async move {
                        place
                            .run(wait, async {
                                until_answered(until, || {
                                    server.release_plain_whole(&name, &token, true)
                                })
                                .await
                            })
                            .await
                    })
                },
                |results| self.majority(results),
            )
            .await;
        self.tally(&results)
    }

    async fn extend(&self, kind: Kind, name: &Name, token: &str, lease: Duration) -> Result<bool> {
        redlock_only(kind)?;
        let started = Instant::now();
        let (lines, counted) = self.lines(token, lease);
        let bound = self.per_server_timeout;
        let results = self
            .on_all_until(
                |i, server| {
                    let (name, token) = (name.clone(), token.to_owned());
                    place(&lines, i).run(bound, async move {
                        server.extend(kind, &name, &token, lease).await
                    })
                },
                |results| self.majority(results),
            )
            .await;
        let extended = self.tally(&results);
        if matches!(extended, Ok(true)) {
            self.tokens.count(token, started + lease);
            return extended;
        }
        // Not counted, but some servers may have taken it: set every server
        // back to the lease the client still counts (none left: gone), in
        // line after the extend, so none keeps the key longer than that.
        if let Some(counted) = counted {
            let wait = self.turn_bound(None);
            for (i, server) in self.servers.iter().enumerate() {
                let (server, name, token) = (server.clone(), name.clone(), token.to_owned());
                let place = place(&lines, i);
                drop(detached(async move {
                    place
                        .run(wait, async {
                            match counted.checked_duration_since(Instant::now()) {
                                Some(left) if !left.is_zero() => {
                                    server.extend(kind, &name, &token, left).await
                                }
                                _ => server.release_plain_whole(&name, &token, true).await,
                            }
                        })
                        .await
                }));
            }
        }
        extended
    }

    async fn force_release(&self, kind: Kind, name: &Name) -> Result<bool> {
        redlock_only(kind)?;
        let results = self
            .on_all(|_, server| {
                let name = name.clone();
                async move { server.force_release(kind, &name).await }
            })
            .await;
        if results.iter().filter(|r| r.is_ok()).count() < self.quorum() {
            return self.tally(&results);
        }
        Ok(results.iter().any(|r| matches!(r, Ok(true))))
    }

    /// The state a majority of servers agree on (the same holder); `None`
    /// when no holder has a majority.
    async fn inspect(&self, kind: Kind, name: &Name) -> Result<Option<LockState>> {
        redlock_only(kind)?;
        let results = self
            .on_all(|_, server| {
                let name = name.clone();
                async move { server.inspect(kind, &name).await }
            })
            .await;
        let answers: Vec<Option<LockState>> = results.into_iter().filter_map(Result::ok).collect();
        if answers.len() < self.quorum() {
            return Err(Error::NoQuorum {
                answered: answers.len(),
                needed: self.quorum(),
            });
        }
        Ok(agreed(&answers, self.quorum()))
    }

    fn waiter(&self, kind: Kind, name: &Name, token: &str) -> RedlockWaiter {
        RedlockWaiter::new(
            self.retry_delay,
            self.per_server_timeout,
            self.servers
                .iter()
                .map(|server| server.waiter(kind, name, token))
                .collect(),
        )
    }

    fn clock_drift(&self, lease: Duration) -> Duration {
        lease / 100 + Duration::from_millis(2)
    }
}
