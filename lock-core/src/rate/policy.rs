//! Policies: an algorithm and the quotas a rate limiter enforces with it.

use std::sync::Arc;

use super::algorithm::Algorithm;
use super::algorithm::gcra::Gcra;
use super::quota::Quota;
use crate::error::{Error, Result};

/// What a [`RateLimiter`](super::RateLimiter) enforces: an algorithm and one
/// or more quotas, all checked in one atomic call.
///
/// ```
/// # use lock_core as lock_axum; // lock_axum re-exports these modules as they are
/// use std::num::NonZeroU32;
/// use lock_axum::rate::{Algorithm, Policy, Quota};
///
/// let policy = Policy::new(Algorithm::Gcra)
///     .quota(Quota::per_second(NonZeroU32::new(10).unwrap()))
///     .quota(Quota::per_hour(NonZeroU32::new(1000).unwrap()));
/// assert_eq!(policy.quotas().len(), 2);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    algorithm: Algorithm,
    quotas: Vec<Quota>,
    /// Key suffix of each quota, built once.
    suffixes: Vec<Arc<str>>,
    /// GCRA timing of each quota.
    gcras: Vec<Gcra>,
    /// The smallest limit, kept as quotas are added.
    max_cost: u32,
}

/// Most quotas in one policy.
pub const MAX_QUOTAS: usize = 16;

impl Policy {
    /// A policy with no quotas yet.
    pub fn new(algorithm: Algorithm) -> Self {
        Policy {
            algorithm,
            quotas: Vec::new(),
            suffixes: Vec::new(),
            gcras: Vec::new(),
            max_cost: 0,
        }
    }

    /// Adds a quota.
    pub fn quota(mut self, quota: Quota) -> Self {
        let mut suffix = format!(
            "{}:{}:{}",
            self.algorithm.unit().tag,
            quota.limit(),
            quota.period_ms()
        );
        if let Some(burst) = quota.burst_set() {
            suffix.push_str(&format!(":b{burst}"));
        }
        self.suffixes.push(Arc::from(suffix));
        self.gcras
            .push(Gcra::new(quota.limit(), quota.capacity(), quota.period()));
        self.max_cost = if self.quotas.is_empty() {
            quota.capacity()
        } else {
            self.max_cost.min(quota.capacity())
        };
        self.quotas.push(quota);
        self
    }

    /// The algorithm.
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// The quotas.
    pub fn quotas(&self) -> &[Quota] {
        &self.quotas
    }

    /// The smallest capacity (burst, or else limit): the largest cost one
    /// call may ask for.
    pub fn max_cost(&self) -> u32 {
        self.max_cost
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if self.quotas.is_empty() {
            return Err(Error::invalid_argument(
                "policy",
                "needs at least one quota",
            ));
        }
        if self.quotas.len() > MAX_QUOTAS {
            return Err(Error::invalid_argument("policy", "at most 16 quotas"));
        }
        // Two such quotas would be one limit kept twice: on Redis, one
        // key counted twice.
        for (i, suffix) in self.suffixes.iter().enumerate() {
            if self.suffixes[..i].contains(suffix) {
                return Err(Error::invalid_argument(
                    "policy",
                    "has two quotas of the same limit, period and burst: keep one \
                     (they are one limit, whatever their names)",
                ));
            }
        }
        let check = self.algorithm.unit().check_quota;
        self.quotas.iter().try_for_each(check)
    }

    /// Key suffix of each quota: `<algorithm>:<limit>:<period ms>`.
    pub(crate) fn suffixes(&self) -> &[Arc<str>] {
        &self.suffixes
    }

    /// GCRA timing of each quota.
    pub(crate) fn gcras(&self) -> &[Gcra] {
        &self.gcras
    }

    #[inline]
    pub(crate) fn check_cost(&self, cost: u32) -> Result<()> {
        if cost > self.max_cost() {
            return Err(Error::invalid_argument(
                "cost",
                "larger than the smallest quota's limit (it could never be allowed)",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;
    use std::time::Duration;

    use super::*;

    fn nz(n: u32) -> NonZeroU32 {
        NonZeroU32::new(n).unwrap()
    }

    #[test]
    fn policies_are_validated() {
        assert!(Policy::new(Algorithm::Gcra).validate().is_err());
        let too_fine = Policy::new(Algorithm::Gcra)
            .quota(Quota::new(nz(2000), Duration::from_millis(1)).unwrap());
        assert!(too_fine.validate().is_err());
        let ok = Policy::new(Algorithm::FixedWindow).quota(Quota::per_second(nz(3)));
        assert!(ok.validate().is_ok());
        assert!(ok.check_cost(3).is_ok());
        assert!(ok.check_cost(4).is_err());
    }
}
