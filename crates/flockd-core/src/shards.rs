//! A hash map split into shards that are each behind an `Arc`, so that a snapshot of the whole
//! map is a copy of the shard pointers: apply never waits for a snapshot to be written out. The
//! first write to a shard a snapshot still holds copies that shard (one 256th of the map), like
//! the pages of a forked Redis.
//!
//! The shard of a key comes from a hash with a fixed seed, so it is the same on every machine;
//! within a shard the table is seeded per process, and nothing about the state depends on the
//! order in which a shard iterates.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Arc;

use crate::name::Name;

pub(crate) const SHARDS: usize = 256;

pub(crate) type Shard<V> = HashMap<Name, V, foldhash::fast::RandomState>;

#[derive(Clone)]
pub(crate) struct Shards<V: Clone> {
    shards: Box<[Arc<Shard<V>>]>,
}

impl<V: Clone> Default for Shards<V> {
    fn default() -> Self {
        Shards {
            shards: (0..SHARDS).map(|_| Arc::new(Shard::default())).collect(),
        }
    }
}

const SEED: foldhash::fast::FixedState = foldhash::fast::FixedState::with_seed(0x666c_6f63_6b64);

/// Which shard a key lives in.
pub(crate) fn shard_of(key: &[u8]) -> usize {
    (SEED.hash_one(key) % SHARDS as u64) as usize
}

/// A key's place in a full walk of the map: its shard in the top 8 of 63 bits, then 55 more
/// bits of its hash. The same on every machine and for the life of the key, whatever the map
/// does meanwhile, so a cursor of such places never skips a key that stays (what FLOCK.SCAN
/// promises). Places stay below 2^63 so that SCAN, which walks lock names and then fence keys,
/// can mark the space in a cursor's top bit and still fit Redis's 64-bit cursors.
pub(crate) fn scan_key(key: &[u8]) -> u64 {
    let hash = SEED.hash_one(key);
    ((hash % SHARDS as u64) << 55) | (hash >> 9)
}

impl<V: Clone> Shards<V> {
    pub fn get(&self, key: &[u8]) -> Option<&V> {
        self.shards[shard_of(key)].get(key)
    }

    pub fn get_mut(&mut self, key: &[u8]) -> Option<&mut V> {
        let shard = &mut self.shards[shard_of(key)];
        // A shard a snapshot shares is copied only for a key it holds.
        if Arc::get_mut(shard).is_none() && !shard.contains_key(key) {
            return None;
        }
        Arc::make_mut(shard).get_mut(key)
    }

    pub fn get_or_insert_with(&mut self, key: &[u8], make: impl FnOnce() -> V) -> &mut V {
        let shard = Arc::make_mut(&mut self.shards[shard_of(key)]);
        // A short name is built without an allocation, so one `entry` lookup is cheapest; a long
        // one would be boxed just to be looked up.
        if !Name::is_inline(key) && shard.contains_key(key) {
            return shard.get_mut(key).expect("checked above");
        }
        shard.entry(Name::from(key)).or_insert_with(make)
    }

    pub fn remove(&mut self, key: &[u8]) -> Option<V> {
        let shard = &mut self.shards[shard_of(key)];
        if !shard.contains_key(key) {
            return None;
        }
        Arc::make_mut(shard).remove(key)
    }

    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.len()).sum()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&Name, &V)> {
        self.shards.iter().flat_map(|s| s.iter())
    }

    /// Every shard, writable (copying those a snapshot still holds).
    pub fn shards_mut(&mut self) -> impl Iterator<Item = &mut Shard<V>> {
        self.shards.iter_mut().map(Arc::make_mut)
    }
}
