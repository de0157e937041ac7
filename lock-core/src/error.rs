//! The one error type of this crate.
//!
//! "Busy" (a lock held by someone else) and "limited" (a rate limit reached) are
//! *values*, not errors: [`Error`] is only for bad input and for a backend that
//! failed or did not answer in time.

use std::time::Duration;

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in a primitive.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A user-supplied name (lock name, key prefix, ...) was rejected.
    #[error("invalid name {name:?}: {reason}")]
    InvalidName {
        /// The rejected name (cut to 64 characters).
        name: String,
        /// Why it was rejected.
        reason: &'static str,
    },
    /// An argument was out of range (zero TTL, zero quota, ...).
    #[error("invalid argument `{argument}`: {reason}")]
    InvalidArgument {
        /// Which argument.
        argument: &'static str,
        /// Why it was rejected.
        reason: &'static str,
    },
    /// The backend did not answer within the configured timeout.
    #[error("backend did not answer within {0:?}")]
    Timeout(Duration),
    /// The backend failed: Redis refused a command or a connection, a
    /// connection broke, or a URL was bad. The client library's own error
    /// is the [`source`](std::error::Error::source).
    #[error("backend error: {0}")]
    Backend(#[source] BackendError),
    /// Too few of a Redlock's servers answered (alike) to make a majority:
    /// the outcome is unknown.
    #[error("only {answered} servers answered alike; a majority needs {needed}")]
    NoQuorum {
        /// Servers that answered (alike: for a release or an extend, the
        /// larger of those that said yes and those that said no).
        answered: usize,
        /// Servers a majority needs.
        needed: usize,
    },
    /// Redis answered with something a script of ours never returns.
    #[error("unexpected reply from backend: {0}")]
    UnexpectedReply(String),
    /// Fewer replicas than asked for confirmed a synced write in time (see
    /// [`RedisBackend::sync_replicas`](crate::backend::RedisBackend::sync_replicas)):
    /// the write was made on the master, or — when the connection dropped
    /// while the write waited for its replicas (a master demoted under
    /// `WAIT` closes it) — its outcome is unknown. Either way it may stand
    /// on the master and may be lost by a failover. A lock or permit taken
    /// this way has been given back; a stock change may stand: retry it
    /// with the same operation or order id, which replays its first
    /// outcome (one without an id is not safe to send again).
    #[error("only {acknowledged} of {needed} replicas confirmed the write in time")]
    NotReplicated {
        /// Replicas that confirmed it.
        acknowledged: u32,
        /// Replicas asked for.
        needed: u32,
    },
    /// The server refused a write because too few replicas are connected
    /// (its `min-replicas-to-write` setting): nothing was written.
    #[error("the server has too few replicas to take writes (NOREPLICAS)")]
    NoReplicas,
    /// A lock's lease was lost (renewal failed, or it was taken over)
    /// before the work run under it finished; the work was stopped
    /// ([`Lock::run`](crate::lock::Lock::run)).
    #[error("the lock's lease was lost before the work finished; the work was stopped")]
    LeaseLost,
    /// The Redis server is older than this crate supports.
    #[error("Redis {version} is not supported: {minimum} or later is needed")]
    UnsupportedServer {
        /// The server's version, as it reported it.
        version: String,
        /// The oldest version supported.
        minimum: &'static str,
    },
}

/// A failure the backend reported, with the client library's error kept
/// as its [`source`](std::error::Error::source) (redis-rs's `RedisError`
/// for the Redis backends), so that this crate's API does not depend on
/// the client library's version.
#[derive(Debug)]
pub struct BackendError {
    message: String,
    code: Option<String>,
    source: Box<dyn std::error::Error + Send + Sync + 'static>,
}

impl BackendError {
    /// Wraps `source`; `code` is the server's error code, if it gave one.
    pub fn new(
        source: impl std::error::Error + Send + Sync + 'static,
        code: Option<String>,
    ) -> Self {
        BackendError {
            message: source.to_string(),
            code,
            source: Box::new(source),
        }
    }

    /// The server's error code (`NOSCRIPT`, `READONLY`, `WRONGPASS`,
    /// `NOPERM`, ...), when the server answered with one.
    pub fn code(&self) -> Option<&str> {
        self.code.as_deref()
    }

    /// The same failure, its message led by `context` ("cannot connect to
    /// redis://cache:6379/"): the source and the code stay as they were.
    #[cfg(feature = "redis")]
    pub(crate) fn context(mut self, context: impl std::fmt::Display) -> Self {
        self.message = format!("{context}: {}", self.message);
        self
    }
}

impl std::fmt::Display for BackendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for BackendError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(self.source.as_ref())
    }
}

#[cfg(feature = "redis")]
impl From<redis::RedisError> for Error {
    fn from(error: redis::RedisError) -> Self {
        match error.code() {
            Some("NOREPLICAS") => Error::NoReplicas,
            // Redis 6.2.7 to 6.2.x refuse a script's write the same way,
            // but wrap it: `ERR Error running script (call to f_...):
            // @user_script:8: @user_script: 8: -NOREPLICAS Not enough good
            // replicas to write.` (7.0 and later keep the code).
            Some("ERR") if error.detail().is_some_and(|d| d.contains(": -NOREPLICAS ")) => {
                Error::NoReplicas
            }
            code => {
                let code = code.map(str::to_owned);
                Error::Backend(BackendError::new(error, code))
            }
        }
    }
}

impl Error {
    /// True when the error comes from the backend being unreachable, failing or slow,
    /// as opposed to bad input. Callers use it to choose a failure policy
    /// (fail open / fail closed).
    pub fn is_backend_failure(&self) -> bool {
        matches!(
            self,
            Error::Timeout(_)
                | Error::Backend(_)
                | Error::UnexpectedReply(_)
                | Error::NoQuorum { .. }
                | Error::NotReplicated { .. }
                | Error::NoReplicas
        )
    }

    pub(crate) fn invalid_name(name: &str, reason: &'static str) -> Self {
        Error::InvalidName {
            name: name.chars().take(64).collect(),
            reason,
        }
    }

    pub(crate) fn invalid_argument(argument: &'static str, reason: &'static str) -> Self {
        Error::InvalidArgument { argument, reason }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_names_are_cut_in_errors() {
        let name = "x".repeat(1000);
        match Error::invalid_name(&name, "too long") {
            Error::InvalidName { name, .. } => assert_eq!(name.len(), 64),
            other => panic!("unexpected {other:?}"),
        }
    }

    /// `NOREPLICAS` as Redis 7 sends it, and as Redis 6.2.7 to 6.2.x wrap
    /// it when a script's write is refused.
    #[cfg(feature = "redis")]
    #[test]
    fn noreplicas_is_typed_however_the_server_words_it() {
        let parse = |reply: &str| match redis::parse_redis_value(reply.as_bytes()) {
            Ok(redis::Value::ServerError(error)) => Error::from(redis::RedisError::from(error)),
            other => panic!("{reply:?} parsed as {other:?}"),
        };
        for reply in [
            "-NOREPLICAS Not enough good replicas to write.\r\n",
            "-NOREPLICAS Not enough good replicas to write. script: 0a1b, on @user_script:8.\r\n",
            "-ERR Error running script (call to f_0a1b): @user_script:8: @user_script: 8: \
             -NOREPLICAS Not enough good replicas to write.\r\n",
        ] {
            assert!(matches!(parse(reply), Error::NoReplicas), "{reply}");
        }
        for reply in [
            "-ERR Error running script (call to f_0a1b): @user_script:3: user_script:3: \
             attempt to compare nil with number\r\n",
            "-ERR unknown command 'NOREPLICAS'\r\n",
        ] {
            assert!(matches!(parse(reply), Error::Backend(_)), "{reply}");
        }
    }

    #[test]
    fn backend_failures_are_classified() {
        assert!(Error::Timeout(Duration::from_millis(1)).is_backend_failure());
        assert!(!Error::invalid_argument("ttl", "zero").is_backend_failure());
    }
}
