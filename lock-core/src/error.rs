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
    /// Redis returned an error or the connection failed.
    #[error("redis error: {0}")]
    Redis(#[source] redis::RedisError),
    /// Too few of a Redlock's servers answered to make a majority.
    #[error("only {answered} servers answered; a majority needs {needed}")]
    NoQuorum {
        /// Servers that answered.
        answered: usize,
        /// Servers a majority needs.
        needed: usize,
    },
    /// Redis answered with something a script of ours never returns.
    #[error("unexpected reply from backend: {0}")]
    UnexpectedReply(String),
    /// A write was made on the master, but fewer replicas than asked for
    /// confirmed it in time (see
    /// [`RedisBackend::sync_replicas`](crate::backend::RedisBackend::sync_replicas)).
    /// A lock or permit taken this way has been released again; a stock
    /// change stays made (retry it with the same operation or order id).
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
    /// The Redis server is older than this crate supports.
    #[error("Redis {version} is not supported: {minimum} or later is needed")]
    UnsupportedServer {
        /// The server's version, as it reported it.
        version: String,
        /// The oldest version supported.
        minimum: &'static str,
    },
}

impl From<redis::RedisError> for Error {
    fn from(error: redis::RedisError) -> Self {
        match error.code() {
            Some("NOREPLICAS") => Error::NoReplicas,
            _ => Error::Redis(error),
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
                | Error::Redis(_)
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

    #[test]
    fn backend_failures_are_classified() {
        assert!(Error::Timeout(Duration::from_millis(1)).is_backend_failure());
        assert!(!Error::invalid_argument("ttl", "zero").is_backend_failure());
    }
}
