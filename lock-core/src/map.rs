//! Helpers for the hash maps every layer keeps (the in-memory primitives'
//! tables, the wake-up registry, the pub/sub channels): shared here so
//! that none of them imports another for it.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};

/// Gives back most of a map's room once a sweep (or a removal) has left it
/// mostly empty (a hash map never shrinks by itself): after a burst of
/// distinct names, the memory their entries took. Room for four times the
/// live entries is kept, so that a map does not shrink and grow back in
/// turn; a map that needs no shrinking costs a few instructions.
pub(crate) fn shrink_swept<K: Eq + Hash, V, S: BuildHasher>(map: &mut HashMap<K, V, S>) {
    map.shrink_to(map.len().saturating_mul(4));
}
