//! The fair lock in memory: a line of waiters, and a holder that, when it
//! is an owner's, re-enters without queueing (the rules of
//! `fair_acquire.lua` and `fair_release.lua`, but for the handoff: here a
//! release wakes the head, which comes for the lock itself).

use std::collections::{HashSet, VecDeque};
use std::time::Duration;

use tokio::time::Instant;

use super::super::memory::Token;
use crate::lock::interface::{Attempt, FAIR_SLOT, LockState};

/// Who holds a fair lock.
struct Holder {
    /// The token that took it.
    token: Token,
    expires: Instant,
    /// The owner, for a reentrant fair lock.
    owner: Option<Token>,
    /// Every live acquisition: the first, and the owner's re-entries.
    acquisitions: HashSet<Token>,
    /// The holding's fencing token, when one was asked for.
    fence: Option<u64>,
}

/// One fair lock.
#[derive(Default)]
pub(super) struct Line {
    holder: Option<Holder>,
    /// Waiters in arrival order, with the deadline of their place in line.
    queue: VecDeque<(Token, Instant)>,
}

/// One attempt on a fair lock's [`Line`].
pub(super) struct Request<'a> {
    pub(super) token: &'a str,
    pub(super) owner: Option<&'a str>,
    pub(super) lease: Duration,
    /// Whether it asks for a fencing token.
    pub(super) fencing: bool,
}

impl Line {
    /// Drops what has expired; says whether anything is left.
    pub(super) fn prune(&mut self, now: Instant) -> bool {
        if self.holder.as_ref().is_some_and(|h| h.expires <= now) {
            self.holder = None;
        }
        self.queue.retain(|(_, deadline)| *deadline > now);
        self.holder.is_some() || !self.queue.is_empty()
    }

    /// Takes the lock for `request` if it is free and the request is first
    /// in line, or re-enters it for its owner; else keeps its place. Says
    /// which waiter to nudge, when the lock is free and its head has not
    /// come for it. `fence` gives a new fencing token, when asked for.
    pub(super) fn acquire(
        &mut self,
        request: &Request<'_>,
        now: Instant,
        fence: impl FnOnce() -> Option<u64>,
    ) -> (Attempt, Option<Token>) {
        let until = now + request.lease;
        if let Some(holder) = self.holder.as_mut()
            && request.owner.is_some()
            && holder.owner.as_deref() == request.owner
        {
            holder.acquisitions.insert(request.token.into());
            holder.expires = holder.expires.max(until);
            self.queue.retain(|(t, _)| &**t != request.token);
            // A holding granted without a fencing token gets one now, if
            // this acquisition asks for it; an acquisition that does not
            // ask gets none (as the script and the plain reentrant lock).
            if request.fencing && holder.fence.is_none() {
                holder.fence = fence();
            }
            let fence = holder.fence.filter(|_| request.fencing);
            return (Attempt::Acquired { fence }, None);
        }
        let first = self.queue.front().map(|(t, _)| t.clone());
        if self.holder.is_none() && first.as_deref().is_none_or(|t| t == request.token) {
            self.queue.retain(|(t, _)| &**t != request.token);
            let fence = fence();
            self.holder = Some(Holder {
                token: request.token.into(),
                expires: until,
                owner: request.owner.map(Into::into),
                acquisitions: HashSet::from([request.token.into()]),
                fence,
            });
            return (Attempt::Acquired { fence }, None);
        }
        let deadline = now + FAIR_SLOT;
        match self.queue.iter_mut().find(|(t, _)| &**t == request.token) {
            Some((_, d)) => *d = deadline,
            None => self.queue.push_back((request.token.into(), deadline)),
        }
        match &self.holder {
            Some(holder) => (
                Attempt::busy(Some(holder.expires.saturating_duration_since(now))),
                None,
            ),
            // The head has not come for it yet: nudge it.
            None => (Attempt::busy(None), first),
        }
    }

    /// Releases `token`'s acquisition (the lock goes once the holding has
    /// none left), or takes a waiter that gave up out of the line. Says
    /// whether it held the lock, and which waiter to wake.
    pub(super) fn release(&mut self, token: &str) -> (bool, Option<Token>) {
        let mine = self
            .holder
            .as_mut()
            .is_some_and(|h| h.acquisitions.remove(token));
        if mine
            && self
                .holder
                .as_ref()
                .is_some_and(|h| !h.acquisitions.is_empty())
        {
            return (true, None);
        }
        if mine {
            self.holder = None;
        } else {
            self.queue.retain(|(t, _)| &**t != token);
        }
        (mine, self.head())
    }

    /// The waiter to wake when the lock is free.
    fn head(&self) -> Option<Token> {
        match self.holder {
            Some(_) => None,
            None => self.queue.front().map(|(t, _)| t.clone()),
        }
    }

    /// Extends the lease if `token` holds it: set anew for a lone holder,
    /// never shortened for an owner's holding.
    pub(super) fn extend(&mut self, token: &str, lease: Duration, now: Instant) -> bool {
        match self.holder.as_mut() {
            Some(holder) if holder.acquisitions.contains(token) => {
                holder.expires = match holder.owner {
                    Some(_) => holder.expires.max(now + lease),
                    None => now + lease,
                };
                true
            }
            _ => false,
        }
    }

    /// Takes the lock from whoever holds it; says whether someone did,
    /// and which waiter to wake.
    pub(super) fn force(&mut self) -> (bool, Option<Token>) {
        let held = self.holder.take().is_some();
        (held, self.head())
    }

    /// Who holds it, for operators: the owner when it has one.
    pub(super) fn state(&self, now: Instant) -> Option<LockState> {
        let holder = self.holder.as_ref()?;
        let ms = i64::try_from(holder.expires.saturating_duration_since(now).as_millis())
            .unwrap_or(i64::MAX);
        let who = holder.owner.as_ref().unwrap_or(&holder.token);
        Some(LockState::new(1, ms, who))
    }
}
