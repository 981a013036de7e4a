//! The walk order of a keyed map for SCAN-style cursors, kept next to the map: an ordered set of
//! (place, key), where a key's place ([`crate::shards::scan_key`]) is fixed for its life. The
//! maps are hash maps whose order changes when they grow, so a cursor cannot be a position in
//! them; it is a place instead. A walk starts at the cursor's place and the next cursor is the
//! place after the last key visited, so a key present for the whole walk is visited once, and a
//! call costs O(log n + count). Bookkeeping, not state: rebuilt with the map, in no snapshot.

use std::collections::BTreeSet;
use std::ops::Bound;

use crate::name::Name;
use crate::shards::scan_key;

#[derive(Clone, Default)]
pub(crate) struct ScanIndex {
    places: BTreeSet<(u64, Name)>,
}

impl ScanIndex {
    pub fn insert(&mut self, key: &[u8]) {
        self.places.insert((scan_key(key), Name::from(key)));
    }

    pub fn remove(&mut self, key: &[u8]) {
        self.places.remove(&(scan_key(key), Name::from(key)));
    }

    /// Visits the keys from place `cursor` on, in place order, until `count` were visited (and
    /// the keys sharing the last one's place: a cursor is a place, so they must come in the same
    /// call). The cursor to go on with, or `None` once every place was visited.
    pub fn walk(&self, cursor: u64, count: usize, mut visit: impl FnMut(&[u8])) -> Option<u64> {
        let from = (cursor, Name::from(&b""[..]));
        let mut last = None;
        let places = self.places.range((Bound::Included(from), Bound::Unbounded));
        for (looked, (place, key)) in places.enumerate() {
            if looked >= count.max(1)
                && let Some(last) = last
                && last != *place
            {
                // `place` is after `last`, so `last + 1` does not overflow.
                return Some(last + 1);
            }
            last = Some(*place);
            visit(key.as_bytes());
        }
        None
    }
}
