//! What the kinds share on Redis: the scripts of an administrative release
//! and of an inspection for the kinds that keep one key, the key layout
//! most kinds follow, times in milliseconds, and how an acquire's reply is
//! read.

use std::sync::LazyLock;
use std::time::Duration;

use crate::backend::notify::{Note, Reader};
use crate::backend::script::{Invocation, LuaScript, lua_script};
use crate::error::{Error, Result};
use crate::lock::interface::{Attempt, Handoff};
use crate::name::{KeySpace, Name};

static FORCE_RELEASE: LazyLock<LuaScript> = lua_script!("force_release.lua");
static INSPECT: LazyLock<LuaScript> = lua_script!("fence.lua", "inspect.lua");

/// How long the fencing counter outlives its last grant.
pub(super) const FENCE_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// `d` in whole milliseconds, at least 1 (0 would mean no expiry).
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// Busy, given the holder's PTTL (-1 = no expiry, a foreign holder, or
/// queued behind others; -2 = gone meanwhile) and the handoffs so far.
pub(super) fn busy(ttl_ms: i64, handoffs: i64) -> Attempt {
    Attempt::Busy {
        retry_in: match ttl_ms {
            -2 => Some(Duration::ZERO),
            ms if ms >= 0 => Some(Duration::from_millis(ms.unsigned_abs())),
            _ => None,
        },
        handoffs: u64::try_from(handoffs).unwrap_or(0),
    }
}

/// An acquire's reply, `{taken, fence or PTTL[, handoffs]}`: taken 1 with
/// the fencing token (read when `fenced`), or 0 with the holder's PTTL.
pub(super) fn read_acquire(reply: &[i64], fenced: bool) -> Result<Attempt> {
    let (taken, value, handoffs) = match *reply {
        [taken, value] => (taken, value, 0),
        [taken, value, handoffs] => (taken, value, handoffs),
        _ => {
            return Err(Error::UnexpectedReply(format!(
                "acquire returned {reply:?}"
            )));
        }
    };
    match taken {
        1 => {
            let fence = if fenced {
                Some(
                    u64::try_from(value)
                        .map_err(|_| Error::UnexpectedReply(format!("fencing token {value}")))?,
                )
            } else {
                None
            };
            Ok(Attempt::Acquired { fence })
        }
        0 => Ok(busy(value, handoffs)),
        other => Err(Error::UnexpectedReply(format!("acquire returned {other}"))),
    }
}

/// The keys of one lock of one kind.
pub(crate) struct Keys {
    pub(super) lock: String,
    pub(super) channel: String,
    /// Where the releases of this lock are remembered for
    /// [`RELEASE_REMEMBERED`](crate::lock::interface::RELEASE_REMEMBERED):
    /// one key per released token (see [`Keys::released`]), so a release
    /// retried after others still gets its own first answer.
    pub(super) last: String,
}

impl Keys {
    /// The layout of a kind tagged `tag`: `<prefix>{name}:<tag>`, its
    /// channel `<tag>:released` and the releases under `<tag>:last`.
    pub(super) fn tagged(keys: &KeySpace, name: &Name, tag: &str) -> Self {
        Keys {
            lock: keys.key(name, tag),
            channel: keys.key(name, &format!("{tag}:released")),
            last: keys.key(name, &format!("{tag}:last")),
        }
    }

    /// The key that remembers `token`'s release: `<last>:<token>`.
    pub(super) fn released(&self, token: &str) -> String {
        let mut key = String::with_capacity(self.last.len() + 1 + token.len());
        key.push_str(&self.last);
        key.push(':');
        key.push_str(token);
        key
    }
}

/// Deletes `lock` whoever holds it and wakes its waiters on `channel`.
pub(super) fn force_release(lock: &str, channel: &str) -> Invocation<'static> {
    let mut invocation = FORCE_RELEASE.call();
    invocation.key(lock).arg(channel);
    invocation
}

/// Who holds `lock`, kept as `kept` says (see `inspect.lua`), with the
/// keys that follow `lock` in that form.
pub(super) fn inspect(lock: &str, more: Option<&str>, kept: &str) -> Invocation<'static> {
    let mut invocation = INSPECT.call();
    invocation.key(lock);
    if let Some(key) = more {
        invocation.key(key);
    }
    invocation.arg(kept);
    invocation
}

/// Where a waiter hears of releases, and how it reads what it hears.
pub(crate) struct Channel {
    /// The channel.
    pub(crate) name: String,
    /// How a kind whose releases hand the lock to a waiter says so on the
    /// channel; `None`: every message is a wake-up.
    pub(crate) handoffs: Option<Handoffs>,
}

impl Channel {
    /// A channel whose every message is a wake-up.
    pub(super) fn wake_ups(name: String) -> Self {
        Channel {
            name,
            handoffs: None,
        }
    }
}

/// The codec of a kind's handoff messages: the transport keeps, per
/// waiter, the newest [`Note`] that `read` found in a message, and the
/// waiter asks `handoff` what it means.
#[derive(Clone, Copy)]
pub(crate) struct Handoffs {
    /// Reads a message: a handoff's note, or `None` for a wake-up.
    pub(crate) read: Reader,
    /// The handoff a note announces.
    pub(crate) handoff: fn(Note) -> Handoff,
}
