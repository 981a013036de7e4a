//! FLOCK.SCAN: walking the lock table a few names per call, with Redis's cursor guarantee.
//!
//! The table's shards are hash maps, whose order changes when they grow, so a cursor cannot be
//! a position in them. Every name has a fixed place instead ([`crate::shards::scan_key`]), and
//! an ordered index of (place, name) is kept next to the table: a call starts at the cursor's
//! place and the next cursor is the place after the last name returned. A name present for the
//! whole walk is returned once (twice never, unless it was forgotten and created again), and a
//! call costs O(log n + COUNT). Bookkeeping, not state: it is rebuilt with the entries and is
//! in no snapshot.

use std::collections::BTreeSet;
use std::ops::Bound;

use bytes::Bytes;

use super::LockTable;
use super::entry::LockEntry;
use crate::Millis;
use crate::name::Name;
use crate::shards::{Shards, scan_key};

#[derive(Clone, Default)]
pub(super) struct ScanIndex {
    places: BTreeSet<(u64, Name)>,
}

impl ScanIndex {
    pub fn insert(&mut self, name: &[u8]) {
        self.places.insert((scan_key(name), Name::from(name)));
    }

    pub fn remove(&mut self, name: &[u8]) {
        self.places.remove(&(scan_key(name), Name::from(name)));
    }
}

/// The entry of `name`, created (and given its place in the walk) if it is new.
pub(super) fn entry_or_new<'a>(
    entries: &'a mut Shards<LockEntry>,
    scan: &mut ScanIndex,
    name: &[u8],
    floor: u64,
) -> &'a mut LockEntry {
    let mut created = false;
    let entry = entries.get_or_insert_with(name, || {
        created = true;
        LockEntry::new(floor)
    });
    if created {
        scan.insert(name);
    }
    entry
}

/// Which names a FLOCK.SCAN call returns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ScanFilter {
    #[default]
    All,
    /// Only names with a holding live at this time (`HELD`).
    HeldAt(Millis),
}

impl LockTable {
    /// Up to `count` names from `cursor` on (a few more when names share a place), those that
    /// pass `filter`, and the cursor to go on with: 0 once the walk is over.
    pub fn scan(&self, cursor: u64, count: usize, filter: ScanFilter) -> (u64, Vec<Bytes>) {
        let from = (cursor, Name::from(&b""[..]));
        let mut names = Vec::new();
        let mut last = None;
        let places = self
            .scan
            .places
            .range((Bound::Included(from), Bound::Unbounded));
        for (looked, (place, name)) in places.enumerate() {
            // A cursor is a place: names sharing one must come in the same call.
            if looked >= count.max(1)
                && let Some(last) = last
                && last != *place
            {
                // `place` is after `last`, so `last + 1` does not overflow.
                return (last + 1, names);
            }
            last = Some(*place);
            let keep = match filter {
                ScanFilter::All => true,
                ScanFilter::HeldAt(now) => self
                    .entries
                    .get(name.as_bytes())
                    .is_some_and(|e| e.latest_live(now).is_some()),
            };
            if keep {
                names.push(Bytes::copy_from_slice(name.as_bytes()));
            }
        }
        (0, names)
    }
}
