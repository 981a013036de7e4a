//! The log as it stands: the vote, the purge point and every entry after it, in memory. The
//! same changes are made here live and at start-up from the records, so that what a restart
//! reads back is what openraft saw.

use std::collections::VecDeque;

use bytes::Bytes;

use super::error::LogError;
use crate::types::{LogId, Vote};

/// An entry as kept: its id and its payload as encoded on append (decoded when read).
#[derive(Clone, Debug)]
pub struct Stored {
    pub log_id: LogId,
    pub payload: Bytes,
}

#[derive(Default, Debug)]
pub struct Mem {
    pub vote: Option<Vote>,
    pub purged: Option<LogId>,
    /// Consecutive entries, the first at `start`.
    pub entries: VecDeque<Stored>,
    /// The index of the first entry kept, or of the next one while none is: after the purge
    /// point, or after the end of segments that were removed (see [`Mem::begin_after`]).
    start: u64,
}

impl Mem {
    /// The index the next appended entry gets.
    pub fn next_index(&self) -> u64 {
        self.entries
            .back()
            .map_or(self.start, |last| last.log_id.index + 1)
    }

    fn first_index(&self) -> u64 {
        self.entries
            .front()
            .map_or(self.start, |first| first.log_id.index)
    }

    /// The log read from its first segment on begins after `last` (the segments before were
    /// removed once purged, and a purge record after this says up to where).
    pub fn begin_after(&mut self, last: LogId) {
        if self.entries.is_empty() {
            self.start = self.start.max(last.index + 1);
        }
    }

    pub fn last_log_id(&self) -> Option<LogId> {
        self.entries.back().map(|e| e.log_id).or(self.purged)
    }

    /// Puts an entry at its index, dropping the one there and every later one.
    pub fn append(&mut self, entry: Stored) -> Result<(), LogError> {
        let index = entry.log_id.index;
        if self.entries.is_empty() && self.purged.is_none() && index > self.start {
            // A log may begin at any index (openraft's storage suite begins at 1).
            self.start = index;
        }
        let first = self.first_index();
        let next = self.next_index();
        if index < first || index > next || self.purged.is_some_and(|p| index <= p.index) {
            return Err(LogError::Misplaced { index, first, next });
        }
        self.entries.truncate((index - first) as usize);
        self.entries.push_back(entry);
        Ok(())
    }

    pub fn truncate_after(&mut self, last: Option<LogId>) {
        let keep_to = last.map_or(0, |id| id.index + 1);
        let first = self.first_index();
        self.entries
            .truncate(keep_to.saturating_sub(first) as usize);
    }

    pub fn purge(&mut self, upto: LogId) {
        if self.purged.is_some_and(|p| p.index >= upto.index) {
            return;
        }
        self.purged = Some(upto);
        while self
            .entries
            .front()
            .is_some_and(|e| e.log_id.index <= upto.index)
        {
            self.entries.pop_front();
        }
        self.start = self.start.max(upto.index + 1);
    }

    /// The entries in `from..to` that are here (none before the purge point or past the end).
    pub fn range(&self, from: u64, to: u64) -> Vec<Stored> {
        let first = self.first_index();
        let start = from.max(first);
        let end = to.min(self.next_index());
        if start >= end {
            return Vec::new();
        }
        self.entries
            .range((start - first) as usize..(end - first) as usize)
            .cloned()
            .collect()
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::types::LeaderId;

    /// A log id of node 1 (the store's tests use it too).
    pub(in crate::log_store) fn id(term: u64, index: u64) -> LogId {
        LogId {
            leader_id: LeaderId { term, node_id: 1 },
            index,
        }
    }

    fn entry(term: u64, index: u64) -> Stored {
        Stored {
            log_id: id(term, index),
            payload: Bytes::from(format!("{term}/{index}")),
        }
    }

    fn indexes(mem: &Mem) -> Vec<(u64, u64)> {
        mem.entries
            .iter()
            .map(|e| (e.log_id.leader_id.term, e.log_id.index))
            .collect()
    }

    #[test]
    fn an_append_replaces_the_tail_from_its_index_and_refuses_a_gap() {
        let mut mem = Mem::default();
        for i in 0..5 {
            mem.append(entry(1, i)).unwrap();
        }
        mem.append(entry(2, 3)).unwrap();
        assert_eq!(indexes(&mem), [(1, 0), (1, 1), (1, 2), (2, 3)]);
        let err = mem.append(entry(2, 9)).unwrap_err();
        assert!(
            matches!(
                err,
                LogError::Misplaced {
                    index: 9,
                    next: 4,
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(mem.last_log_id(), Some(id(2, 3)));
    }

    #[test]
    fn truncation_purge_and_reads_keep_the_entries_consecutive() {
        let mut mem = Mem::default();
        for i in 0..10 {
            mem.append(entry(1, i)).unwrap();
        }
        mem.truncate_after(Some(id(1, 6)));
        assert_eq!(mem.next_index(), 7);
        mem.purge(id(1, 2));
        mem.purge(id(1, 1));
        assert_eq!(mem.purged, Some(id(1, 2)));
        let read: Vec<u64> = mem.range(0, 100).iter().map(|e| e.log_id.index).collect();
        assert_eq!(read, [3, 4, 5, 6]);
        assert_eq!(mem.range(5, 6).len(), 1);
        assert!(mem.range(7, 9).is_empty());
        let err = mem.append(entry(1, 2)).unwrap_err();
        assert!(matches!(err, LogError::Misplaced { first: 3, .. }), "{err}");
        // A snapshot past the end: the log goes on after it.
        mem.purge(id(3, 20));
        assert!(mem.entries.is_empty());
        assert_eq!(mem.last_log_id(), Some(id(3, 20)));
        mem.append(entry(3, 21)).unwrap();
        mem.truncate_after(None);
        assert!(mem.entries.is_empty());
        assert_eq!(mem.next_index(), 21);
    }
}
