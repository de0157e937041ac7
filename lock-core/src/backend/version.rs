//! Which Redis servers this crate supports, checked once at connect.

use std::time::Duration;

use redis::aio::ConnectionLike;

use crate::error::{Error, Result};

/// The oldest Redis supported: the scripts read the server's clock
/// (`TIME`) before they write, which Redis allows from 5.0 on.
pub const MIN_REDIS_VERSION: &str = "5.0";

/// The `major.minor` of a `redis_version:` line in `INFO server`'s answer.
fn server_version(info: &str) -> Option<(u32, u32, &str)> {
    let version = info
        .lines()
        .find_map(|line| line.strip_prefix("redis_version:"))?
        .trim();
    let mut parts = version.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor, version))
}

/// Asks the server on `conn` its version, within `timeout`, and refuses one
/// older than [`MIN_REDIS_VERSION`]. The major version, if the server said.
pub(super) async fn check_server(
    conn: &mut impl ConnectionLike,
    timeout: Duration,
) -> Result<Option<u32>> {
    let mut info = redis::cmd("INFO");
    info.arg("server");
    let info = match tokio::time::timeout(timeout, info.query_async::<String>(conn)).await {
        Ok(Ok(info)) => info,
        Ok(Err(error)) if error.code() == Some("NOPERM") => {
            tracing::warn!(%error, "cannot read the Redis version (INFO is not allowed); {MIN_REDIS_VERSION} or later is needed");
            return Ok(None);
        }
        Ok(Err(error)) => return Err(error.into()),
        Err(_) => return Err(Error::Timeout(timeout)),
    };
    check_version(&info)?;
    Ok(server_version(&info).map(|(major, ..)| major))
}

/// Refuses a server older than [`MIN_REDIS_VERSION`], given its `INFO`.
fn check_version(info: &str) -> Result<()> {
    match server_version(info) {
        Some((major, _, version)) if major < 5 => Err(Error::UnsupportedServer {
            version: version.to_owned(),
            minimum: MIN_REDIS_VERSION,
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn servers_before_five_are_refused() {
        let info = |v: &str| format!("# Server\r\nredis_version:{v}\r\nredis_mode:standalone\r\n");
        for old in ["2.8.24", "3.2.12", "4.0.14"] {
            match check_version(&info(old)) {
                Err(Error::UnsupportedServer { version, minimum }) => {
                    assert_eq!((version.as_str(), minimum), (old, MIN_REDIS_VERSION));
                }
                other => panic!("{old}: {other:?}"),
            }
        }
        for new in ["5.0.0", "6.2.14", "7.0.15", "7.2.4", "8.0.2"] {
            assert!(check_version(&info(new)).is_ok(), "{new}");
        }
        // A server that does not say is given the benefit of the doubt.
        assert!(check_version("# Server\r\n").is_ok());
        assert_eq!(server_version(&info("7.0.15")), Some((7, 0, "7.0.15")));
    }
}
