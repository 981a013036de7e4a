//! The fence register: FENCE.SET/GET/TOKEN, a key's value guarded by the highest token it
//! accepted. The resource-side half of fencing, without Lua: a write carrying an older token
//! than one already accepted is refused atomically.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use bytes::Bytes;
use dashmap::DashMap;
use dashmap::mapref::entry::Entry;

use crate::{Change, Journal};

struct Fence {
    token: u64,
    value: Bytes,
}

/// Counters for INFO.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FenceStats {
    pub keys: u64,
    pub accepted: u64,
    pub refused: u64,
}

#[derive(Default)]
pub struct FenceRegister {
    keys: DashMap<Bytes, Fence>,
    accepted: AtomicU64,
    refused: AtomicU64,
}

impl FenceRegister {
    pub fn new() -> Self {
        Self::default()
    }

    /// Stores `value` at `token` if `token` >= the key's highest accepted token (0 for a new
    /// key); true if stored. An accepted write is journalled while the key is still locked.
    pub fn set(&self, key: Bytes, token: u64, value: Bytes, journal: &dyn Journal) -> bool {
        match self.keys.entry(key) {
            Entry::Occupied(mut occupied) => {
                if token < occupied.get().token {
                    self.refused.fetch_add(1, Relaxed);
                    return false;
                }
                let key = occupied.key().clone();
                occupied.insert(Fence {
                    token,
                    value: value.clone(),
                });
                journal.append(Change::FenceSet { key, token, value });
            }
            Entry::Vacant(vacant) => {
                let key = vacant.key().clone();
                let _guard = vacant.insert(Fence {
                    token,
                    value: value.clone(),
                });
                journal.append(Change::FenceSet { key, token, value });
            }
        }
        self.accepted.fetch_add(1, Relaxed);
        true
    }

    /// See [`crate::State::replay_lane`].
    pub fn replay_lane(&self, key: &[u8], lanes: usize) -> usize {
        self.keys.determine_map(key) % lanes.max(1)
    }

    pub fn get(&self, key: &[u8]) -> Option<Bytes> {
        self.keys.get(key).map(|fence| fence.value.clone())
    }

    /// The highest token the key accepted, 0 if none.
    pub fn token(&self, key: &[u8]) -> u64 {
        self.keys.get(key).map_or(0, |fence| fence.token)
    }

    /// Replays a `FenceSet` (other records are ignored). Applies it only if its token is not
    /// older than the stored one, so replaying over a snapshot converges.
    pub fn apply_change(&self, change: &Change) {
        let Change::FenceSet { key, token, value } = change else {
            return;
        };
        match self.keys.entry(key.clone()) {
            Entry::Occupied(mut occupied) => {
                if *token >= occupied.get().token {
                    occupied.insert(Fence {
                        token: *token,
                        value: value.clone(),
                    });
                }
            }
            Entry::Vacant(vacant) => {
                vacant.insert(Fence {
                    token: *token,
                    value: value.clone(),
                });
            }
        }
    }

    /// One `FenceSet` per key.
    pub fn snapshot(&self, emit: &mut dyn FnMut(Change)) {
        for fence in self.keys.iter() {
            emit(Change::FenceSet {
                key: fence.key().clone(),
                token: fence.token,
                value: fence.value.clone(),
            });
        }
    }

    pub fn stats(&self) -> FenceStats {
        FenceStats {
            keys: self.keys.len() as u64,
            accepted: self.accepted.load(Relaxed),
            refused: self.refused.load(Relaxed),
        }
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::MemoryJournal;

    #[test]
    fn accepts_equal_and_higher_tokens_refuses_lower() {
        let fences = FenceRegister::new();
        let journal = MemoryJournal::default();
        assert_eq!(fences.token(b"k"), 0);
        assert_eq!(fences.get(b"k"), None);
        assert!(fences.set(
            Bytes::from_static(b"k"),
            5,
            Bytes::from_static(b"a"),
            &journal
        ));
        assert!(fences.set(
            Bytes::from_static(b"k"),
            5,
            Bytes::from_static(b"b"),
            &journal
        ));
        assert!(!fences.set(
            Bytes::from_static(b"k"),
            4,
            Bytes::from_static(b"c"),
            &journal
        ));
        assert_eq!(fences.get(b"k"), Some(Bytes::from_static(b"b")));
        assert_eq!(fences.token(b"k"), 5);
        assert!(fences.set(
            Bytes::from_static(b"k"),
            9,
            Bytes::from_static(b"d"),
            &journal
        ));
        assert_eq!(fences.token(b"k"), 9);
        assert_eq!(
            fences.stats(),
            FenceStats {
                keys: 1,
                accepted: 3,
                refused: 1
            }
        );
        assert_eq!(
            journal.changes.lock().len(),
            3,
            "a refused write is not journalled"
        );
    }

    #[test]
    fn replay_and_snapshot_converge() {
        let live = FenceRegister::new();
        let journal = MemoryJournal::default();
        live.set(
            Bytes::from_static(b"a"),
            1,
            Bytes::from_static(b"x"),
            &journal,
        );
        live.set(
            Bytes::from_static(b"b"),
            3,
            Bytes::from_static(b"y"),
            &journal,
        );
        let mut snapshot = Vec::new();
        live.snapshot(&mut |c| snapshot.push(c));
        live.set(
            Bytes::from_static(b"a"),
            2,
            Bytes::from_static(b"z"),
            &journal,
        );
        live.set(
            Bytes::from_static(b"b"),
            1,
            Bytes::from_static(b"no"),
            &journal,
        );

        let replayed = FenceRegister::new();
        for change in journal.changes.lock().iter() {
            replayed.apply_change(change);
        }
        let rebuilt = FenceRegister::new();
        for change in snapshot.iter().chain(journal.changes.lock().iter()) {
            rebuilt.apply_change(change);
        }
        for register in [&replayed, &rebuilt] {
            assert_eq!(register.get(b"a"), Some(Bytes::from_static(b"z")));
            assert_eq!(register.token(b"a"), 2);
            assert_eq!(register.get(b"b"), Some(Bytes::from_static(b"y")));
            assert_eq!(register.token(b"b"), 3);
        }
    }
}
