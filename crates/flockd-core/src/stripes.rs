//! A map from names to values, split into stripes that are each behind an `Arc`, so that a
//! snapshot of the whole map is a copy of the stripe pointers: apply never waits for a snapshot
//! to be written out. The first write to a stripe a snapshot still holds copies that stripe (one
//! 256th of the map), like the pages of a forked Redis.
//!
//! Every key has a place: its stripe in the top 8 of 57 bits, then 49 more bits of its hash,
//! from a hash with a fixed seed, so the same on every machine and for the life of the key.
//! Each stripe is a table keyed by place ([`Places`]: a hash table by the place's hash bits
//! that keeps its entries in place order, through growth too; the keys of one place, almost
//! never more than one, share its value), so the whole map is in place order, and that order is
//! also SCAN's walk: a cursor is a place, and a walk from it never skips a key that stays (what
//! SCAN and FLOCK.SCAN promise) whatever else is inserted or removed meanwhile. A lookup
//! compares places, integers, and names at the end.

use std::hash::BuildHasher;
use std::sync::Arc;

use crate::name::Name;
use crate::places::{PLACE_HASH_BITS, Places};

pub(crate) const STRIPES: usize = 256;

/// Bits of a place below the stripe's.
const SHARD_SHIFT: u32 = PLACE_HASH_BITS;

/// Keyed by the place alone (an integer to compare); the names sit in the values.
type Stripe<V> = Places<Slot<V>>;

/// The keys at one place: almost always one. Two names share a place only if 57 bits of their
/// hashes agree.
#[derive(Clone)]
enum Slot<V> {
    One((Name, V)),
    Shared(Vec<(Name, V)>),
}

impl<V> Slot<V> {
    fn keys(&self) -> &[(Name, V)] {
        match self {
            Slot::One(pair) => std::slice::from_ref(pair),
            Slot::Shared(pairs) => pairs,
        }
    }

    fn keys_mut(&mut self) -> &mut [(Name, V)] {
        match self {
            Slot::One(pair) => std::slice::from_mut(pair),
            Slot::Shared(pairs) => pairs,
        }
    }

    fn position(&self, key: &[u8]) -> Option<usize> {
        self.keys()
            .iter()
            .position(|(name, _)| name.as_bytes() == key)
    }
}

#[derive(Clone)]
pub(crate) struct Stripes<V: Clone> {
    stripes: Box<[Arc<Stripe<V>>]>,
    /// Keys beyond the first at their place, so that `len` is a sum of the stripes' lengths.
    sharing: usize,
    /// Between [`Stripes::begin_load`] and [`Stripes::end_load`]: new keys go far (see
    /// [`Places::get_or_insert_far`]).
    loading: bool,
}

impl<V: Clone> Default for Stripes<V> {
    fn default() -> Self {
        Stripes {
            stripes: (0..STRIPES).map(|_| Arc::new(Stripe::default())).collect(),
            sharing: 0,
            loading: false,
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

impl<V: Clone> Stripes<V> {
    pub fn get(&self, key: &[u8]) -> Option<&V> {
        self.get_at(place_of(key), key)
    }

    pub fn get_mut(&mut self, key: &[u8]) -> Option<&mut V> {
        self.get_mut_at(place_of(key), key)
    }

    pub fn get_or_insert_with(&mut self, key: &[u8], make: impl FnOnce() -> V) -> &mut V {
        self.get_or_insert_at(place_of(key), key, make)
    }

    pub fn remove(&mut self, key: &[u8]) -> Option<V> {
        self.remove_at(place_of(key), key)
    }

    // The `_at` forms take the key's place, so that a test can make two keys share one.

    fn get_at(&self, place: u64, key: &[u8]) -> Option<&V> {
        let slot = self.stripes[stripe_of_place(place)].get(place)?;
        slot.keys()
            .iter()
            .find(|(name, _)| name.as_bytes() == key)
            .map(|(_, value)| value)
    }

    fn get_mut_at(&mut self, place: u64, key: &[u8]) -> Option<&mut V> {
        let stripe = &mut self.stripes[stripe_of_place(place)];
        // A stripe a snapshot shares is copied only for a key it holds.
        let index = stripe.get(place)?.position(key)?;
        let slot = Arc::make_mut(stripe).get_mut(place)?;
        Some(&mut slot.keys_mut()[index].1)
    }

    fn get_or_insert_at(&mut self, place: u64, key: &[u8], make: impl FnOnce() -> V) -> &mut V {
        let stripe = Arc::make_mut(&mut self.stripes[stripe_of_place(place)]);
        let mut make = Some(make);
        let make_slot = || {
            let make = make.take().expect("called once");
            Slot::One((Name::from(key), make()))
        };
        let (slot, made) = if self.loading {
            stripe.get_or_insert_far(place, make_slot)
        } else {
            stripe.get_or_insert_with(place, make_slot)
        };
        if made {
            return &mut slot.keys_mut()[0].1;
        }
        let index = match slot.position(key) {
            Some(index) => index,
            None => {
                self.sharing += 1;
                let make = make.take().expect("not called for a place there");
                let pair = (Name::from(key), make());
                match slot {
                    Slot::Shared(pairs) => pairs.push(pair),
                    Slot::One(_) => {
                        let Slot::One(first) = std::mem::replace(slot, Slot::Shared(Vec::new()))
                        else {
                            unreachable!("matched above")
                        };
                        *slot = Slot::Shared(vec![first, pair]);
                    }
                }
                slot.keys().len() - 1
            }
        };
        &mut slot.keys_mut()[index].1
    }

    fn remove_at(&mut self, place: u64, key: &[u8]) -> Option<V> {
        let stripe = &mut self.stripes[stripe_of_place(place)];
        let index = stripe.get(place)?.position(key)?;
        let stripe = Arc::make_mut(stripe);
        let slot = stripe.get_mut(place)?;
        let Slot::Shared(pairs) = slot else {
            let Slot::One((_, value)) = stripe.remove(place)? else {
                unreachable!("one key at the place")
            };
            return Some(value);
        };
        self.sharing -= 1;
        let (_, value) = pairs.remove(index);
        if pairs.len() == 1 {
            *slot = Slot::One(pairs.pop().expect("one left"));
        }
        Some(value)
    }

    /// A load (a snapshot's keys in place order, then the log after it) starts: new keys go
    /// far ([`Places::get_or_insert_far`]), until [`Stripes::end_load`].
    pub fn begin_load(&mut self) {
        self.loading = true;
    }

    /// The load is over: every stripe's keys in a table sized for them.
    pub fn end_load(&mut self) {
        if std::mem::take(&mut self.loading) {
            for stripe in self.stripes.iter_mut() {
                Arc::make_mut(stripe).settle();
            }
        }
    }

    pub fn len(&self) -> usize {
        self.stripes.iter().map(|s| s.len()).sum::<usize>() + self.sharing
    }

    /// Every key and value, in place order.
    pub fn iter(&self) -> impl Iterator<Item = (&Name, &V)> {
        self.stripes.iter().flat_map(|s| {
            s.values()
                .flat_map(|slot| slot.keys().iter().map(|(name, value)| (name, value)))
        })
    }

    /// Every key and value, writable (copying the stripes a snapshot still holds).
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&Name, &mut V)> {
        self.stripes.iter_mut().flat_map(|s| {
            Arc::make_mut(s).values_mut().flat_map(|slot| {
                slot.keys_mut()
                    .iter_mut()
                    .map(|(name, value)| (&*name, value))
            })
        })
    }

    /// Visits the keys from place `cursor` on, in place order, until `count` were visited (and
    /// the keys sharing the last one's place: a cursor is a place, so they must come in the same
    /// call). The cursor to go on with, or `None` once every place was visited. A call reads
    /// about `count` slots past the cursor's home (and the empty stripes it crosses).
    pub fn walk(&self, cursor: u64, count: usize, mut visit: impl FnMut(&[u8], &V)) -> Option<u64> {
        let mut looked = 0;
        let mut last = None;
        let first_shard = stripe_of_place(cursor);
        for (n, stripe) in self.stripes.get(first_shard..)?.iter().enumerate() {
            // Every place of a later stripe is after the cursor.
            let from = if n == 0 { cursor } else { 0 };
            for (place, slot) in stripe.range_from(from) {
                if looked >= count.max(1)
                    && let Some(last) = last
                {
                    // `place` is after `last`, so `last + 1` does not overflow.
                    return Some(last + 1);
                }
                last = Some(place);
                for (name, value) in slot.keys() {
                    looked += 1;
                    visit(name.as_bytes(), value);
                }
            }
        }
        None
    }
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

    #[test]
    fn keys_that_share_a_place_are_kept_found_walked_and_removed_apart() {
        let mut map = Stripes::<usize>::default();
        let place = place_of(b"a");
        // Three keys at one place (as if 57 bits of their hashes agreed), one beside them.
        for (i, key) in [&b"a"[..], b"b", b"a-long-name-that-is-boxed-at-one-place"]
            .iter()
            .enumerate()
        {
            *map.get_or_insert_at(place, key, || i) += 10;
        }
        *map.get_or_insert_at(place, b"b", || 99) += 1;
        map.get_or_insert_with(b"elsewhere", || 7);
        assert_eq!(map.len(), 4);
        assert_eq!(map.get_at(place, b"b"), Some(&12));
        assert_eq!(map.get_at(place, b"missing"), None);
        *map.get_mut_at(place, b"a").unwrap() = 5;

        // A snapshot keeps the place as it was.
        let snapshot = map.clone();
        assert_eq!(map.remove_at(place, b"a"), Some(5));
        assert_eq!(map.remove_at(place, b"a"), None);
        assert_eq!(snapshot.get_at(place, b"a"), Some(&5));
        assert_eq!((map.len(), snapshot.len()), (3, 4));

        // A walk hands every key of one place out in the same call.
        let mut seen = Vec::new();
        let next = map.walk(place, 1, |name, value| seen.push((name.to_vec(), *value)));
        let after = (place_of(b"elsewhere") > place).then_some(place + 1);
        assert_eq!(next, after, "{seen:?}");
        assert_eq!(seen.len(), 2, "{seen:?}");
        assert_eq!(map.remove_at(place, b"b"), Some(12));
        assert_eq!(
            map.get_at(place, b"a-long-name-that-is-boxed-at-one-place"),
            Some(&12)
        );
        assert_eq!(
            map.remove_at(place, b"a-long-name-that-is-boxed-at-one-place"),
            Some(12)
        );
        assert_eq!(map.len(), 1);
        assert_eq!(map.iter().count(), 1);
    }
}
