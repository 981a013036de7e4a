//! FLOCK.SCAN: walking the lock table a few names per call, with Redis's cursor guarantee, on
//! the table's own order (see [`crate::stripes`]). A name present for the whole walk is returned once (twice never,
//! unless it was forgotten and created again).

use bytes::Bytes;

use super::LockTable;
use super::lock_state::LockState;
use crate::Millis;
use crate::stripes::Stripes;

/// The entry of `name`, created if it is new.
pub(super) fn entry_or_new<'a>(
    entries: &'a mut Stripes<LockState>,
    name: &[u8],
    floor: u64,
) -> &'a mut LockState {
    entries.get_or_insert_with(name, || LockState::new(floor))
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
        let mut names = Vec::new();
        let next = self.entries.walk(cursor, count, |name, entry| {
            let keep = match filter {
                ScanFilter::All => true,
                ScanFilter::HeldAt(now) => entry.latest_live(now).is_some(),
            };
            if keep {
                names.push(Bytes::copy_from_slice(name));
            }
        });
        (next.unwrap_or(0), names)
    }

    /// Visits the names from place `cursor` on (see [`Stripes::walk`]): SCAN's walk of the
    /// lock names, which filters them against the fence keys.
    pub(crate) fn walk_names(
        &self,
        cursor: u64,
        count: usize,
        mut visit: impl FnMut(&[u8]),
    ) -> Option<u64> {
        self.entries.walk(cursor, count, |name, _| visit(name))
    }

    /// Whether the table keeps `name` (what FLOCK.SCAN lists, and TYPE calls `flock`).
    pub(crate) fn has_name(&self, name: &[u8]) -> bool {
        self.entries.get(name).is_some()
    }
}
