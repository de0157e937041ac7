//! The table of window state (fixed and sliding windows, any number of
//! quotas): one entry per (scope, caller, quota), sharded by (scope,
//! caller) so that every quota of one caller is decided under one lock.
//!
//! Expired entries are swept out as the table goes; the number of callers
//! is capped. At the cap, a caller the table does not know yet is decided
//! on one overflow caller shared by all such callers, with the same
//! policy: a flood of distinct keys neither grows memory nor resets the
//! limits of callers already known. While the overflow caller's entries
//! live, a caller given a place starts from them, so that what it took
//! there stays taken.

use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_utils::CachePadded;
use hashbrown::{Equivalent, HashMap};
use parking_lot::Mutex;

use crate::name::Name;
use crate::rate::algorithm::Window;
use crate::rate::algorithm::window::{self, Entry, Outcome};
use crate::rate::caller::CallerKey;
use crate::rate::policy::Policy;

/// Where one quota of one caller is kept.
#[derive(PartialEq, Eq)]
struct Key {
    scope: Name,
    caller: CallerKey,
    suffix: Arc<str>,
}

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        Probe {
            scope: self.scope.as_str(),
            caller: &self.caller,
            suffix: &self.suffix,
        }
        .hash(state);
    }
}

/// A [`Key`], borrowed for lookups.
#[derive(Hash)]
struct Probe<'a> {
    scope: &'a str,
    caller: &'a CallerKey,
    suffix: &'a str,
}

impl Equivalent<Key> for Probe<'_> {
    fn equivalent(&self, key: &Key) -> bool {
        self.scope == key.scope.as_str()
            && *self.caller == key.caller
            && self.suffix == &*key.suffix
    }
}

struct Shard {
    entries: HashMap<Key, Entry, ahash::RandomState>,
    decisions: u64,
    /// No entry expires before this (Unix microseconds; it may be lower
    /// than the first expiry, never higher): a full shard sweeps for a
    /// newcomer only from then on, so that a flood of new callers does
    /// not make every one of them walk a shard with nothing to drop.
    first_expiry_us: u64,
}

impl Default for Shard {
    fn default() -> Self {
        Shard {
            entries: HashMap::default(),
            decisions: 0,
            first_expiry_us: u64::MAX,
        }
    }
}

/// The caller every caller the table has no room for shares, in each
/// scope. No key is empty, so it names no real caller.
fn overflow_caller() -> CallerKey {
    CallerKey::Text(Default::default())
}

/// Window state of one memory backend.
pub(super) struct Table {
    shards: Box<[CachePadded<Mutex<Shard>>]>,
    /// The overflow caller's entries, of every scope: a shard of their own,
    /// which a caller's shard locks before (never after), whatever the
    /// scopes.
    overflow: CachePadded<Mutex<Shard>>,
    hasher: ahash::RandomState,
    /// The cap on each shard's entries: the table's cap divided evenly.
    shard_cap: usize,
    /// Until when (Unix microseconds) an entry of the overflow caller may
    /// live: until then a newcomer starts from the overflow's entries.
    /// Read by every newcomer, written only by callers over the cap.
    overflow_until_us: AtomicU64,
}

/// A shard sweeps out its expired entries once in this many decisions.
const SWEEP_EVERY: u64 = 1024;

impl Table {
    /// A table of at most `max_keys` entries.
    pub(super) fn new(max_keys: usize) -> Self {
        let threads = std::thread::available_parallelism().map_or(1, usize::from);
        // Enough shards that threads seldom meet, few enough that each
        // holds many entries (so that shards fill about together).
        let shards = (threads * 4)
            .next_power_of_two()
            .min((max_keys / 1024).max(1).next_power_of_two())
            .min(64);
        Table {
            shards: (0..shards).map(|_| CachePadded::default()).collect(),
            overflow: CachePadded::default(),
            hasher: ahash::RandomState::new(),
            shard_cap: (max_keys / shards).max(1),
            overflow_until_us: AtomicU64::new(0),
        }
    }

    fn shard(&self, scope: &Name, caller: &CallerKey) -> &Mutex<Shard> {
        let hash = self.hasher.hash_one((scope.as_str(), caller));
        &self.shards[(hash >> 32) as usize & (self.shards.len() - 1)]
    }

    /// Decides `cost` (with `at_most`, up to `cost`: see [`window::run`])
    /// for `caller` under every quota of `policy` at `now_us` (Unix
    /// microseconds), and stores what changed.
    pub(super) fn decide(
        &self,
        window: &Window,
        scope: &Name,
        caller: &CallerKey,
        policy: &Policy,
        (cost, at_most): (u32, bool),
        now_us: u64,
    ) -> Outcome {
        let asked = (cost, at_most);
        let mut shard = self.shard(scope, caller).lock();
        let probe = |suffix| Probe {
            scope: scope.as_str(),
            caller,
            suffix,
        };
        // The quotas the caller has no entry for, a bit each (a policy has
        // at most 16).
        let mut missing = 0u32;
        for (i, suffix) in policy.suffixes().iter().enumerate() {
            if !shard.entries.contains_key(&probe(suffix)) {
                missing |= 1 << i;
            }
        }
        let unknown = missing == (1 << policy.suffixes().len()) - 1;
        if unknown && shard.entries.len() >= self.shard_cap && now_us >= shard.first_expiry_us {
            self.sweep(&mut shard, now_us);
        }
        let full = unknown && shard.entries.len() >= self.shard_cap;
        if full || (missing != 0 && now_us < self.overflow_until_us.load(Ordering::Acquire)) {
            // The overflow caller has a shard of its own, always locked
            // after the caller's: the caller's stays locked while the
            // overflow decides or is read, so that a caller's decisions
            // there are all over before it can be given entries of its
            // own, which start from the overflow's.
            let mut overflow = self.overflow.lock();
            let shared = overflow_caller();
            if full {
                overflow.decisions += 1;
                if overflow.decisions.is_multiple_of(SWEEP_EVERY) {
                    self.sweep(&mut overflow, now_us);
                }
                let outcome =
                    decide_in(window, &mut overflow, scope, &shared, policy, asked, now_us);
                let until = outcome.writes.iter().flatten().map(|e| e.expires_us).max();
                self.overflow_until_us
                    .fetch_max(until.unwrap_or(0), Ordering::AcqRel);
                return outcome;
            }
            // A quota the caller has no entry for starts where the
            // overflow caller stands in it: the caller may have been one
            // of those that shared it a moment ago, and what it took there
            // must not come back with a place of its own.
            let seeds: Vec<(Arc<str>, Entry)> = policy
                .suffixes()
                .iter()
                .enumerate()
                .filter(|(i, _)| missing & (1 << i) != 0)
                .filter_map(|(_, suffix)| {
                    let probe = Probe {
                        scope: scope.as_str(),
                        caller: &shared,
                        suffix,
                    };
                    let entry = overflow.entries.get(&probe)?;
                    (entry.expires_us > now_us).then(|| (suffix.clone(), *entry))
                })
                .collect();
            drop(overflow);
            for (suffix, entry) in seeds {
                shard.first_expiry_us = shard.first_expiry_us.min(entry.expires_us);
                let key = Key {
                    scope: scope.clone(),
                    caller: caller.clone(),
                    suffix,
                };
                shard.entries.insert(key, entry);
            }
        }
        shard.decisions += 1;
        if shard.decisions.is_multiple_of(SWEEP_EVERY) {
            self.sweep(&mut shard, now_us);
        }
        decide_in(window, &mut shard, scope, caller, policy, asked, now_us)
    }

    /// Forgets `caller` under every quota of `policy`.
    pub(super) fn remove(&self, scope: &Name, caller: &CallerKey, policy: &Policy) {
        let mut shard = self.shard(scope, caller).lock();
        for suffix in policy.suffixes() {
            let probe = Probe {
                scope: scope.as_str(),
                caller,
                suffix,
            };
            shard.entries.remove(&probe);
        }
    }

    /// Drops expired entries, and gives back the room they took once the
    /// shard is mostly empty.
    #[cold]
    fn sweep(&self, shard: &mut Shard, now_us: u64) {
        let mut first = u64::MAX;
        shard.entries.retain(|_, entry| {
            let live = entry.expires_us > now_us;
            if live {
                first = first.min(entry.expires_us);
            }
            live
        });
        shard.first_expiry_us = first;
        let live = shard.entries.len();
        shard.entries.shrink_to(live.saturating_mul(4));
    }

    /// Live entries, for tests.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        let overflow = self.overflow.lock().entries.len();
        overflow
            + self
                .shards
                .iter()
                .map(|s| s.lock().entries.len())
                .sum::<usize>()
    }
}

fn decide_in(
    window: &Window,
    shard: &mut Shard,
    scope: &Name,
    caller: &CallerKey,
    policy: &Policy,
    (cost, at_most): (u32, bool),
    now_us: u64,
) -> Outcome {
    let probe = |suffix| Probe {
        scope: scope.as_str(),
        caller,
        suffix,
    };
    let slots: Vec<Option<Entry>> = policy
        .suffixes()
        .iter()
        .map(|suffix| {
            shard
                .entries
                .get(&probe(suffix))
                .filter(|entry| entry.expires_us > now_us)
                .copied()
        })
        .collect();
    let outcome = window::run(window, policy.quotas(), &slots, cost, at_most, now_us);
    for (suffix, write) in policy.suffixes().iter().zip(&outcome.writes) {
        let Some(entry) = *write else { continue };
        shard.first_expiry_us = shard.first_expiry_us.min(entry.expires_us);
        match shard.entries.get_mut(&probe(suffix)) {
            Some(stored) => *stored = entry,
            None => {
                let key = Key {
                    scope: scope.clone(),
                    caller: caller.clone(),
                    suffix: suffix.clone(),
                };
                shard.entries.insert(key, entry);
            }
        }
    }
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rate::{Algorithm, Quota};
    use std::num::NonZeroU32;

    fn window(policy: &Policy) -> &'static Window {
        policy
            .algorithm()
            .unit()
            .window
            .as_ref()
            .expect("a window algorithm")
    }

    fn hourly(algorithm: Algorithm, limit: u32) -> Policy {
        Policy::new(algorithm).quota(Quota::per_hour(NonZeroU32::new(limit).unwrap()))
    }

    /// A flood of ten times the cap in new callers keeps the table at its
    /// cap, and does not reset the limit of a caller it already knew.
    #[test]
    fn a_flood_of_new_callers_leaves_known_ones_alone() {
        let table = Table::new(1000);
        let scope = Name::new("scope").unwrap();
        let policy = hourly(Algorithm::FixedWindow, 2);
        let known = CallerKey::Text("known".into());
        assert!(
            table
                .decide(window(&policy), &scope, &known, &policy, (2, false), 0)
                .allowed
        );
        for i in 0..10_000 {
            table.decide(
                window(&policy),
                &scope,
                &CallerKey::V4(i),
                &policy,
                (1, false),
                1,
            );
        }
        // The cap, plus the overflow caller's entry.
        assert!(table.len() <= 1001, "{} entries", table.len());
        assert!(
            !table
                .decide(window(&policy), &scope, &known, &policy, (1, false), 2)
                .allowed
        );
    }

    /// Expired entries are swept as the table goes, and the memory they
    /// took is given back.
    #[test]
    fn expired_entries_are_swept() {
        let table = Table::new(1_000_000);
        let scope = Name::new("scope").unwrap();
        let policy = Policy::new(Algorithm::FixedWindow).quota(
            Quota::new(
                NonZeroU32::new(5).unwrap(),
                std::time::Duration::from_millis(10),
            )
            .unwrap(),
        );
        for i in 0..20_000 {
            table.decide(
                window(&policy),
                &scope,
                &CallerKey::V4(i),
                &policy,
                (1, false),
                0,
            );
        }
        // One caller per shard, so that every shard sweeps whatever the
        // number of shards this machine's cores give.
        let later = 1_000_000;
        let mut callers: Vec<CallerKey> = Vec::new();
        let mut next = 1_000_000u32;
        while callers.len() < table.shards.len() {
            let caller = CallerKey::V4(next);
            next += 1;
            let shard = table.shard(&scope, &caller) as *const _;
            if !callers
                .iter()
                .any(|known| std::ptr::eq(table.shard(&scope, known), shard))
            {
                callers.push(caller);
            }
        }
        for caller in &callers {
            for _ in 0..SWEEP_EVERY {
                table.decide(window(&policy), &scope, caller, &policy, (1, false), later);
            }
        }
        assert!(
            table.len() <= table.shards.len(),
            "{} entries after the sweep",
            table.len()
        );
    }
}
