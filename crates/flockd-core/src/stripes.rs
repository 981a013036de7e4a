//! A map from names to values, split into stripes that are each behind an `Arc`, so that a
//! snapshot of the whole map is a copy of the stripe pointers: apply never waits for a snapshot
//! to be written out. The first write to a stripe a snapshot still holds copies that stripe (one
//! 256th of the map), like the pages of a forked Redis.
//!
//! Every key has a place: its stripe in the top 8 of 63 bits, then 55 more bits of its hash,
//! from a hash with a fixed seed, so the same on every machine and for the life of the key.
//! Each stripe is ordered by (place, name), so the whole map is in place order, and that order
//! is also SCAN's walk: a cursor is a place, and a walk from it never skips a key that stays
//! (what SCAN and FLOCK.SCAN promise) whatever else is inserted or removed meanwhile. A hash
//! table would find a key with one or two fewer cache misses, but its order changes when it
//! grows, so the walk needed an ordered index of every name beside it: 44 more bytes per name
//! and a second insert per new name. A lookup compares places, integers, and names only on the
//! (rare) tie.

use std::collections::BTreeMap;
use std::hash::BuildHasher;
use std::ops::Bound;
use std::sync::Arc;

use crate::name::Name;

pub(crate) const STRIPES: usize = 256;

/// Bits of a place below the stripe's.
const SHARD_SHIFT: u32 = 49;

type Stripe<V> = BTreeMap<(u64, Name), V>;

#[derive(Clone)]
pub(crate) struct Stripes<V: Clone> {
    stripes: Box<[Arc<Stripe<V>>]>,
}

impl<V: Clone> Default for Stripes<V> {
    fn default() -> Self {
        Stripes {
            stripes: (0..STRIPES).map(|_| Arc::new(Stripe::default())).collect(),
        }
    }
}

const SEED: foldhash::fast::FixedState = foldhash::fast::FixedState::with_seed(0x666c_6f63_6b64);

/// Which stripe a key lives in.
#[cfg(test)]
pub(crate) fn stripe_of(key: &[u8]) -> usize {
    stripe_of_place(place_of(key))
}

fn stripe_of_place(place: u64) -> usize {
    (place >> SHARD_SHIFT) as usize
}

/// A key's place in a full walk of the map (see the module's note). Places stay below 2^57
/// ([`PLACE_BITS`]) so that SCAN can mark in a cursor's top bits which space it walks (lock
/// names, then fence keys) and, on a multi-group cluster node, which group, and still fit
/// Redis's 64-bit cursors.
pub(crate) fn place_of(key: &[u8]) -> u64 {
    let hash = SEED.hash_one(key);
    ((hash % STRIPES as u64) << SHARD_SHIFT) | (hash >> (64 - SHARD_SHIFT))
}

/// The bits a place takes: 8 of the stripe, 49 of the hash.
pub const PLACE_BITS: u32 = SHARD_SHIFT + 8;

/// The smallest key at `place`: the empty name sorts first.
fn first_at(place: u64) -> (u64, Name) {
    (place, Name::from(&b""[..]))
}

impl<V: Clone> Stripes<V> {
    pub fn get(&self, key: &[u8]) -> Option<&V> {
        let place = place_of(key);
        let stripe = &self.stripes[stripe_of_place(place)];
        if Name::is_inline(key) {
            // An inline name is built without an allocation: one plain descent.
            return stripe.get(&(place, Name::from(key)));
        }
        at_place(stripe, place)
            .find(|((_, name), _)| name.as_bytes() == key)
            .map(|(_, value)| value)
    }

    pub fn get_mut(&mut self, key: &[u8]) -> Option<&mut V> {
        let place = place_of(key);
        let stripe = &mut self.stripes[stripe_of_place(place)];
        // A stripe a snapshot shares is copied only for a key it holds.
        if Arc::get_mut(stripe).is_none() && !contains(stripe, place, key) {
            return None;
        }
        let stripe = Arc::make_mut(stripe);
        if Name::is_inline(key) {
            return stripe.get_mut(&(place, Name::from(key)));
        }
        stripe
            .range_mut(first_at(place)..first_at(place + 1))
            .find(|((_, name), _)| name.as_bytes() == key)
            .map(|(_, value)| value)
    }

    pub fn get_or_insert_with(&mut self, key: &[u8], make: impl FnOnce() -> V) -> &mut V {
        let place = place_of(key);
        let stripe = Arc::make_mut(&mut self.stripes[stripe_of_place(place)]);
        // A long name would be boxed just to be looked up: look first, box only a new one.
        if !Name::is_inline(key) && contains(stripe, place, key) {
            return stripe
                .range_mut(first_at(place)..first_at(place + 1))
                .find(|((_, name), _)| name.as_bytes() == key)
                .map(|(_, value)| value)
                .expect("checked above");
        }
        stripe.entry((place, Name::from(key))).or_insert_with(make)
    }

    pub fn remove(&mut self, key: &[u8]) -> Option<V> {
        let place = place_of(key);
        let stripe = &mut self.stripes[stripe_of_place(place)];
        if !contains(stripe, place, key) {
            return None;
        }
        Arc::make_mut(stripe).remove(&(place, Name::from(key)))
    }

    pub fn len(&self) -> usize {
        self.stripes.iter().map(|s| s.len()).sum()
    }

    /// Every key and value, in place order.
    pub fn iter(&self) -> impl Iterator<Item = (&Name, &V)> {
        self.stripes
            .iter()
            .flat_map(|s| s.iter().map(|((_, name), value)| (name, value)))
    }

    /// Every key and value, writable (copying the stripes a snapshot still holds).
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&Name, &mut V)> {
        self.stripes.iter_mut().flat_map(|s| {
            Arc::make_mut(s)
                .iter_mut()
                .map(|((_, name), value)| (name, value))
        })
    }

    /// Visits the keys from place `cursor` on, in place order, until `count` were visited (and
    /// the keys sharing the last one's place: a cursor is a place, so they must come in the same
    /// call). The cursor to go on with, or `None` once every place was visited. O(log n +
    /// count) per call.
    pub fn walk(&self, cursor: u64, count: usize, mut visit: impl FnMut(&[u8], &V)) -> Option<u64> {
        let mut looked = 0;
        let mut last = None;
        let first_shard = stripe_of_place(cursor);
        for stripe in self.stripes.get(first_shard..)?.iter() {
            for ((place, name), value) in stripe.range(first_at(cursor)..) {
                if looked >= count.max(1)
                    && let Some(last) = last
                    && last != *place
                {
                    // `place` is after `last`, so `last + 1` does not overflow.
                    return Some(last + 1);
                }
                last = Some(*place);
                looked += 1;
                visit(name.as_bytes(), value);
            }
        }
        None
    }
}

/// The entries of one place: almost always none or one.
fn at_place<V>(stripe: &Stripe<V>, place: u64) -> impl Iterator<Item = (&(u64, Name), &V)> {
    stripe.range((
        Bound::Included(first_at(place)),
        Bound::Excluded(first_at(place + 1)),
    ))
}

fn contains<V>(stripe: &Stripe<V>, place: u64, key: &[u8]) -> bool {
    if Name::is_inline(key) {
        return stripe.contains_key(&(place, Name::from(key)));
    }
    at_place(stripe, place).any(|((_, name), _)| name.as_bytes() == key)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: usize) -> Vec<u8> {
        // Every third key is too long to be inline.
        if i.is_multiple_of(3) {
            format!("a-long-name-that-is-boxed-{i}").into_bytes()
        } else {
            format!("k{i}").into_bytes()
        }
    }

    #[test]
    fn keys_short_and_long_are_found_changed_and_removed_by_their_bytes() {
        let mut map = Stripes::<usize>::default();
        for i in 0..3000 {
            *map.get_or_insert_with(&key(i), || 0) += i;
        }
        // A second insert finds the key instead.
        *map.get_or_insert_with(&key(3), || 1_000) += 1;
        assert_eq!(map.len(), 3000);
        assert_eq!(map.get(&key(3)), Some(&4));
        assert_eq!(map.get(&key(4)), Some(&4));
        *map.get_mut(&key(6)).unwrap() = 60;
        assert_eq!(map.get(&key(6)), Some(&60));
        assert_eq!(map.get(b"missing"), None);
        assert_eq!(map.remove(&key(6)), Some(60));
        assert_eq!(map.remove(&key(7)), Some(7));
        assert_eq!(map.remove(&key(7)), None);
        assert_eq!(
            (map.len(), map.get(&key(6)), map.get(&key(7))),
            (2998, None, None)
        );
    }

    #[test]
    fn a_snapshot_keeps_its_shards_as_they_were() {
        let mut map = Stripes::<usize>::default();
        map.get_or_insert_with(b"a", || 1);
        let snapshot = map.clone();
        *map.get_mut(b"a").unwrap() = 2;
        map.get_or_insert_with(b"b", || 3);
        // A miss does not copy the stripe it looked in.
        assert!(map.get_mut(b"c").is_none());
        assert_eq!((snapshot.get(b"a"), snapshot.get(b"b")), (Some(&1), None));
        assert_eq!((map.get(b"a"), map.get(b"b")), (Some(&2), Some(&3)));
    }

    #[test]
    fn a_walk_visits_every_key_once_in_place_order_across_calls() {
        let mut map = Stripes::<usize>::default();
        for i in 0..2000 {
            map.get_or_insert_with(&key(i), || i);
        }
        let mut seen = Vec::new();
        let mut cursor = 0;
        let mut calls = 0;
        loop {
            let next = map.walk(cursor, 7, |name, value| seen.push((name.to_vec(), *value)));
            calls += 1;
            match next {
                Some(place) => cursor = place,
                None => break,
            }
        }
        assert!(calls >= 2000 / 7, "{calls} calls");
        let places: Vec<u64> = seen.iter().map(|(name, _)| place_of(name)).collect();
        assert!(places.is_sorted(), "in place order");
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), 2000, "each key once");
        assert!(seen.iter().all(|(name, value)| *name == key(*value)));
        assert_eq!(map.iter().count(), 2000);
    }
}
