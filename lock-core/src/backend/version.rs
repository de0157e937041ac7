//! Which Redis servers this crate supports, checked once at connect.
//!
//! | server | what works |
//! | --- | --- |
//! | Redis 5.0 or later | one server ([`connect`](super::RedisBackend::connect)), Sentinel, Redlock, `sync_replicas` |
//! | Redis 6.0 or later | also Redis Cluster ([`ClusterBackend::MIN_REDIS_VERSION`](super::ClusterBackend::MIN_REDIS_VERSION)), TLS and ACL users |
//! | Redis 6.2.7 or later | also `min-replicas-to-write` refusing this crate's writes ([`Error::NoReplicas`]) |
//! | Redis 7.0 or later, Valkey | also sharded pub/sub for wake-ups on a cluster |

use std::time::Duration;

use redis::aio::ConnectionLike;

use crate::error::{Error, Result};

/// The oldest Redis supported: the scripts read the server's clock
/// (`TIME`) before they write, which Redis allows from 5.0 on. This is the
/// minimum of [`connect`](super::RedisBackend::connect), Sentinel and
/// Redlock; a Redis Cluster needs
/// [`ClusterBackend::MIN_REDIS_VERSION`](super::ClusterBackend::MIN_REDIS_VERSION)
/// (6.0).
///
/// Before 6.2.7, Redis does not apply `min-replicas-to-write` to the
/// writes a script makes: a master short of replicas takes this crate's
/// lock, permit and stock writes instead of refusing them with
/// [`Error::NoReplicas`] (`connect` logs a warning when it sees the
/// setting on such a server). Make writes wait for replicas with
/// [`sync_replicas`](super::RedisBackend::sync_replicas) there, which
/// works from 5.0 on.
pub const MIN_REDIS_VERSION: &str = "5.0";

/// The first Redis that refuses a script's writes when fewer replicas than
/// its `min-replicas-to-write` are connected (redis/redis#10160).
const SCRIPTS_CHECK_REPLICAS: (u32, u32, u32) = (6, 2, 7);

/// A server's version, from the `redis_version:` line of `INFO server`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Version {
    major: u32,
    minor: u32,
    patch: u32,
    text: String,
}

impl Version {
    fn at_least(&self, (major, minor, patch): (u32, u32, u32)) -> bool {
        (self.major, self.minor, self.patch) >= (major, minor, patch)
    }
}

/// The version in `INFO server`'s answer (Valkey reports the Redis
/// version it is compatible with there, 7.2.4 for Valkey 8).
fn server_version(info: &str) -> Option<Version> {
    let text = info
        .lines()
        .find_map(|line| line.strip_prefix("redis_version:"))?
        .trim();
    let mut parts = text.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    let patch = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    Some(Version {
        major,
        minor,
        patch,
        text: text.to_owned(),
    })
}

/// `major.minor` of a minimum such as [`MIN_REDIS_VERSION`].
fn parse_minimum(minimum: &str) -> (u32, u32, u32) {
    let mut parts = minimum.split('.').map(|p| p.parse().unwrap_or(0));
    let major = parts.next().unwrap_or(0);
    let minor = parts.next().unwrap_or(0);
    (major, minor, 0)
}

/// Asks the server on `conn` its version, within `timeout`, and refuses one
/// older than [`MIN_REDIS_VERSION`]. The major version, if the server said.
pub(super) async fn check_server(
    conn: &mut impl ConnectionLike,
    timeout: Duration,
) -> Result<Option<u32>> {
    check_server_at_least(conn, timeout, MIN_REDIS_VERSION).await
}

/// As [`check_server`], refusing a server older than `minimum`.
pub(super) async fn check_server_at_least(
    conn: &mut impl ConnectionLike,
    timeout: Duration,
    minimum: &'static str,
) -> Result<Option<u32>> {
    let Some(info) = info(conn, "server", timeout).await? else {
        tracing::warn!(
            "cannot read the Redis version (INFO is not allowed); {minimum} or later is needed"
        );
        return Ok(None);
    };
    let version = server_version(&info);
    check_version(version.as_ref(), minimum)?;
    if let Some(version) = &version
        && !version.at_least(SCRIPTS_CHECK_REPLICAS)
    {
        warn_of_unguarded_writes(conn, version, timeout).await?;
    }
    Ok(version.map(|version| version.major))
}

/// `INFO section`, within `timeout`; `None` when the user may not run it.
async fn info(
    conn: &mut impl ConnectionLike,
    section: &str,
    timeout: Duration,
) -> Result<Option<String>> {
    let mut info = redis::cmd("INFO");
    info.arg(section);
    match tokio::time::timeout(timeout, info.query_async::<String>(conn)).await {
        Ok(Ok(info)) => Ok(Some(info)),
        Ok(Err(error)) if error.code() == Some("NOPERM") => Ok(None),
        Ok(Err(error)) => Err(error.into()),
        Err(_) => Err(Error::Timeout(timeout)),
    }
}

/// Warns when a server that lets scripts write past `min-replicas-to-write`
/// has that setting (`INFO replication` then shows how many replicas are
/// good enough for it): the user counts on a refusal that will not come.
async fn warn_of_unguarded_writes(
    conn: &mut impl ConnectionLike,
    version: &Version,
    timeout: Duration,
) -> Result<()> {
    let Some(replication) = info(conn, "replication", timeout).await? else {
        return Ok(());
    };
    if guards_writes(&replication) {
        let (major, minor, patch) = SCRIPTS_CHECK_REPLICAS;
        tracing::warn!(
            version = %version.text,
            "this server has min-replicas-to-write, which Redis before {major}.{minor}.{patch} \
             does not apply to scripts: it may take this crate's writes even when too few \
             replicas are connected (no Error::NoReplicas); use RedisBackend::sync_replicas"
        );
    }
    Ok(())
}

/// Whether `INFO replication` shows `min-replicas-to-write` set (with a
/// lag bound, as Redis needs to apply it).
fn guards_writes(replication: &str) -> bool {
    replication
        .lines()
        .any(|line| line.starts_with("min_slaves_good_slaves:"))
}

/// Refuses a server older than `minimum` (`major.minor`).
fn check_version(version: Option<&Version>, minimum: &'static str) -> Result<()> {
    match version {
        Some(version) if !version.at_least(parse_minimum(minimum)) => {
            Err(Error::UnsupportedServer {
                version: version.text.clone(),
                minimum,
            })
        }
        // A server that does not say is given the benefit of the doubt.
        _ => Ok(()),
    }
}

/// The version `INFO server` reports, as text, if older than `minimum`.
pub(super) fn older_than(info: &str, minimum: &str) -> Option<String> {
    server_version(info)
        .filter(|version| !version.at_least(parse_minimum(minimum)))
        .map(|version| version.text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(v: &str) -> String {
        format!("# Server\r\nredis_version:{v}\r\nredis_mode:standalone\r\n")
    }

    fn check(v: &str, minimum: &'static str) -> Result<()> {
        check_version(server_version(&info(v)).as_ref(), minimum)
    }

    #[test]
    fn servers_before_five_are_refused() {
        for old in ["2.8.24", "3.2.12", "4.0.14"] {
            match check(old, MIN_REDIS_VERSION) {
                Err(Error::UnsupportedServer { version, minimum }) => {
                    assert_eq!((version.as_str(), minimum), (old, MIN_REDIS_VERSION));
                }
                other => panic!("{old}: {other:?}"),
            }
        }
        for new in ["5.0.0", "6.2.14", "7.0.15", "7.2.4", "8.0.2"] {
            assert!(check(new, MIN_REDIS_VERSION).is_ok(), "{new}");
        }
        // A server that does not say is given the benefit of the doubt.
        assert!(check_version(server_version("# Server\r\n").as_ref(), "6.0").is_ok());
        let version = server_version(&info("7.0.15")).expect("a version");
        assert_eq!((version.major, version.minor, version.patch), (7, 0, 15));
    }

    #[test]
    fn minimums_compare_major_and_minor() {
        assert!(matches!(
            check("5.0.7", "6.0"),
            Err(Error::UnsupportedServer { minimum: "6.0", .. })
        ));
        for new in ["6.0.0", "6.2.14", "7.2.4", "10.0.0"] {
            assert!(check(new, "6.0").is_ok(), "{new}");
            assert_eq!(older_than(&info(new), "6.0"), None);
        }
        assert_eq!(older_than(&info("5.0.7"), "6.0").as_deref(), Some("5.0.7"));
    }

    #[test]
    fn scripts_check_replicas_from_six_two_seven() {
        let at_least = |v: &str| {
            server_version(&info(v))
                .expect("a version")
                .at_least(SCRIPTS_CHECK_REPLICAS)
        };
        for old in ["5.0.7", "6.0.20", "6.2.6"] {
            assert!(!at_least(old), "{old}");
        }
        for new in ["6.2.7", "6.2.14", "7.0.0", "7.2.4"] {
            assert!(at_least(new), "{new}");
        }
        assert!(guards_writes(
            "# Replication\r\nrole:master\r\nconnected_slaves:0\r\nmin_slaves_good_slaves:0\r\n"
        ));
        assert!(!guards_writes(
            "# Replication\r\nrole:master\r\nconnected_slaves:0\r\n"
        ));
    }
}
