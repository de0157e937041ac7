//! The layer's asks of lock-core, counted through a backend that waits as
//! Redis does.

use std::convert::Infallible;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use http::{HeaderName, Request, Response, StatusCode};
use lock_core::backend::MemoryBackend;
use lock_core::rate::backend::RateRequest;
use lock_core::rate::{Algorithm, Caller, Decision, Policy, Quota, RateBackend, RateLimiter};
use tower::{Layer, ServiceExt, service_fn};

use super::RateLimitLayer;
use crate::key::HeaderKey;

/// The memory backend, made to answer as Redis does: never at once. Counts
/// the asks and keeps the callers the backend was asked about.
#[derive(Clone, Default)]
struct Waiting {
    memory: MemoryBackend,
    now: Arc<AtomicUsize>,
    asked: Arc<std::sync::Mutex<Vec<String>>>,
}

impl RateBackend for Waiting {
    async fn check(&self, request: &RateRequest<'_>) -> lock_core::Result<Decision> {
        let kind = match request.caller {
            Caller::Text(_) => "text",
            _ => "address",
        };
        self.asked
            .lock()
            .unwrap()
            .push(format!("{kind} {}", request.caller));
        self.memory.check(request).await
    }

    fn check_now(&self, _: &RateRequest<'_>) -> Option<lock_core::Result<Decision>> {
        self.now.fetch_add(1, Ordering::Relaxed);
        None
    }

    async fn reset(&self, request: &RateRequest<'_>) -> lock_core::Result<()> {
        self.memory.reset(request).await
    }
}

/// Each decision on a backend that waits asks it once, about the caller
/// the key extractor found; a bad key is answered without asking it.
#[tokio::test(flavor = "current_thread")]
async fn a_waiting_backend_is_asked_once_per_decision() {
    let backend = Waiting::default();
    let policy = Policy::new(Algorithm::Gcra).quota(Quota::per_minute(NonZeroU32::new(2).unwrap()));
    let limiter = RateLimiter::new(backend.clone(), "api", policy).unwrap();
    let layer = RateLimitLayer::new(limiter, HeaderKey::new(HeaderName::from_static("x-key")));
    let service = layer.layer(service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(Response::new(Bytes::new()))
    }));
    let call = |key: &'static str| {
        let request = Request::builder().header("x-key", key).body(()).unwrap();
        service.clone().oneshot(request)
    };
    let statuses = [
        call("user:1").await.unwrap().status(),
        call("user:1").await.unwrap().status(),
        call("user:1").await.unwrap().status(),
        call("192.0.2.7").await.unwrap().status(),
        call("a{b").await.unwrap().status(),
    ];
    assert_eq!(
        statuses,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS,
            StatusCode::OK,
            StatusCode::BAD_REQUEST
        ]
    );
    assert_eq!(backend.now.load(Ordering::Relaxed), 4);
    assert_eq!(
        *backend.asked.lock().unwrap(),
        [
            "text user:1",
            "text user:1",
            "text user:1",
            "address 192.0.2.7"
        ]
    );
}

/// A backend that fails in its answer at once.
#[derive(Clone, Default)]
struct FailingAtOnce {
    checks: Arc<AtomicUsize>,
}

impl RateBackend for FailingAtOnce {
    async fn check(&self, _: &RateRequest<'_>) -> lock_core::Result<Decision> {
        self.checks.fetch_add(1, Ordering::Relaxed);
        Err(lock_core::Error::Timeout(std::time::Duration::ZERO))
    }

    fn check_now(&self, _: &RateRequest<'_>) -> Option<lock_core::Result<Decision>> {
        Some(Err(lock_core::Error::Timeout(std::time::Duration::ZERO)))
    }

    async fn reset(&self, _: &RateRequest<'_>) -> lock_core::Result<()> {
        Ok(())
    }
}

/// A failure in an answer at once meets the failure policy, counted once,
/// the backend not asked again.
#[tokio::test(flavor = "current_thread")]
async fn a_failure_at_once_meets_the_failure_policy() {
    use crate::failure::OnBackendFailure;
    let one = Policy::new(Algorithm::Gcra).quota(Quota::per_minute(NonZeroU32::MIN));
    for (policy, expected) in [
        (
            OnBackendFailure::Fallback,
            [StatusCode::OK, StatusCode::TOO_MANY_REQUESTS],
        ),
        (OnBackendFailure::FailOpen, [StatusCode::OK, StatusCode::OK]),
        (
            OnBackendFailure::FailClosed,
            [
                StatusCode::SERVICE_UNAVAILABLE,
                StatusCode::SERVICE_UNAVAILABLE,
            ],
        ),
    ] {
        let backend = FailingAtOnce::default();
        let limiter = RateLimiter::new(backend.clone(), "api", one.clone()).unwrap();
        let layer = RateLimitLayer::new(limiter, HeaderKey::new(HeaderName::from_static("x-key")))
            .on_backend_failure(policy);
        let metrics = layer.metrics();
        let service = layer.layer(service_fn(|_: Request<()>| async {
            Ok::<_, Infallible>(Response::new(Bytes::new()))
        }));
        let mut statuses = Vec::new();
        for _ in 0..2 {
            let request = Request::builder().header("x-key", "k").body(()).unwrap();
            statuses.push(service.clone().oneshot(request).await.unwrap().status());
        }
        assert_eq!(statuses, expected, "{policy:?}");
        assert_eq!(metrics.backend_failures(), 2, "{policy:?}");
        assert_eq!(backend.checks.load(Ordering::Relaxed), 0, "{policy:?}");
    }
}
