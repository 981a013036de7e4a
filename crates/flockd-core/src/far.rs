//! The entries a [`crate::places::Places`] table keeps outside its slots, in place order: the
//! few that did not fit within their bound, and during a load the load's own entries.
//!
//! A load (a snapshot's items, then the log after it) brings places in increasing order. Those
//! go at the end of a plain vector, one push each, and a lookup finds them by binary search.
//! Anything else (a place before the greatest, a removal) goes through an ordered map, which
//! first takes the vector's entries (built in one pass from sorted entries when it is empty):
//! every entry moves from the vector to the map at most once, at a B-tree insert's cost or
//! less, and the vector's entries are always after the map's.

use std::collections::BTreeMap;

pub(crate) struct Far<T> {
    /// Entries in increasing place order, every one after the map's: pushed, never removed.
    tail: Vec<(u64, T)>,
    map: BTreeMap<u64, T>,
}

impl<T> Default for Far<T> {
    fn default() -> Self {
        Far {
            tail: Vec::new(),
            map: BTreeMap::new(),
        }
    }
}

impl<T: Clone> Clone for Far<T> {
    fn clone(&self) -> Self {
        Far {
            tail: self.tail.clone(),
            map: self.map.clone(),
        }
    }
}

impl<T> Far<T> {
    pub fn is_empty(&self) -> bool {
        self.tail.is_empty() && self.map.is_empty()
    }

    fn tail_index(&self, place: u64) -> Option<usize> {
        // The common question during a load is about the entry just pushed.
        match self.tail.last() {
            None => None,
            Some((last, _)) if *last == place => Some(self.tail.len() - 1),
            Some((last, _)) if *last < place => None,
            Some(_) => self.tail.binary_search_by_key(&place, |(p, _)| *p).ok(),
        }
    }

    pub fn contains_key(&self, place: u64) -> bool {
        self.tail_index(place).is_some() || self.map.contains_key(&place)
    }

    pub fn get(&self, place: u64) -> Option<&T> {
        match self.tail_index(place) {
            Some(i) => Some(&self.tail[i].1),
            None => self.map.get(&place),
        }
    }

    pub fn get_mut(&mut self, place: u64) -> Option<&mut T> {
        match self.tail_index(place) {
            Some(i) => Some(&mut self.tail[i].1),
            None => self.map.get_mut(&place),
        }
    }

    /// Puts a place that is not here.
    pub fn insert(&mut self, place: u64, value: T) -> &mut T {
        let after_all = match self.tail.last() {
            Some((last, _)) => *last < place,
            None => self
                .map
                .last_key_value()
                .is_none_or(|(last, _)| *last < place),
        };
        if after_all {
            self.tail.push((place, value));
            return &mut self.tail.last_mut().expect("just pushed").1;
        }
        // The tail stays after every entry of the map.
        self.tail_into_map();
        self.map.entry(place).or_insert(value)
    }

    pub fn remove(&mut self, place: u64) -> Option<T> {
        if self.tail_index(place).is_some() {
            self.tail_into_map();
        }
        self.map.remove(&place)
    }

    fn tail_into_map(&mut self) {
        if self.tail.is_empty() {
            return;
        }
        let tail = std::mem::take(&mut self.tail);
        if self.map.is_empty() {
            // Sorted and after each other: built in one pass.
            self.map = tail.into_iter().collect();
        } else {
            self.map.extend(tail);
        }
    }

    /// The entries at `from` and after, in place order.
    pub fn range(&self, from: u64) -> impl Iterator<Item = (u64, &T)> {
        let start = self.tail.partition_point(|(place, _)| *place < from);
        let map = self.map.range(from..).map(|(place, value)| (*place, value));
        let tail = self.tail[start..]
            .iter()
            .map(|(place, value)| (*place, value));
        map.chain(tail)
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = (u64, &mut T)> {
        let map = self.map.iter_mut().map(|(place, value)| (*place, value));
        let tail = self.tail.iter_mut().map(|(place, value)| (*place, value));
        map.chain(tail)
    }
}

impl<T> IntoIterator for Far<T> {
    type Item = (u64, T);
    type IntoIter = std::iter::Chain<
        std::collections::btree_map::IntoIter<u64, T>,
        std::vec::IntoIter<(u64, T)>,
    >;

    /// Every entry, in place order.
    fn into_iter(self) -> Self::IntoIter {
        self.map.into_iter().chain(self.tail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pushed_and_mapped_entries_come_out_in_order_and_a_removal_keeps_it() {
        let mut far = Far::<u64>::default();
        for place in [10, 20, 30, 40] {
            far.insert(place, place);
        }
        assert!(far.map.is_empty(), "increasing places are pushed");
        assert_eq!(far.get(30), Some(&30));
        assert_eq!(far.get(35), None);
        // A place before the greatest: the tail goes into the map first.
        far.insert(25, 25);
        assert!(far.tail.is_empty());
        assert_eq!(far.map.len(), 5);
        far.insert(50, 50);
        assert_eq!(far.tail.len(), 1, "after every place again: pushed");
        assert_eq!(far.get(25), Some(&25));
        *far.get_mut(50).unwrap() += 1;
        let from_21: Vec<u64> = far.range(21).map(|(p, _)| p).collect();
        assert_eq!(from_21, [25, 30, 40, 50]);
        let all: Vec<u64> = far.range(0).map(|(p, _)| p).collect();
        assert_eq!(all, [10, 20, 25, 30, 40, 50]);
        assert_eq!(far.remove(30), Some(30));
        assert_eq!(far.remove(50), Some(51));
        assert!(
            far.tail.is_empty(),
            "a removal from the tail puts it in the map"
        );
        assert_eq!(far.remove(30), None);
        far.insert(60, 60);
        let all: Vec<(u64, u64)> = far.clone().into_iter().collect();
        assert_eq!(all, [(10, 10), (20, 20), (25, 25), (40, 40), (60, 60)]);
        for (_, value) in far.iter_mut() {
            *value = 0;
        }
        assert!(far.into_iter().all(|(_, v)| v == 0));
    }
}
