//! The fence register: FENCE.SET/GET/TOKEN, a key's value guarded by the highest token it
//! accepted. The resource-side half of fencing, without Lua: a write carrying an older token
//! than one already accepted is refused atomically.

use bytes::Bytes;

use crate::item::SnapshotItem;
use crate::stripes::Stripes;

#[derive(Clone)]
struct Fence {
    token: u64,
    value: Bytes,
}

/// Counts for INFO.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FenceStats {
    pub keys: u64,
    pub accepted: u64,
    pub refused: u64,
}

/// No `Clone`: a snapshot takes [`FenceRegister::cut`].
impl std::ops::AddAssign<&FenceStats> for FenceStats {
    fn add_assign(&mut self, other: &FenceStats) {
        self.keys += other.keys;
        self.accepted += other.accepted;
        self.refused += other.refused;
    }
}

#[derive(Default)]
pub(crate) struct FenceRegister {
    /// In SCAN's walk order (keys are never removed).
    keys: Stripes<Fence>,
    accepted: u64,
    refused: u64,
}

impl FenceRegister {
    /// The fence of `key`, created if it is new.
    fn fence_or_new(&mut self, key: &[u8]) -> &mut Fence {
        self.keys.get_or_insert_with(key, || Fence {
            token: 0,
            value: Bytes::new(),
        })
    }

    /// Stores `value` at `token` if `token` >= the key's highest accepted token (0 for a new
    /// key); true if stored.
    pub fn set(&mut self, key: &[u8], token: u64, value: &Bytes) -> bool {
        let fence = self.fence_or_new(key);
        if token < fence.token {
            self.refused += 1;
            return false;
        }
        fence.token = token;
        fence.value = value.clone();
        self.accepted += 1;
        true
    }

    pub fn contains(&self, key: &[u8]) -> bool {
        self.keys.get(key).is_some()
    }

    /// Visits the keys from place `cursor` on (see [`Stripes::walk`]).
    pub fn walk(&self, cursor: u64, count: usize, mut visit: impl FnMut(&[u8])) -> Option<u64> {
        self.keys.walk(cursor, count, |key, _| visit(key))
    }

    /// The keys and counters, detached for a snapshot: a copy of the stripe pointers.
    pub fn cut(&self) -> FenceRegister {
        FenceRegister {
            keys: self.keys.clone(),
            accepted: self.accepted,
            refused: self.refused,
        }
    }

    pub fn get(&self, key: &[u8]) -> Option<Bytes> {
        self.keys.get(key).map(|fence| fence.value.clone())
    }

    /// The highest token the key accepted, 0 if none.
    pub fn token(&self, key: &[u8]) -> u64 {
        self.keys.get(key).map_or(0, |fence| fence.token)
    }

    /// Restores one key (from a snapshot, or a first-format record): kept only if its token is
    /// not older than the stored one, so restoring over newer state converges.
    pub fn restore(&mut self, key: &[u8], token: u64, value: &[u8]) {
        let fence = self.fence_or_new(key);
        if token >= fence.token {
            fence.token = token;
            fence.value = Bytes::copy_from_slice(value);
        }
    }

    /// A restore starts: see [`Stripes::begin_load`].
    pub fn begin_load(&mut self) {
        self.keys.begin_load();
    }

    /// A restore ends: see [`Stripes::end_load`].
    pub fn end_load(&mut self) {
        self.keys.end_load();
    }

    pub fn snapshot(&self, emit: &mut dyn FnMut(SnapshotItem<'_>)) {
        for (key, fence) in self.keys.iter() {
            emit(SnapshotItem::Fence {
                key: key.as_bytes(),
                token: fence.token,
                value: &fence.value,
            });
        }
    }

    pub fn stats(&self) -> FenceStats {
        FenceStats {
            keys: self.keys.len() as u64,
            accepted: self.accepted,
            refused: self.refused,
        }
    }

    pub fn reset_stats(&mut self) {
        self.accepted = 0;
        self.refused = 0;
    }

    pub fn digest(&self) -> u64 {
        use std::hash::BuildHasher;
        let seed = foldhash::fast::FixedState::with_seed(0x66_656e_6365);
        self.keys.iter().fold(0u64, |sum, (key, fence)| {
            sum.wrapping_add(seed.hash_one((key.as_bytes(), fence.token, &fence.value[..])))
        })
    }
}
