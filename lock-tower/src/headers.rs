//! Rate-limit response fields: `RateLimit` and `RateLimit-Policy` (IETF
//! httpapi ratelimit-headers draft, named-policy structured-field form),
//! `Retry-After`, and optionally the legacy `X-RateLimit-*` trio.

use std::time::Duration;

use bytes::Bytes;
use http::header::RETRY_AFTER;
use http::{HeaderMap, HeaderName, HeaderValue};
use lock_core::rate::{Decision, Policy, Quota};

/// `RateLimit`.
pub static RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
/// `RateLimit-Policy`.
pub static RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `X-RateLimit-Limit`.
pub static X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
/// `X-RateLimit-Remaining`.
pub static X_RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
/// `X-RateLimit-Reset`.
pub static X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

/// Whole seconds, rounded up (so waiting that long is always enough).
pub fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// A structured-field string: printable ASCII, with `"` and `\` escaped.
fn sf_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => out.push('_'),
        }
    }
    out.push('"');
    out
}

/// The name a quota is shown under: its own, else `default` (one quota) or
/// `q<index>`.
pub fn quota_name(policy: &Policy, quota: &Quota) -> String {
    if let Some(name) = quota.name() {
        return name.to_owned();
    }
    if policy.quotas().len() == 1 {
        return "default".to_owned();
    }
    let index = policy.quotas().iter().position(|q| q == quota).unwrap_or(0);
    format!("q{index}")
}

/// `RateLimit-Policy: "name";q=<limit>;w=<window seconds>, ...` for every quota.
pub fn policy_value(policy: &Policy) -> HeaderValue {
    let items: Vec<String> = policy
        .quotas()
        .iter()
        .map(|q| {
            format!(
                "{};q={};w={}",
                sf_string(&quota_name(policy, q)),
                q.limit(),
                ceil_secs(q.period())
            )
        })
        .collect();
    HeaderValue::from_str(&items.join(", ")).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// The structured-field string naming each quota of `policy`, by position.
pub fn quota_labels(policy: &Policy) -> Vec<String> {
    policy
        .quotas()
        .iter()
        .map(|q| sf_string(&quota_name(policy, q)))
        .collect()
}

/// Adds the rate-limit fields of `decision` to `headers`; `labels` are the
/// policy's [`quota_labels`].
pub fn apply(
    headers: &mut HeaderMap,
    labels: &[String],
    policy_value: &HeaderValue,
    decision: &Decision,
    legacy: bool,
) {
    let reset = ceil_secs(decision.reset_after);
    let name = labels
        .get(decision.quota_index)
        .map_or("\"default\"", String::as_str);
    // `<name>;r=<remaining>;t=<reset>`, built in one exactly sized buffer
    // that becomes the header value without a copy.
    let (mut r, mut t) = (itoa::Buffer::new(), itoa::Buffer::new());
    let (r, t) = (r.format(decision.remaining), t.format(reset));
    let mut value = Vec::with_capacity(name.len() + r.len() + t.len() + 6);
    for part in [name, ";r=", r, ";t=", t] {
        value.extend_from_slice(part.as_bytes());
    }
    if let Ok(value) = HeaderValue::from_maybe_shared(Bytes::from(value)) {
        headers.insert(RATELIMIT.clone(), value);
    }
    headers.insert(RATELIMIT_POLICY.clone(), policy_value.clone());
    if !decision.allowed {
        headers.insert(RETRY_AFTER, retry_after(decision.retry_after));
    }
    if legacy {
        headers.insert(X_RATELIMIT_LIMIT.clone(), HeaderValue::from(decision.limit));
        headers.insert(
            X_RATELIMIT_REMAINING.clone(),
            HeaderValue::from(decision.remaining),
        );
        headers.insert(X_RATELIMIT_RESET.clone(), HeaderValue::from(reset));
    }
}

/// `Retry-After` in whole seconds, rounded up, at least 1.
pub fn retry_after(d: Duration) -> HeaderValue {
    HeaderValue::from(ceil_secs(d).max(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::num::NonZeroU32;

    #[test]
    fn seconds_round_up() {
        assert_eq!(ceil_secs(Duration::from_millis(1)), 1);
        assert_eq!(ceil_secs(Duration::from_secs(2)), 2);
        assert_eq!(ceil_secs(Duration::from_millis(2001)), 3);
        assert_eq!(retry_after(Duration::ZERO), HeaderValue::from(1));
    }

    #[test]
    fn ratelimit_field_carries_remaining_and_reset() {
        let policy = Policy::new(lock_core::rate::Algorithm::Gcra)
            .quota(Quota::per_minute(NonZeroU32::new(10).unwrap()));
        let limiter = lock_core::rate::RateLimiter::new(
            lock_core::backend::MemoryBackend::new(),
            "h",
            policy.clone(),
        )
        .unwrap();
        let decision = limiter.check_cost_now("k", 3).unwrap().unwrap();
        let mut headers = HeaderMap::new();
        apply(
            &mut headers,
            &quota_labels(&policy),
            &policy_value(&policy),
            &decision,
            false,
        );
        assert_eq!(headers[&RATELIMIT], "\"default\";r=7;t=18");
        assert_eq!(headers[&RATELIMIT_POLICY], "\"default\";q=10;w=60");
        assert!(headers.get(RETRY_AFTER).is_none());
    }

    #[test]
    fn policy_field_names_every_quota() {
        let policy = Policy::new(lock_core::rate::Algorithm::Gcra)
            .quota(Quota::per_second(NonZeroU32::new(10).unwrap()).named("burst \"x\""))
            .quota(Quota::per_hour(NonZeroU32::new(1000).unwrap()));
        assert_eq!(
            policy_value(&policy),
            "\"burst \\\"x\\\"\";q=10;w=1, \"q1\";q=1000;w=3600"
        );
    }
}
