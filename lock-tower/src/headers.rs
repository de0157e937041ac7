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
pub(crate) fn ceil_secs(d: Duration) -> u64 {
    d.as_secs().saturating_add(u64::from(d.subsec_nanos() > 0))
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
pub(crate) fn quota_name(policy: &Policy, quota: &Quota) -> String {
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
///
/// The text is interned: each distinct policy text is kept once for the life
/// of the process, so the value goes out on every response without a copy
/// or a shared reference count. Policies are configuration, so the set stays
/// small.
pub(crate) fn policy_value(policy: &Policy) -> HeaderValue {
    let items: Vec<String> = policy
        .quotas()
        .iter()
        .map(|q| {
            let mut item = format!(
                "{};q={};w={}",
                sf_string(&quota_name(policy, q)),
                q.limit(),
                ceil_secs(q.period())
            );
            // A GCRA burst apart from the rate: how many at once.
            if let Some(burst) = q.burst_set() {
                item.push_str(&format!(";burst={burst}"));
            }
            item
        })
        .collect();
    let text = items.join(", ");
    match HeaderValue::from_str(&text) {
        // Checked just above, so `from_static` cannot panic.
        Ok(_) => HeaderValue::from_static(intern(text)),
        Err(_) => HeaderValue::from_static(""),
    }
}

/// The one `'static` copy of `text`.
fn intern(text: String) -> &'static str {
    static TEXTS: std::sync::OnceLock<std::sync::Mutex<std::collections::HashSet<&'static str>>> =
        std::sync::OnceLock::new();
    let mut texts = TEXTS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(text) = texts.get(text.as_str()) {
        return text;
    }
    let text: &'static str = Box::leak(text.into_boxed_str());
    texts.insert(text);
    text
}

/// The structured-field string naming each quota of `policy`, by position.
pub(crate) fn quota_labels(policy: &Policy) -> Vec<String> {
    policy
        .quotas()
        .iter()
        .map(|q| sf_string(&quota_name(policy, q)))
        .collect()
}

/// Adds to `headers` the rate-limit fields the layers send for `decision`,
/// from a limiter with `policy`: `RateLimit`, `RateLimit-Policy`, and
/// `Retry-After` when it was refused. For a response of your own, such as
/// one from a handler that asks a
/// [`RateLimiter`](lock_core::rate::RateLimiter) itself.
///
/// ```
/// # use lock_core as lock_axum; // lock_axum re-exports these modules as they are
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> lock_core::Result<()> {
/// use std::num::NonZeroU32;
/// use lock_axum::backend::MemoryBackend;
/// use lock_axum::rate::{Algorithm, Policy, Quota, RateLimiter};
///
/// let policy = Policy::new(Algorithm::Gcra).quota(Quota::per_minute(NonZeroU32::new(1).unwrap()));
/// let limiter = RateLimiter::new(MemoryBackend::new(), "export", policy)?;
/// limiter.check("user:7").await?;
/// let refused = limiter.check("user:7").await?;
/// let mut headers = http::HeaderMap::new();
/// lock_tower::headers::insert(&mut headers, limiter.policy(), &refused);
/// assert_eq!(headers["ratelimit-policy"], "\"default\";q=1;w=60");
/// assert_eq!(headers["retry-after"], "60");
/// # Ok(()) }
/// ```
pub fn insert(headers: &mut HeaderMap, policy: &Policy, decision: &Decision) {
    let labels = quota_labels(policy);
    Fields::new(&labels, &policy_value(policy), decision, false).insert_into(headers);
}

/// The rate-limit fields of one decision, built as soon as it is known, so
/// the response future carries values rather than the layer's shared state.
/// The `RateLimit` field is formatted at once; the others are kept as
/// numbers until they are inserted, which keeps the response future small.
pub(crate) struct Fields {
    ratelimit: Option<HeaderValue>,
    policy: HeaderValue,
    /// `Retry-After` in seconds; 0 when the decision was allowed (a refusal
    /// always waits at least a second).
    retry_after: u64,
    /// `X-RateLimit-Limit`, `-Remaining` and `-Reset`, when sent.
    legacy: Option<(u32, u32)>,
    reset: u64,
}

impl Fields {
    pub(crate) fn new(
        labels: &[String],
        policy_value: &HeaderValue,
        decision: &Decision,
        legacy: bool,
    ) -> Self {
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
        Fields {
            ratelimit: HeaderValue::from_maybe_shared(Bytes::from(value)).ok(),
            policy: policy_value.clone(),
            retry_after: if decision.allowed {
                0
            } else {
                retry_secs(decision.retry_after)
            },
            legacy: legacy.then_some((decision.limit, decision.remaining)),
            reset,
        }
    }

    pub(crate) fn insert_into(self, headers: &mut HeaderMap) {
        self.for_each(|name, value| {
            headers.insert(name.clone(), value);
        });
    }

    /// Hands each field to `f`, in the order [`insert_into`](Self::insert_into)
    /// adds them.
    pub(crate) fn for_each(self, mut f: impl FnMut(&HeaderName, HeaderValue)) {
        if let Some(value) = self.ratelimit {
            f(&RATELIMIT, value);
        }
        f(&RATELIMIT_POLICY, self.policy);
        if self.retry_after > 0 {
            f(&RETRY_AFTER, HeaderValue::from(self.retry_after));
        }
        if let Some((limit, remaining)) = self.legacy {
            f(&X_RATELIMIT_LIMIT, HeaderValue::from(limit));
            f(&X_RATELIMIT_REMAINING, HeaderValue::from(remaining));
            f(&X_RATELIMIT_RESET, HeaderValue::from(self.reset));
        }
    }
}

/// `Retry-After` in whole seconds, rounded up, at least 1.
pub(crate) fn retry_after(d: Duration) -> HeaderValue {
    HeaderValue::from(retry_secs(d))
}

fn retry_secs(d: Duration) -> u64 {
    ceil_secs(d).max(1)
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
        assert_eq!(ceil_secs(Duration::MAX), u64::MAX);
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
        let decision = limiter.check_now("k", 3).unwrap().unwrap();
        let mut headers = HeaderMap::new();
        insert(&mut headers, &policy, &decision);
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
