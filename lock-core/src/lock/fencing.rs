//! The resource side of fencing tokens.

use std::sync::atomic::{AtomicU64, Ordering};

/// A write carried a fencing token older than one the resource already saw:
/// its holder lost the lock (paused past its lease, say) and must not write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("stale fencing token {token}: {highest} was already seen")]
pub struct StaleToken {
    /// The token refused.
    pub token: u64,
    /// The highest token seen so far.
    pub highest: u64,
}

/// Kept by a resource that locked clients write to: admits a write only with
/// a token at least as high as the highest it has seen.
///
/// ```
/// use lock_core::lock::Fence;
///
/// let fence = Fence::new();
/// assert!(fence.admit(7).is_ok());
/// assert!(fence.admit(7).is_ok()); // the same holder writes again
/// assert!(fence.admit(9).is_ok()); // a newer holder
/// assert!(fence.admit(7).is_err()); // the old holder is refused
/// ```
#[derive(Debug, Default)]
pub struct Fence {
    highest: AtomicU64,
}

impl Fence {
    /// A fence that has seen no token.
    pub const fn new() -> Self {
        Fence {
            highest: AtomicU64::new(0),
        }
    }

    /// Admits `token` if it is at least the highest seen, and remembers it.
    ///
    /// # Errors
    /// [`StaleToken`] when a higher token was already seen.
    pub fn admit(&self, token: u64) -> Result<(), StaleToken> {
        let highest = self.highest.fetch_max(token, Ordering::SeqCst);
        if token >= highest {
            Ok(())
        } else {
            Err(StaleToken { token, highest })
        }
    }

    /// The highest token seen.
    pub fn highest(&self) -> u64 {
        self.highest.load(Ordering::SeqCst)
    }
}
