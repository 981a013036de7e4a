//! One stripe's keys by place: a hash table that is also in place order. A place's low
//! [`PLACE_HASH_BITS`] are hash bits, and a table whose entries sit in place order at or after
//! their home bucket, with no empty slot between a home and its entry (ordered linear probing,
//! as Amble and Knuth described it), finds a place by looking from its home at the next slot
//! or two (one or two cache misses, where a B-tree of a few thousand entries takes four), and
//! walks in place order by reading its slots in order. A home is the place's hash bits scaled
//! to the bucket count, which keeps their order whatever the count: growing by half again keeps
//! the entries' order, and a SCAN cursor, a place, means the same before and after.
//!
//! Every step is bounded, whatever the names: the hash's seed is fixed and public (replicas and
//! restarts must agree on the walk), so names can be chosen to crowd one stretch of the table.
//! No entry sits more than [`MAX_RUN`] slots past its home, so a lookup reads at most that many;
//! an insert shifts at most [`MAX_SHIFT`] entries, and the one entry that would go past its
//! bound or past that count moves beside the table, in place order ([`Far`]), looked into on
//! a miss while it holds anything and merged into every walk; a growth puts its entries back
//! where they fit. A removal pulls back at most [`MAX_SHIFT`] entries and leaves a tombstone
//! where it stops early.
//!
//! A load (a snapshot's places come in increasing order, which would crowd the front of a
//! table sized for the entries so far) puts every new entry far, where increasing places are
//! a push each, and [`Places::settle`] builds the table at its size in one pass at the end.
//!
//! No slot wraps around to the front: an entry pushed past the last bucket goes into slots
//! added after it, which a growth folds back in.

use crate::far::Far;

/// The bits of a place under its stripe's: what picks the home bucket.
pub(crate) const PLACE_HASH_BITS: u32 = 49;
const HASH_MASK: u64 = (1 << PLACE_HASH_BITS) - 1;
/// The fewest buckets a table that holds anything has.
const MIN_BUCKETS: usize = 8;
/// The hash bits a home is scaled from: a 32-bit fraction times the bucket count fits 64 bits.
const HOME_BITS: u32 = 32;
/// The farthest an entry sits past its home.
const MAX_RUN: usize = 32;
/// The most entries an insert or a removal moves.
const MAX_SHIFT: usize = 64;

#[derive(Clone)]
enum Cell<T> {
    Empty,
    /// A removed entry's slot, where a removal stopped pulling entries back: taken as full by
    /// a lookup (entries past it may have their home before it), as empty by an insert. Its
    /// place keeps the table's order.
    Gone(u64),
    Full(u64, T),
}

impl<T> Cell<T> {
    fn place(&self) -> Option<u64> {
        match self {
            Cell::Empty => None,
            Cell::Gone(place) | Cell::Full(place, _) => Some(*place),
        }
    }
}

#[derive(Clone)]
pub(crate) struct Places<T> {
    /// `buckets` home slots, then any overflow past the last one.
    slots: Vec<Cell<T>>,
    /// 0 while empty.
    buckets: usize,
    /// Entries that did not fit within their bound; almost always none.
    far: Far<T>,
    /// Entries, in the table and far.
    len: usize,
    /// Slots that are not empty (entries and tombstones): what decides a growth.
    used: usize,
}

impl<T> Default for Places<T> {
    fn default() -> Self {
        Places {
            slots: Vec::new(),
            buckets: 0,
            far: Far::default(),
            len: 0,
            used: 0,
        }
    }
}

impl<T> Places<T> {
    pub fn len(&self) -> usize {
        self.len
    }

    fn home(&self, place: u64) -> usize {
        let fraction = (place & HASH_MASK) >> (PLACE_HASH_BITS - HOME_BITS);
        ((fraction * self.buckets as u64) >> HOME_BITS) as usize
    }

    /// Where `place` is in the table (`Ok`), or where it would go (`Err`): the first slot from
    /// its home that is empty, or holds a later place, or is its own tombstone.
    fn find(&self, place: u64) -> Result<usize, usize> {
        let mut i = self.home(place);
        while let Some(cell) = self.slots.get(i) {
            match cell {
                Cell::Empty => break,
                Cell::Full(at, _) if *at == place => return Ok(i),
                Cell::Gone(at) | Cell::Full(at, _) if *at >= place => break,
                _ => i += 1,
            }
        }
        Err(i)
    }

    pub fn get(&self, place: u64) -> Option<&T> {
        match self.find(place) {
            Ok(i) => match &self.slots[i] {
                Cell::Full(_, value) => Some(value),
                _ => unreachable!("found full"),
            },
            Err(_) if self.far.is_empty() => None,
            Err(_) => self.far.get(place),
        }
    }

    pub fn get_mut(&mut self, place: u64) -> Option<&mut T> {
        match self.find(place) {
            Ok(i) => match &mut self.slots[i] {
                Cell::Full(_, value) => Some(value),
                _ => unreachable!("found full"),
            },
            Err(_) if self.far.is_empty() => None,
            Err(_) => self.far.get_mut(place),
        }
    }

    /// The value at `place`, made by `make` if there was none; `true` if it was made.
    pub fn get_or_insert_with(&mut self, place: u64, make: impl FnOnce() -> T) -> (&mut T, bool) {
        let (at, made) = match self.find(place) {
            Ok(i) => (Some(i), false),
            Err(_) if self.far.contains_key(place) => (None, false),
            Err(_) => (self.insert_new(place, make()), true),
        };
        let value = match at {
            Some(i) => match &mut self.slots[i] {
                Cell::Full(_, value) => value,
                _ => unreachable!("found or just put there"),
            },
            None => self
                .far
                .get_mut(place)
                .expect("far, found or just put there"),
        };
        (value, made)
    }

    /// Like [`Places::get_or_insert_with`], but a new place goes far. A load's places come in
    /// increasing order, and a table sized for the entries so far has the later places' homes
    /// in its first slots, where they would crowd past their bound and go far one by one, each
    /// after a search and shift; far pushes them on a vector instead, and [`Places::settle`]
    /// puts them all in a table of the right size in one pass.
    pub fn get_or_insert_far(&mut self, place: u64, make: impl FnOnce() -> T) -> (&mut T, bool) {
        if let Ok(i) = self.find(place) {
            let Cell::Full(_, value) = &mut self.slots[i] else {
                unreachable!("found full")
            };
            return (value, false);
        }
        if self.far.contains_key(place) {
            return (self.far.get_mut(place).expect("far has it"), false);
        }
        self.len += 1;
        (self.far.insert(place, make()), true)
    }

    /// Puts far's entries back in the table, sized for every entry held (half again as many
    /// buckets, as a table that grew by itself has on average): the end of a load.
    pub fn settle(&mut self) {
        if !self.far.is_empty() {
            self.regrow((self.len + self.len / 2).max(MIN_BUCKETS));
        }
    }

    /// Puts a place that is not there in the table (its slot, `Some`) or far (`None`).
    fn insert_new(&mut self, place: u64, value: T) -> Option<usize> {
        self.len += 1;
        // Growing at 80% keeps the runs short (a few slots on average).
        if (self.used + 1) * 5 > self.buckets * 4 {
            self.regrow((self.buckets + self.buckets / 2).max(MIN_BUCKETS));
        }
        let Err(at) = self.find(place) else {
            unreachable!("a new place")
        };
        if at - self.home(place) > MAX_RUN {
            self.far.insert(place, value);
            return None;
        }
        // The slot the entries from `at` on shift into: the first empty slot or tombstone, or
        // the entry that would go past its bound or past the shift's limit (which goes far).
        let mut end = at;
        loop {
            let Some(cell) = self.slots.get(end) else {
                self.push_overflow();
                self.used += 1;
                break;
            };
            match cell {
                Cell::Empty => {
                    self.used += 1;
                    break;
                }
                Cell::Gone(_) => break,
                Cell::Full(held, _) => {
                    if end + 1 - self.home(*held) > MAX_RUN || end - at >= MAX_SHIFT {
                        let Cell::Full(held, moved) =
                            std::mem::replace(&mut self.slots[end], Cell::Empty)
                        else {
                            unreachable!("full")
                        };
                        self.far.insert(held, moved);
                        break;
                    }
                    end += 1;
                }
            }
        }
        self.slots[at..=end].rotate_right(1);
        self.slots[at] = Cell::Full(place, value);
        Some(at)
    }

    pub fn remove(&mut self, place: u64) -> Option<T> {
        let value = match self.find(place) {
            Ok(at) => self.take_at(at),
            Err(_) => self.far.remove(place)?,
        };
        self.len -= 1;
        // A table emptied by forgotten names gives its room back.
        if self.len == 0 {
            *self = Places::default();
        } else if self.buckets > MIN_BUCKETS && self.len * 4 < self.buckets {
            self.regrow((self.buckets / 2).max(MIN_BUCKETS));
        }
        Some(value)
    }

    /// Takes the entry at `at` out, pulling back the ones after it that are not at their home
    /// (up to [`MAX_SHIFT`]), so that no entry has an empty slot between its home and itself.
    fn take_at(&mut self, at: usize) -> T {
        let Cell::Full(_, value) = std::mem::replace(&mut self.slots[at], Cell::Empty) else {
            unreachable!("found full")
        };
        let mut end = at;
        let mut stopped_early = false;
        loop {
            let next = self.slots.get(end + 1).and_then(Cell::place);
            match next {
                Some(next) if self.home(next) <= end => {
                    if end - at >= MAX_SHIFT {
                        stopped_early = true;
                        break;
                    }
                    self.slots.swap(end, end + 1);
                    end += 1;
                }
                _ => break,
            }
        }
        if stopped_early {
            // An entry after it still counts on passing this slot: a tombstone, with the
            // place of the entry shifted in before it, which keeps the order.
            let before = self.slots[end - 1].place().expect("shifted there");
            self.slots[end] = Cell::Gone(before);
        } else {
            self.used -= 1;
            while self.slots.len() > self.buckets
                && self.slots.last().is_some_and(|c| matches!(c, Cell::Empty))
            {
                self.slots.pop();
            }
        }
        value
    }

    /// The table again with `buckets` buckets, without tombstones: each entry (far ones too)
    /// at its new home or right after the one before it, in order, far if that is past its
    /// bound.
    fn regrow(&mut self, buckets: usize) {
        let old = std::mem::take(&mut self.slots);
        let far = std::mem::take(&mut self.far);
        self.buckets = buckets;
        self.used = 0;
        self.slots = Vec::with_capacity(buckets + overflow_room(buckets));
        self.slots.resize_with(buckets, || Cell::Empty);
        let table = old.into_iter().filter_map(|cell| match cell {
            Cell::Full(place, value) => Some((place, value)),
            _ => None,
        });
        let mut next = 0;
        for (place, value) in merged(table, far.into_iter()) {
            let home = self.home(place);
            let at = home.max(next);
            if at - home > MAX_RUN {
                self.far.insert(place, value);
                continue;
            }
            if at >= self.slots.len() {
                self.push_overflow();
            }
            self.slots[at] = Cell::Full(place, value);
            self.used += 1;
            next = at + 1;
        }
    }

    /// One more empty slot past the last: a few are reserved with the buckets, so that a
    /// table's first overflow does not double its allocation.
    fn push_overflow(&mut self) {
        if self.slots.len() == self.slots.capacity() {
            self.slots.reserve_exact(overflow_room(self.buckets));
        }
        self.slots.push(Cell::Empty);
    }

    /// Every value, in place order.
    pub fn values(&self) -> impl Iterator<Item = &T> {
        self.range_from(0).map(|(_, value)| value)
    }

    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut T> {
        let table = self.slots.iter_mut().filter_map(|cell| match cell {
            Cell::Full(place, value) => Some((*place, value)),
            _ => None,
        });
        let far = self.far.iter_mut();
        merged(table, far).map(|(_, value)| value)
    }

    /// The entries at `from` and after, in place order. `from` is a place of this table's
    /// stripe, or 0 for all of them.
    pub fn range_from(&self, from: u64) -> impl Iterator<Item = (u64, &T)> {
        let start = self.home(from).min(self.slots.len());
        let table = self.slots[start..]
            .iter()
            .filter_map(|cell| match cell {
                Cell::Full(place, value) => Some((*place, value)),
                _ => None,
            })
            .skip_while(move |(place, _)| *place < from);
        let far = self.far.range(from);
        merged(table, far)
    }
}

/// Two sequences in place order as one.
fn merged<V>(
    a: impl Iterator<Item = (u64, V)>,
    b: impl Iterator<Item = (u64, V)>,
) -> impl Iterator<Item = (u64, V)> {
    let (mut a, mut b) = (a.peekable(), b.peekable());
    std::iter::from_fn(move || match (a.peek(), b.peek()) {
        (Some((x, _)), Some((y, _))) if y < x => b.next(),
        (Some(_), _) => a.next(),
        (None, _) => b.next(),
    })
}

/// Slots kept for entries pushed past the last bucket.
fn overflow_room(buckets: usize) -> usize {
    buckets / 64 + 4
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A reproducible stream of places: a few bits above the hash bits (a stripe), hash bits
    /// below; `narrow` keeps them to a few values so that the same places come back.
    struct Places64(u64);

    impl Places64 {
        fn next(&mut self, narrow: bool) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let bits = self.0 >> 11;
            if narrow {
                (3 << PLACE_HASH_BITS) | ((bits % 64) << (PLACE_HASH_BITS - 6))
            } else {
                (3 << PLACE_HASH_BITS) | (bits & HASH_MASK)
            }
        }
    }

    /// About 20,000 distinct spread places, in increasing order (as a snapshot brings them).
    fn increasing_places(seed: u64) -> Vec<u64> {
        let mut places = Places64(seed);
        let mut all: Vec<u64> = (0..20_000).map(|_| places.next(false)).collect();
        all.sort();
        all.dedup();
        all
    }

    fn check(table: &Places<u64>, model: &BTreeMap<u64, u64>) {
        assert_eq!(table.len(), model.len());
        let walked: Vec<(u64, u64)> = table.range_from(0).map(|(p, v)| (p, *v)).collect();
        let expected: Vec<(u64, u64)> = model.iter().map(|(p, v)| (*p, *v)).collect();
        assert_eq!(walked, expected, "in place order");
        let mut last = None;
        let mut used = 0;
        for (i, cell) in table.slots.iter().enumerate() {
            let Some(place) = cell.place() else { continue };
            used += 1;
            assert!(
                last.is_none_or(|last| last <= place),
                "slots in place order"
            );
            last = Some(place);
            let home = table.home(place);
            assert!(home <= i, "an entry before its home");
            assert!(i - home <= MAX_RUN + 1, "an entry past its bound");
            assert!(
                table.slots[home..i].iter().all(|c| c.place().is_some()),
                "an empty slot between a home and its entry"
            );
        }
        assert_eq!(used, table.used);
        for (place, value) in model {
            assert_eq!(table.get(*place), Some(value));
        }
    }

    #[test]
    fn inserts_and_removes_keep_every_place_found_and_in_order() {
        for narrow in [false, true] {
            let mut table = Places::<u64>::default();
            let mut model = BTreeMap::new();
            let mut places = Places64(narrow as u64 + 7);
            for step in 0..20_000u64 {
                let place = places.next(narrow);
                match step % 5 {
                    0..=2 => {
                        let (value, made) = table.get_or_insert_with(place, || step);
                        assert_eq!(made, !model.contains_key(&place));
                        *value += 1;
                        *model.entry(place).or_insert(step) += 1;
                    }
                    3 => assert_eq!(table.remove(place), model.remove(&place)),
                    _ => assert_eq!(table.get(place), model.get(&place)),
                }
                if step % 997 == 0 {
                    check(&table, &model);
                }
            }
            check(&table, &model);
            // Emptied again, it holds nothing and gives its room back.
            let all: Vec<u64> = model.keys().copied().collect();
            for place in all {
                assert_eq!(table.remove(place), model.remove(&place));
            }
            check(&table, &model);
            assert_eq!(table.slots.len(), 0);
        }
    }

    #[test]
    fn places_chosen_to_crowd_one_stretch_cost_a_bounded_look_each() {
        let mut table = Places::<u64>::default();
        let mut model = BTreeMap::new();
        let mut places = Places64(5);
        // 3,000 places whose top 20 hash bits agree (one home while the table is small, a
        // stretch of a few slots once it is large), among 3,000 spread ones.
        for i in 0..6_000u64 {
            let spread = places.next(false);
            let place = if i % 2 == 0 {
                (3 << PLACE_HASH_BITS)
                    | (0x5_5555 << (PLACE_HASH_BITS - 20))
                    | (spread & (HASH_MASK >> 20))
            } else {
                spread
            };
            *table.get_or_insert_with(place, || i).0 += 0;
            model.entry(place).or_insert(i);
        }
        check(&table, &model);
        assert!(!table.far.is_empty(), "the crowd went far");
        // Removing them, crowd first, keeps every bound too.
        let crowd: Vec<u64> = model
            .keys()
            .copied()
            .filter(|p| (p >> (PLACE_HASH_BITS - 20)) & 0xf_ffff == 0x5_5555)
            .collect();
        for (n, place) in crowd.iter().enumerate() {
            assert_eq!(table.remove(*place), model.remove(place));
            if n % 101 == 0 {
                check(&table, &model);
            }
        }
        check(&table, &model);
    }

    #[test]
    fn places_in_increasing_order_are_a_bounded_look_each() {
        let mut table = Places::<u64>::default();
        let mut model = BTreeMap::new();
        let all = increasing_places(9);
        for (i, place) in all.iter().enumerate() {
            table.get_or_insert_with(*place, || i as u64);
            model.insert(*place, i as u64);
            if i % 1999 == 0 {
                check(&table, &model);
            }
        }
        check(&table, &model);
    }

    #[test]
    fn a_load_in_increasing_order_goes_far_and_settles_into_a_table_of_its_size() {
        let mut table = Places::<u64>::default();
        let mut model = BTreeMap::new();
        let all = increasing_places(13);
        // Some places were in the table before the load; the load finds them there.
        for (i, place) in all.iter().enumerate().step_by(97) {
            table.get_or_insert_with(*place, || i as u64);
            model.insert(*place, i as u64);
        }
        for (i, place) in all.iter().enumerate() {
            let (value, made) = table.get_or_insert_far(*place, || i as u64);
            assert_eq!(made, !model.contains_key(place));
            *value += 1;
            *model.entry(*place).or_insert(i as u64) += 1;
        }
        // Removals and lookups while loading see far too.
        for place in all.iter().step_by(11) {
            assert_eq!(table.remove(*place), model.remove(place));
        }
        check(&table, &model);
        table.settle();
        check(&table, &model);
        assert!(table.far.is_empty(), "spread places all fit");
        assert_eq!(table.buckets, model.len() * 3 / 2);
        // Settled, it is an ordinary table again.
        for place in all.iter().step_by(11) {
            table.get_or_insert_with(*place, || 5);
            model.insert(*place, 5);
        }
        check(&table, &model);
    }

    #[test]
    fn a_walk_from_any_place_starts_at_the_first_place_not_before_it() {
        let mut table = Places::<u64>::default();
        let mut places = Places64(11);
        let mut model = BTreeMap::new();
        for i in 0..3_000 {
            let place = places.next(false);
            table.get_or_insert_with(place, || i);
            model.insert(place, i);
        }
        let mut probes = Places64(12);
        for _ in 0..500 {
            let from = probes.next(false);
            let got: Vec<u64> = table.range_from(from).map(|(p, _)| p).take(5).collect();
            let want: Vec<u64> = model.range(from..).map(|(p, _)| *p).take(5).collect();
            assert_eq!(got, want);
        }
        // From an existing place: that place comes first.
        let some = *model.keys().nth(1234).unwrap();
        assert_eq!(table.range_from(some).next().map(|(p, _)| p), Some(some));
        assert_eq!(table.range_from(0).count(), 3_000);
    }

    #[test]
    fn places_past_the_last_bucket_overflow_and_are_folded_back_in() {
        let mut table = Places::<u64>::default();
        // Every place with the same top hash bits: all have the last home.
        let top = (3 << PLACE_HASH_BITS) | HASH_MASK;
        for i in 0..6 {
            table.get_or_insert_with(top - i, || i);
        }
        assert_eq!(table.buckets, MIN_BUCKETS);
        assert!(table.slots.len() > MIN_BUCKETS, "overflow slots");
        let walked: Vec<u64> = table.range_from(0).map(|(p, _)| p).collect();
        assert!(walked.is_sorted() && walked.len() == 6);
        assert_eq!(table.remove(top - 5), Some(5));
        assert_eq!(table.get(top - 4), Some(&4));
        for i in 6..40 {
            table.get_or_insert_with(top - i, || i);
        }
        assert_eq!(table.len(), 39);
        assert!(
            (0..40)
                .filter(|i| *i != 5)
                .all(|i| table.get(top - i) == Some(&i))
        );
    }

    #[test]
    fn a_removal_that_would_pull_back_a_long_run_leaves_a_tombstone() {
        let mut table = Places::<u64>::default();
        let mut model = BTreeMap::new();
        let mut places = Places64(21);
        for i in 0..1_000 {
            let place = places.next(false);
            table.get_or_insert_with(place, || i);
            model.insert(place, i);
        }
        let buckets = table.buckets as u64;
        // 150 more places with homes in 60 slots: one run far longer than a shift's limit.
        let at_home = |home: u64, low: u64| {
            let fraction = (home << HOME_BITS).div_ceil(buckets);
            (3 << PLACE_HASH_BITS) | (fraction << (PLACE_HASH_BITS - HOME_BITS)) | (low & 0x1_ffff)
        };
        for i in 0..150 {
            let place = at_home(100 + i % 60, places.next(false));
            assert_eq!(table.home(place) as u64, 100 + i % 60);
            table.get_or_insert_with(place, || 10_000 + i);
            model.entry(place).or_insert(10_000 + i);
        }
        assert_eq!(table.buckets as u64, buckets, "no growth in between");
        check(&table, &model);
        let run: Vec<u64> = model
            .keys()
            .copied()
            .filter(|p| (100..160).contains(&table.home(*p)))
            .collect();
        assert_eq!(table.remove(run[0]), model.remove(&run[0]));
        check(&table, &model);
        assert!(
            table.slots.iter().any(|c| matches!(c, Cell::Gone(_))),
            "a tombstone"
        );
        // Inserts take tombstones; removals and inserts in the run keep every bound.
        for (n, place) in run.iter().skip(1).step_by(3).enumerate() {
            assert_eq!(table.remove(*place), model.remove(place));
            let again = at_home(100 + (n as u64 * 7) % 60, places.next(false));
            *table.get_or_insert_with(again, || 1).0 += 0;
            model.entry(again).or_insert(1);
            check(&table, &model);
        }
    }
}
