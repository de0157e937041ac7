//! Lua scripts as every primitive's Redis module sends them: `EVALSHA`,
//! and on `NOSCRIPT` (a new, restarted or failed-over server) the same
//! call as `EVAL` with the script's text. Either way it is one command with
//! the script's keys, so on a cluster it goes to the one node that owns
//! them, and never waits on every node (as loading a script into the whole
//! cluster would).
//!
//! A script that publishes wake-ups has two forms: with `PUBLISH`, and with
//! `SPUBLISH` for a cluster of Redis 7 or later, whose waiters listen on
//! sharded channels (every channel of a lock shares its keys' hash tag, so
//! it lives on the same node).

use redis::{Cmd, RedisWrite, ToRedisArgs};

use crate::error::{Error, Result};

/// A `static` [`LuaScript`] of the `.lua` files given, in order (paths as
/// for `include_str!`, from the file that names them).
macro_rules! lua_script {
    ($($file:literal),+ $(,)?) => {
        std::sync::LazyLock::new(|| {
            $crate::backend::script::LuaScript::new(&[$(include_str!($file)),+])
        })
    };
}
pub(crate) use lua_script;

/// A script's text and its SHA-1.
#[derive(Debug)]
struct Source {
    text: String,
    hash: String,
}

impl Source {
    fn new(text: String) -> Self {
        let hash = redis::Script::new(&text).get_hash().to_owned();
        Source { text, hash }
    }
}

/// A Lua script, made of the parts given (preludes, then the body).
#[derive(Debug)]
pub(crate) struct LuaScript {
    plain: Source,
    /// The form with sharded publishes, when the script publishes.
    sharded: Option<Source>,
}

impl LuaScript {
    /// The script of `parts`, joined.
    pub(crate) fn new(parts: &[&str]) -> Self {
        let text = parts.concat();
        let sharded = text
            .contains("'PUBLISH'")
            .then(|| Source::new(text.replace("'PUBLISH'", "'SPUBLISH'")));
        LuaScript {
            plain: Source::new(text),
            sharded,
        }
    }

    /// A call of the script, to fill with keys and arguments.
    pub(crate) fn call(&self) -> Invocation<'_> {
        Invocation {
            script: self,
            data: Vec::with_capacity(256),
            parts: Vec::with_capacity(16),
        }
    }

    /// The source sent when waiters listen on sharded channels or not.
    fn source(&self, sharded: bool) -> &Source {
        match (&self.sharded, sharded) {
            (Some(sharded), true) => sharded,
            _ => &self.plain,
        }
    }

    /// The script's text, for tests.
    #[cfg(test)]
    pub(crate) fn text(&self) -> &str {
        &self.plain.text
    }
}

/// One call of a [`LuaScript`]: its keys and arguments, written one
/// after another into one buffer as they come (keys and arguments may be
/// added in any order), so that a call costs a few allocations, not two
/// per key or argument.
#[derive(Debug)]
pub(crate) struct Invocation<'a> {
    script: &'a LuaScript,
    /// Every key and argument, as written.
    data: Vec<u8>,
    /// Where each key or argument ends in `data`, and whether it is a key.
    parts: Vec<(usize, bool)>,
}

/// Writes what a [`ToRedisArgs`] value makes of itself into an
/// [`Invocation`], as keys or as arguments.
struct Parts<'i, 'a> {
    call: &'i mut Invocation<'a>,
    key: bool,
}

impl RedisWrite for Parts<'_, '_> {
    fn write_arg(&mut self, arg: &[u8]) {
        self.call.data.extend_from_slice(arg);
        self.call.parts.push((self.call.data.len(), self.key));
    }

    fn writer_for_next_arg(&mut self) -> impl std::io::Write + '_ {
        /// Ends the part when dropped, as `Cmd`'s own writer does.
        struct Part<'p, 'i, 'a>(&'p mut Parts<'i, 'a>);
        impl Drop for Part<'_, '_, '_> {
            fn drop(&mut self) {
                let call = &mut *self.0.call;
                call.parts.push((call.data.len(), self.0.key));
            }
        }
        impl std::io::Write for Part<'_, '_, '_> {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0.call.data.extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        Part(self)
    }
}

impl Invocation<'_> {
    /// Adds a key (every key a script touches goes through `KEYS`).
    pub(crate) fn key(&mut self, key: impl ToRedisArgs) -> &mut Self {
        key.write_redis_args(&mut Parts {
            call: self,
            key: true,
        });
        self
    }

    /// Adds an argument.
    pub(crate) fn arg(&mut self, arg: impl ToRedisArgs) -> &mut Self {
        arg.write_redis_args(&mut Parts {
            call: self,
            key: false,
        });
        self
    }

    /// The keys (`true`) or the arguments, in the order they were added.
    fn parts(&self, keys: bool) -> impl Iterator<Item = &[u8]> {
        let starts = std::iter::once(0).chain(self.parts.iter().map(|&(end, _)| end));
        starts
            .zip(&self.parts)
            .filter(move |&(_, &(_, key))| key == keys)
            .map(|(start, &(end, _))| &self.data[start..end])
    }

    /// `EVALSHA` (or, with `whole`, `EVAL` with the text) of this call.
    pub(crate) fn cmd(&self, sharded: bool, whole: bool) -> Cmd {
        let source = self.script.source(sharded);
        let (name, script) = if whole {
            ("EVAL", &source.text)
        } else {
            ("EVALSHA", &source.hash)
        };
        let keys = self.parts.iter().filter(|&&(_, key)| key).count();
        // Sized once: the name, the script, the number of keys (at most
        // 20 digits), then every key and argument.
        let size = name.len() + script.len() + 20 + self.data.len();
        let mut cmd = Cmd::with_capacity(3 + self.parts.len(), size);
        cmd.arg(name).arg(script).arg(keys);
        for part in self.parts(true).chain(self.parts(false)) {
            cmd.arg(part);
        }
        cmd
    }
}

/// The integers of a reply that a script packed into one string, `N` of
/// them separated by spaces: a string is read in one step where an array
/// of integers is read element by element, which cost the client more than
/// the rest of a call.
pub(crate) fn packed<const N: usize>(reply: &redis::Value) -> Result<[i64; N]> {
    let unexpected = || Error::UnexpectedReply(format!("expected {N} integers, got {reply:?}"));
    let redis::Value::BulkString(bytes) = reply else {
        return Err(unexpected());
    };
    let mut numbers = bytes.split(|&b| b == b' ').map(integer);
    let mut out = [0; N];
    for slot in &mut out {
        *slot = numbers.next().flatten().ok_or_else(unexpected)?;
    }
    match numbers.next() {
        None => Ok(out),
        Some(_) => Err(unexpected()),
    }
}

/// The integer written in decimal in `text` (a Lua script's `%d`), if it
/// is one of at most 18 digits: every integer a script computes exactly
/// (below 2^53) fits.
fn integer(text: &[u8]) -> Option<i64> {
    let (negative, digits) = match text {
        [b'-', digits @ ..] => (true, digits),
        digits => (false, digits),
    };
    if digits.is_empty() || digits.len() > 18 {
        return None;
    }
    let mut n: i64 = 0;
    for &digit in digits {
        if !digit.is_ascii_digit() {
            return None;
        }
        n = n * 10 + i64::from(digit - b'0');
    }
    Some(if negative { -n } else { n })
}

/// Whether `error` says the server does not have the script.
pub(crate) fn no_script(error: &redis::RedisError) -> bool {
    error.code() == Some("NOSCRIPT")
}

/// Whether `error` is an answer by which the server says it did not run the
/// command at all: the slot lives elsewhere or is moving (`MOVED`, `ASK`,
/// `TRYAGAIN`, `CLUSTERDOWN`), the server is loading or is a replica now
/// (`LOADING`, `READONLY`, `MASTERDOWN`), or a script is running (`BUSY`).
/// Only such a command is sent again: one whose connection failed may
/// have run, and this crate never sends a command twice that may have run
/// (see [the crate docs](crate#one-rule-for-retries)).
pub(crate) fn not_run(error: &redis::RedisError) -> bool {
    matches!(
        error.code(),
        Some(
            "MOVED"
                | "ASK"
                | "TRYAGAIN"
                | "CLUSTERDOWN"
                | "LOADING"
                | "READONLY"
                | "MASTERDOWN"
                | "BUSY"
        )
    )
}

/// How often a command the server did not run ([`not_run`]) is sent again,
/// and the pause before the first time (doubled each time): long enough
/// for a cluster client to learn a moved slot.
pub(crate) const NOT_RUN_RETRIES: u32 = 4;
pub(crate) const NOT_RUN_PAUSE: std::time::Duration = std::time::Duration::from_millis(20);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_script_that_publishes_has_a_sharded_form() {
        let script = LuaScript::new(&["local x = 1\n", "redis.call('PUBLISH', KEYS[1], 'm')"]);
        assert!(
            script
                .text()
                .starts_with("local x = 1\nredis.call('PUBLISH'")
        );
        let mut call = script.call();
        call.key("k").arg(7);
        let plain = call.cmd(false, true);
        let sharded = call.cmd(true, true);
        let text = |cmd: &Cmd| String::from_utf8_lossy(&cmd.get_packed_command()).into_owned();
        assert!(text(&plain).contains("'PUBLISH'"));
        assert!(text(&sharded).contains("'SPUBLISH'"));
        assert!(text(&call.cmd(true, false)).contains(&script.source(true).hash));
        let quiet = LuaScript::new(&["return 1"]);
        assert!(quiet.sharded.is_none());
    }

    #[test]
    fn keys_go_before_arguments_whatever_the_order_they_came_in() {
        let script = LuaScript::new(&["return 1"]);
        let mut call = script.call();
        call.arg(-3)
            .key("a")
            .arg("x")
            .key(&["b", "c"][..])
            .arg(7_u64);
        let args: Vec<Vec<u8>> = call
            .cmd(false, false)
            .args_iter()
            .map(|arg| match arg {
                redis::Arg::Simple(bytes) => bytes.to_vec(),
                _ => b"?".to_vec(),
            })
            .collect();
        let hash = script.source(false).hash.as_bytes();
        let expected: [&[u8]; 9] = [b"EVALSHA", hash, b"3", b"a", b"b", b"c", b"-3", b"x", b"7"];
        assert_eq!(args, expected);
        let whole = call.cmd(false, true);
        let first: Vec<_> = whole.args_iter().take(2).collect();
        assert_eq!(first.len(), 2);
        assert!(matches!(first[1], redis::Arg::Simple(b"return 1")));
    }

    #[test]
    fn a_packed_reply_has_exactly_its_integers() {
        let text = |s: &str| redis::Value::BulkString(s.as_bytes().to_vec());
        assert_eq!(packed::<3>(&text("1 -2 30")).unwrap(), [1, -2, 30]);
        assert_eq!(
            packed::<2>(&text("9007199254740993 -0")).unwrap(),
            [9_007_199_254_740_993, 0]
        );
        for bad in [
            "1 2", "1 2 3 4", "1  2 3", "1 2 x", "", "1 2 +3", "1 - 3", "1 2 1e3",
        ] {
            assert!(
                matches!(packed::<3>(&text(bad)), Err(Error::UnexpectedReply(_))),
                "{bad:?}"
            );
        }
        let array = redis::Value::Array(vec![redis::Value::Int(1)]);
        assert!(matches!(
            packed::<1>(&array),
            Err(Error::UnexpectedReply(_))
        ));
    }
}
