//! The read-write lock in memory: the same rules as `rw_acquire.lua` and
//! `rw_release.lua`.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use super::super::memory::Token;
use crate::lock::interface::{Attempt, FAIR_SLOT, LockState};

/// One read-write lock: its acquisitions under one lease, and the writers
/// waiting ahead of new readers.
#[derive(Default)]
pub(super) struct ReadWrite {
    /// Each live acquisition: whether it writes, and its owner.
    held: HashMap<Token, (bool, Token)>,
    /// The writer's owner while some acquisition writes.
    writer: Option<Token>,
    /// The lease of every acquisition (the longest asked for).
    expires: Option<Instant>,
    /// Writers that wait, with the deadline of their place.
    waiting: HashMap<Token, Instant>,
    /// The write holding's fencing token, once one was asked for.
    pub(super) fence: Option<u64>,
}

/// One attempt on a [`ReadWrite`].
pub(super) struct Request<'a> {
    pub(super) token: &'a str,
    pub(super) owner: &'a str,
    pub(super) write: bool,
    pub(super) lease: Duration,
}

impl ReadWrite {
    /// Drops what has expired; says whether anything is left.
    pub(super) fn prune(&mut self, now: Instant) -> bool {
        if self.expires.is_some_and(|e| e <= now) {
            self.held.clear();
            self.writer = None;
            self.expires = None;
            self.fence = None;
        }
        self.waiting.retain(|_, deadline| *deadline > now);
        !self.held.is_empty() || !self.waiting.is_empty()
    }

    /// Takes the lock for `request` if the rules let it: `None` when they
    /// do (the caller adds the fencing token), else the busy answer.
    pub(super) fn acquire(&mut self, request: &Request<'_>, now: Instant) -> Option<Attempt> {
        let mine = self
            .held
            .values()
            .filter(|(_, o)| &**o == request.owner)
            .count();
        let granted = match &self.writer {
            Some(writer) => &**writer == request.owner,
            // An owner that already reads re-enters past waiting writers,
            // which wait for it.
            None if !request.write => mine > 0 || self.waiting.is_empty(),
            // Free, or read only by this owner (it upgrades).
            None => mine == self.held.len(),
        };
        if !granted {
            if request.write {
                self.waiting.insert(request.token.into(), now + FAIR_SLOT);
            }
            let mut until = self.expires;
            if !request.write && self.writer.is_none() {
                // Held back only by waiting writers: try again when the
                // first place lapses (a crashed writer's does, and nothing
                // announces it), or when the lease ends if that is sooner.
                until = until
                    .into_iter()
                    .chain(self.waiting.values().copied())
                    .min();
            }
            return Some(Attempt::busy(
                until.map(|u| u.saturating_duration_since(now)),
            ));
        }
        if request.write {
            self.writer = Some(request.owner.into());
            self.waiting.remove(request.token);
        }
        self.held
            .insert(request.token.into(), (request.write, request.owner.into()));
        self.expires = Some(
            self.expires
                .map_or(now + request.lease, |e| e.max(now + request.lease)),
        );
        None
    }

    /// Releases `token`'s acquisition, or takes a writer that gave up out
    /// of the waiting set. Says whether it held the lock, and whether
    /// waiters should be woken.
    pub(super) fn release(&mut self, token: &str) -> (bool, bool) {
        let Some((write, _)) = self.held.remove(token) else {
            return (false, self.waiting.remove(token).is_some());
        };
        if self.held.is_empty() {
            self.clear();
            return (true, true);
        }
        if write && !self.held.values().any(|(w, _)| *w) {
            // The owner's reads remain: the lock is read again.
            self.writer = None;
            self.fence = None;
            return (true, true);
        }
        (true, false)
    }

    /// Extends the lease (never shortens it) if `token` holds.
    pub(super) fn extend(&mut self, token: &str, lease: Duration, now: Instant) -> bool {
        if !self.held.contains_key(token) {
            return false;
        }
        self.expires = self.expires.map(|e| e.max(now + lease));
        true
    }

    /// Forgets every acquisition (an administrative unlock); says whether
    /// there was one.
    pub(super) fn clear(&mut self) -> bool {
        let held = !self.held.is_empty();
        self.held.clear();
        self.writer = None;
        self.expires = None;
        self.fence = None;
        held
    }

    /// Who holds it, for operators.
    pub(super) fn state(&self, now: Instant) -> Option<LockState> {
        let expires = self.expires.filter(|_| !self.held.is_empty())?;
        let holder = match &self.writer {
            Some(writer) => writer,
            None => &self.held.values().next()?.1,
        };
        let ms =
            i64::try_from(expires.saturating_duration_since(now).as_millis()).unwrap_or(i64::MAX);
        let taken = u32::try_from(self.held.len()).unwrap_or(u32::MAX);
        Some(LockState::new(taken, ms, holder))
    }
}
