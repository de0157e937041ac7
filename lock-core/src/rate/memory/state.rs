//! The rate-limit state of one memory backend, and its decisions: what
//! [`Binding`] keeps for a limiter, and the store each kind of policy
//! decides on. See the [module](super) for how.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crossbeam_utils::CachePadded;
use parking_lot::Mutex;

use super::keyed::{QuotaLimiter, decide_all};
use super::table::Table;
use crate::backend::clock::Clock;
use crate::backend::{MemoryConfig, MemoryState};
use crate::name::Name;
use crate::rate::algorithm::Window;
use crate::rate::algorithm::gcra::Step;
use crate::rate::caller::{Caller, CallerKey};
use crate::rate::decision::{Decision, decision};
use crate::rate::policy::Policy;

/// One decision asked of the state: a [`RateRequest`](crate::rate::backend::RateRequest)
/// without the backend's own parts.
#[derive(Clone, Copy)]
pub(super) struct Asked<'a> {
    pub(super) scope: &'a Name,
    pub(super) caller: &'a Caller<'a>,
    pub(super) policy: &'a Policy,
    pub(super) cost: u32,
    pub(super) at_most: bool,
}

/// Rate-limit state of one [`MemoryBackend`](crate::backend::MemoryBackend).
pub(crate) struct RateState {
    clock: Clock,
    max_keys: usize,
    table: Table,
    /// The GCRA state of each (scope, quota).
    quotas: Mutex<HashMap<QuotaOf, Arc<QuotaLimiter>>>,
    /// Locks that a GCRA decision on several quotas takes, by caller: see
    /// [`QuotaLimiter::share`].
    stripes: Box<[CachePadded<Mutex<()>>]>,
    hasher: ahash::RandomState,
}

impl std::fmt::Debug for RateState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateState")
            .field("clock", &self.clock)
            .field("max_keys", &self.max_keys)
            .finish_non_exhaustive()
    }
}

/// A scope and a quota's key suffix (its algorithm, limit and period).
type QuotaOf = (Name, Arc<str>);

/// What a limiter keeps of a memory backend for its scope and policy,
/// found once and kept in the limiter: with the backend's rate state
/// itself, so that a decision asks the backend's store for nothing.
pub(crate) struct Binding {
    pub(super) state: Arc<RateState>,
    pub(super) bound: Bound,
}

pub(super) enum Bound {
    Gcra(Arc<QuotaLimiter>),
    SeveralGcra(Box<[Arc<QuotaLimiter>]>),
    Windows(&'static Window),
}

impl std::fmt::Debug for Binding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.bound {
            Bound::Gcra(_) => "Gcra",
            Bound::SeveralGcra(_) => "SeveralGcra",
            Bound::Windows(_) => "Windows",
        })
    }
}

const STRIPES: usize = 64;

impl MemoryState for RateState {
    fn new(config: &MemoryConfig) -> Self {
        let max_keys = config.max_keys.max(1);
        RateState {
            table: Table::new(max_keys),
            clock: config.clock.clone(),
            max_keys,
            quotas: Mutex::default(),
            stripes: (0..STRIPES).map(|_| CachePadded::default()).collect(),
            hasher: ahash::RandomState::new(),
        }
    }
}

impl RateState {
    fn quota_limiter(&self, scope: &Name, policy: &Policy, index: usize) -> Arc<QuotaLimiter> {
        let suffix = policy.suffixes()[index].clone();
        let gcra = policy.gcras()[index];
        let mut quotas = self.quotas.lock();
        quotas
            .entry((scope.clone(), suffix))
            .or_insert_with(|| Arc::new(QuotaLimiter::new(gcra, self.clock.clone(), self.max_keys)))
            .clone()
    }

    pub(super) fn bind(&self, scope: &Name, policy: &Policy) -> Bound {
        match (&policy.algorithm().unit().window, policy.quotas().len()) {
            (Some(window), _) => Bound::Windows(window),
            (None, 1) => Bound::Gcra(self.quota_limiter(scope, policy, 0)),
            (None, n) => {
                let limiters: Box<[_]> = (0..n)
                    .map(|i| self.quota_limiter(scope, policy, i))
                    .collect();
                for limiter in &limiters {
                    limiter.share();
                }
                Bound::SeveralGcra(limiters)
            }
        }
    }

    /// Forgets the caller under every quota of the request's policy.
    pub(super) fn reset(&self, request: &Asked<'_>) {
        let key = request.caller.to_key();
        let _caller = self.stripe(request.scope, &key).lock();
        self.table.remove(request.scope, &key, request.policy);
        let quotas = self.quotas.lock();
        for suffix in request.policy.suffixes() {
            if let Some(limiter) = quotas.get(&(request.scope.clone(), suffix.clone())) {
                limiter.forget(&key);
            }
        }
    }

    fn stripe(&self, scope: &Name, caller: &impl std::hash::Hash) -> &Mutex<()> {
        let hash = self.hasher.hash_one((scope.as_str(), caller));
        &self.stripes[(hash >> 32) as usize % STRIPES]
    }

    #[inline]
    pub(super) fn decide(&self, request: &Asked<'_>, bound: &Bound) -> Decision {
        match bound {
            // One quota that no policy of several quotas shares: governor
            // alone decides, with no lock of ours.
            Bound::Gcra(limiter) if !limiter.is_shared() && !request.at_most => {
                let step = limiter.decide(&request.caller.to_key(), request.cost);
                let remaining = limiter.gcra().remaining(step.debt);
                gcra_decision(request.policy, 0, &step, remaining, request.cost)
            }
            bound => self.decide_other(request, bound),
        }
    }

    /// [`decide`](Self::decide) for windows, for GCRA quotas that
    /// policies of several quotas share, and for at most a cost.
    fn decide_other(&self, request: &Asked<'_>, bound: &Bound) -> Decision {
        let (policy, at_most) = (request.policy, request.at_most);
        let key = request.caller.to_key();
        // As many as `room` allows, up to the request's cost, with at most.
        let fit = |room: u64| match at_most {
            true => u32::try_from(room.min(u64::from(request.cost)))
                .unwrap_or(request.cost)
                .max(1),
            false => request.cost,
        };
        match bound {
            Bound::Gcra(limiter) => {
                let (step, cost) = {
                    let _caller = self.stripe(request.scope, &key).lock();
                    decide_one(limiter, &key, fit)
                };
                gcra_decision(policy, 0, &step, limiter.gcra().remaining(step.debt), cost)
            }
            Bound::SeveralGcra(limiters) => {
                let (steps, cost) = {
                    let _caller = self.stripe(request.scope, &key).lock();
                    let cost = match at_most {
                        true => fit(room_of_all(limiters, &key)),
                        false => request.cost,
                    };
                    (decide_all(limiters, &key, cost), cost)
                };
                let allowed = steps.iter().all(|s| s.allowed);
                let remaining: Vec<u64> = limiters
                    .iter()
                    .zip(&steps)
                    .map(|(limiter, step)| limiter.gcra().remaining(step.debt))
                    .collect();
                // Allowed: the quota with the least left; refused: the one
                // that makes the caller wait longest.
                let index = if allowed {
                    first_by(&remaining, |a, b| a < b)
                } else {
                    let retries: Vec<u64> = steps.iter().map(|s| s.retry).collect();
                    first_by(&retries, |a, b| a > b)
                };
                let step = Step {
                    allowed,
                    ..steps[index]
                };
                gcra_decision(policy, index, &step, remaining[index], cost)
            }
            Bound::Windows(window) => {
                let now_us = self.clock.now_ns() / 1000;
                let asked = (request.cost, at_most);
                let outcome = self
                    .table
                    .decide(window, request.scope, &key, policy, asked, now_us);
                decision(
                    policy,
                    outcome.allowed,
                    outcome.index,
                    outcome.remaining,
                    outcome.reset,
                    outcome.retry,
                    outcome.cost,
                )
            }
        }
    }
}

/// The index of the first value that `better` prefers to every other.
fn first_by(values: &[u64], better: impl Fn(&u64, &u64) -> bool) -> usize {
    let mut best = 0;
    for (i, value) in values.iter().enumerate() {
        if better(value, &values[best]) {
            best = i;
        }
    }
    best
}

/// Decides on one GCRA quota the cost `fit` makes of the caller's room
/// (the request's cost, or as many as fit): a try that finds the room
/// taken meanwhile (governor decides one-quota policies without our lock)
/// tries again with what is left. Each try is all or nothing, so nothing
/// is granted past the quota. Says the step and the cost decided.
fn decide_one(limiter: &QuotaLimiter, key: &CallerKey, fit: impl Fn(u64) -> u32) -> (Step, u32) {
    const TRIES: usize = 8;
    let mut cost = 0;
    for _ in 0..TRIES {
        let room = limiter.gcra().remaining(limiter.decide(key, 0).debt);
        let wanted = fit(room);
        let step = limiter.decide(key, wanted);
        if step.allowed || wanted == cost || wanted <= 1 {
            return (step, wanted);
        }
        cost = wanted;
    }
    (limiter.decide(key, 1), 1)
}

/// The units every quota of `limiters` has room for, for `key` (under the
/// caller's lock).
fn room_of_all(limiters: &[Arc<QuotaLimiter>], key: &CallerKey) -> u64 {
    let looked = decide_all(limiters, key, 0);
    limiters
        .iter()
        .zip(&looked)
        .map(|(limiter, step)| limiter.gcra().remaining(step.debt))
        .min()
        .unwrap_or(0)
}

#[inline]
fn gcra_decision(
    policy: &Policy,
    index: usize,
    step: &Step,
    remaining: u64,
    cost: u32,
) -> Decision {
    decision(
        policy,
        step.allowed,
        index,
        remaining,
        Duration::from_nanos(step.debt),
        Duration::from_nanos(step.retry),
        cost,
    )
}
