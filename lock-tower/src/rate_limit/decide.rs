//! A rate limit's settings and its decision for one request: key and cost
//! from the request, one check, and the verdict, with the failure and
//! missing-key policies applied. Shared by the tower service and the
//! framework adapters.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use bytes::Bytes;
use futures_util::future::Either;
use http::{HeaderValue, Response, StatusCode};
use lock_core::backend::MemoryBackend;
use lock_core::rate::{Caller, Checked, Decision, Deferred, RateBackend, RateLimiter};

use super::RateVerdict as Verdict;
use crate::failure::{
    Breaker, Failure, Fault, MissingKey, Named, OnBackendFailure, classify, guarded, invalid_key,
    no_key,
};
use crate::headers;
use crate::key::{KeyExtractor, Missing, RequestParts};
use crate::metrics::Metrics;
use crate::response::{plain, plain_text, unavailable};

pub(super) type CostFn = Arc<dyn Fn(RequestParts<'_>) -> u32 + Send + Sync>;
pub(super) type ExemptFn = Arc<dyn Fn(RequestParts<'_>) -> bool + Send + Sync>;
pub(super) type RefusalFn = Arc<dyn Fn(&Decision) -> Response<Bytes> + Send + Sync>;

/// A decision for a type-erased caller: ready at once, or boxed.
pub(crate) type ErasedDecision<'a> =
    Either<std::future::Ready<Verdict>, futures_util::future::BoxFuture<'a, Verdict>>;

/// What a rate limit enforces and how: what every service of one layer
/// shares, and what the layer's setters change.
pub(crate) struct Limit<B, K> {
    pub(super) limiter: RateLimiter<B>,
    pub(super) key: K,
    pub(super) cost: Option<CostFn>,
    /// Requests let through without a decision (health checks).
    pub(super) exempt: Option<ExemptFn>,
    pub(super) refusal: Option<RefusalFn>,
    pub(super) failure: Failure,
    pub(super) breaker: Arc<Breaker>,
    /// The local limiter a `Fallback` policy decides with.
    pub(super) fallback: Option<RateLimiter<MemoryBackend>>,
    pub(super) missing_key: MissingKey,
    pub(super) legacy: bool,
    pub(super) on_success: bool,
    pub(super) policy_value: HeaderValue,
    pub(super) labels: Vec<String>,
    pub(super) metrics: Arc<Metrics>,
    /// Whether a key the set-up keeps every request from having was logged.
    pub(super) warned: AtomicBool,
    /// Whether a request costing more than the policy ever allows was
    /// logged.
    pub(super) cost_warned: AtomicBool,
}

impl<B: Clone, K: Clone> Clone for Limit<B, K> {
    fn clone(&self) -> Self {
        Limit {
            limiter: self.limiter.clone(),
            key: self.key.clone(),
            cost: self.cost.clone(),
            exempt: self.exempt.clone(),
            refusal: self.refusal.clone(),
            failure: self.failure,
            breaker: self.breaker.clone(),
            fallback: self.fallback.clone(),
            missing_key: self.missing_key,
            legacy: self.legacy,
            on_success: self.on_success,
            policy_value: self.policy_value.clone(),
            labels: self.labels.clone(),
            metrics: self.metrics.clone(),
            warned: AtomicBool::new(false),
            cost_warned: AtomicBool::new(false),
        }
    }
}

/// How a decision starts: settled at once, or to ask the backend for (the
/// caller and cost checked, the key copied out of the request once).
pub(super) enum Start {
    Now(Now),
    Ask(Deferred),
}

/// A decision reached without waiting.
pub(super) enum Now {
    /// Allowed, with no fields to send.
    Allowed,
    /// Not limited at all (an exempt path): not counted either.
    Exempt,
    Decided(Decision),
    NoKey(Missing),
    /// The request costs more than the policy ever allows at once.
    TooCostly(u32),
    Fault(Fault),
}

impl<B: RateBackend, K: KeyExtractor> Limit<B, K> {
    /// Decides `request` at once when it has no key or the backend decides
    /// without waiting (in memory); otherwise hands back the check to ask
    /// the backend for. Either way lock-core is asked once, and checks the
    /// key once.
    pub(super) fn start(&self, request: RequestParts<'_>) -> Start {
        if let Some(exempt) = &self.exempt
            && exempt(request)
        {
            return Start::Now(Now::Exempt);
        }
        let cost = match &self.cost {
            None => 1,
            Some(cost) => match cost(request) {
                cost if cost > self.limiter.policy().max_cost() => {
                    return Start::Now(Now::TooCostly(cost));
                }
                cost => cost,
            },
        };
        self.key.with_caller(request, |caller| {
            let Some(caller) = caller else {
                return Start::Now(Now::NoKey(self.key.missing(request)));
            };
            if !B::DECIDES_AT_ONCE {
                return self.defer(caller, cost);
            }
            // A backend that always answers at once (memory) is asked
            // alone, on a path kept apart from the one above: sharing it
            // made this one, the layer's whole cost in memory, slower.
            let checked = self.limiter.check_now(caller, cost);
            // Looked at in place: moving the decision out only to drop it
            // would copy it.
            if let Some(Ok(decision)) = &checked
                && decision.allowed
                && !self.on_success
            {
                return Start::Now(Now::Allowed);
            }
            match checked {
                Some(Ok(decision)) => Start::Now(Now::Decided(decision)),
                Some(Err(error)) => Start::Now(self.failed_at_once(caller, cost, error)),
                None => self.defer(caller, cost),
            }
        })
    }

    /// Checks the caller and cost once and hands back the check to wait
    /// for (or what was settled at once: a bad key or cost).
    fn defer(&self, caller: Caller<'_>, cost: u32) -> Start {
        match self.limiter.check_or_defer(caller, cost) {
            Checked::Later(deferred) => Start::Ask(deferred),
            Checked::Now(Ok(decision)) => Start::Now(Now::Decided(decision)),
            Checked::Now(Err(error)) => Start::Now(self.failed_at_once(caller, cost, error)),
        }
    }

    /// A check answered at once with an error: a bad key or cost, or (from
    /// a backend of one's own) a failure, met with the failure policy as
    /// on the asynchronous path.
    #[cold]
    fn failed_at_once(&self, caller: Caller<'_>, cost: u32, error: lock_core::Error) -> Now {
        match classify(error, self.failure, &self.metrics, self.named()) {
            Fault::InvalidKey(reason) => Now::NoKey(self.invalid(&caller.to_string(), reason)),
            Fault::Backend(OnBackendFailure::Fallback) => {
                self.breaker.trip();
                let fallback = self
                    .fallback
                    .as_ref()
                    .and_then(|f| f.check_now(caller, cost));
                match fallback {
                    Some(Ok(decision)) => Now::Decided(decision),
                    _ => Now::Fault(Fault::Backend(OnBackendFailure::FailClosed)),
                }
            }
            Fault::Backend(policy) => {
                self.breaker.trip();
                Now::Fault(Fault::Backend(policy))
            }
            fault => Now::Fault(fault),
        }
    }

    /// The verdict of a decision reached without waiting.
    pub(super) fn settle(&self, now: Now) -> Verdict {
        match now {
            Now::Allowed => {
                self.metrics.count_allowed();
                Verdict::Allow(None)
            }
            Now::Exempt => Verdict::Allow(None),
            Now::Decided(decision) => self.verdict(decision),
            Now::NoKey(missing) => self.no_key(&missing),
            Now::TooCostly(cost) => self.too_costly(cost),
            Now::Fault(fault) => self.fault(fault),
        }
    }

    /// A request that could never be allowed: a 400 that says why, as the
    /// cost most often comes from the request (a batch's size). Should it
    /// come from the set-up instead, the log says so once.
    #[cold]
    fn too_costly(&self, cost: u32) -> Verdict {
        self.metrics.count_refused();
        let most = self.limiter.policy().max_cost();
        let named = self.named();
        if !self
            .cost_warned
            .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            tracing::warn!(
                layer = named.layer,
                scope = %named.scope,
                cost,
                most,
                "a request cost more than {} ever allows at once, and was answered 400; \
                 if such costs come from the set-up rather than from clients, lower them \
                 or raise the smallest quota's limit or burst",
                named.the()
            );
        }
        Verdict::Respond(plain_text(
            StatusCode::BAD_REQUEST,
            format!(
                "This request costs {cost}, more than {} ever allows at once ({most}): \
                 split it into smaller requests.\n",
                named.the()
            ),
        ))
    }

    /// The decision `deferred` waits for from the backend, bounded by the
    /// decision timeout, with the failure policy applied.
    pub(super) async fn decide(&self, deferred: Deferred) -> Verdict {
        let check = self.limiter.check_deferred(&deferred);
        match guarded(
            self.failure,
            &self.breaker,
            &self.metrics,
            self.named(),
            check,
        )
        .await
        {
            Ok(decision) => self.verdict(decision),
            Err(Fault::InvalidKey(reason)) => {
                self.no_key(&self.invalid(&deferred.caller().to_string(), reason))
            }
            Err(Fault::Backend(OnBackendFailure::Fallback)) => {
                let (caller, cost) = (deferred.caller(), deferred.cost());
                let fallback = self.fallback.as_ref().map(|f| f.check_cost(caller, cost));
                match fallback {
                    Some(fallback) => match fallback.await {
                        Ok(decision) => self.verdict(decision),
                        Err(_) => self.fault(Fault::Backend(OnBackendFailure::FailClosed)),
                    },
                    None => self.fault(Fault::Backend(OnBackendFailure::FailClosed)),
                }
            }
            Err(fault) => self.fault(fault),
        }
    }

    /// Extracts the key and cost of `request` and decides.
    pub(crate) async fn decide_for(&self, request: RequestParts<'_>) -> Verdict {
        match self.start(request) {
            Start::Now(now) => self.settle(now),
            Start::Ask(deferred) => self.decide(deferred).await,
        }
    }

    /// As [`decide_for`](Self::decide_for), for type-erased callers: a
    /// verdict reached at once comes back ready, without boxing a future.
    pub(crate) fn decide_erased(&self, request: RequestParts<'_>) -> ErasedDecision<'_> {
        match self.start(request) {
            Start::Now(now) => Either::Left(std::future::ready(self.settle(now))),
            Start::Ask(deferred) => Either::Right(Box::pin(self.decide(deferred))),
        }
    }

    fn verdict(&self, decision: Decision) -> Verdict {
        if decision.allowed {
            self.metrics.count_allowed();
            Verdict::Allow(Some(decision))
        } else {
            self.metrics.count_refused();
            let mut response = match &self.refusal {
                Some(refusal) => refusal(&decision),
                None => plain(StatusCode::TOO_MANY_REQUESTS, "Too Many Requests\n"),
            };
            self.apply_headers(response.headers_mut(), &decision);
            Verdict::Limited { decision, response }
        }
    }

    /// This layer, as its logs and answers name it.
    fn named(&self) -> Named<'_> {
        Named {
            layer: "rate-limit",
            what: "rate limit",
            scope: self.limiter.scope().as_str(),
        }
    }

    /// Why the request's `key` is not one this limit can use.
    #[cold]
    fn invalid(&self, key: &str, reason: &str) -> Missing {
        invalid_key(self.named(), key, reason)
    }

    fn no_key(&self, missing: &Missing) -> Verdict {
        self.metrics.count_missing_key();
        match no_key(self.missing_key, missing, self.named(), &self.warned) {
            None => Verdict::Allow(None),
            Some(response) => Verdict::Respond(response),
        }
    }

    /// The verdict for a call that brought no decision.
    fn fault(&self, fault: Fault) -> Verdict {
        match fault {
            // Answered where the key is known; kept for completeness.
            Fault::InvalidKey(reason) => self.no_key(&Missing::request(format!(
                "the key of the `{}` rate limit {reason}",
                self.limiter.scope()
            ))),
            Fault::Misconfigured => Verdict::Respond(plain(
                StatusCode::INTERNAL_SERVER_ERROR,
                "Rate limit misconfigured\n",
            )),
            Fault::Backend(OnBackendFailure::FailOpen) => {
                self.metrics.count_allowed();
                Verdict::Allow(None)
            }
            Fault::Backend(_) => {
                self.metrics.count_refused();
                Verdict::Respond(unavailable())
            }
        }
    }

    /// The fields a response to `decision` carries, if any.
    pub(crate) fn fields(&self, decision: &Decision) -> Option<headers::Fields> {
        (!decision.allowed || self.on_success)
            .then(|| headers::Fields::new(&self.labels, &self.policy_value, decision, self.legacy))
    }

    pub(crate) fn apply_headers(&self, headers: &mut http::HeaderMap, decision: &Decision) {
        if let Some(fields) = self.fields(decision) {
            fields.insert_into(headers);
        }
    }
}

impl<B: RateBackend, K: KeyExtractor> super::future::MakeFields for Limit<B, K> {
    fn fields(&self, decision: &Decision) -> Option<headers::Fields> {
        Limit::fields(self, decision)
    }
}
