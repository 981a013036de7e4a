//! The index of lease deadlines the expiry task reads: holdings bucketed by the millisecond
//! their lease ends. A binary heap of (deadline, name, token) did the same at a higher price:
//! each pop sifted the whole heap and compared names (a `memcmp` per step) wherever deadlines
//! tied, which at 100k leases a second they nearly always do. Here a push finds its bucket in a
//! small ordered map (as many keys as distinct milliseconds pending) and appends; a pop takes
//! from the earliest bucket. Items may be stale: whoever pops one checks the entry.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::Millis;

#[derive(Default)]
pub(crate) struct Deadlines {
    /// Deadline -> the holdings (name, first token) whose leases end then.
    buckets: BTreeMap<Millis, Vec<(Bytes, u64)>>,
    len: usize,
}

impl Deadlines {
    pub fn push(&mut self, at: Millis, name: Bytes, first_token: u64) {
        self.buckets
            .entry(at)
            .or_default()
            .push((name, first_token));
        self.len += 1;
    }

    /// The earliest deadline scheduled.
    pub fn earliest(&self) -> Option<Millis> {
        self.buckets.first_key_value().map(|(at, _)| *at)
    }

    /// One item whose deadline is at or before `now`, the earliest deadline first.
    pub fn pop_due(&mut self, now: Millis) -> Option<(Millis, Bytes, u64)> {
        let mut bucket = self.buckets.first_entry()?;
        let at = *bucket.key();
        if at > now {
            return None;
        }
        let (name, first_token) = bucket.get_mut().pop()?;
        if bucket.get().is_empty() {
            bucket.remove();
        }
        self.len -= 1;
        Some((at, name, first_token))
    }

    pub fn clear(&mut self) {
        self.buckets.clear();
        self.len = 0;
    }

    pub fn len(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_come_out_earliest_deadline_first_and_only_when_due() {
        let mut index = Deadlines::default();
        for (at, name) in [(30, "c"), (10, "a"), (20, "b"), (10, "a2")] {
            index.push(Millis(at), Bytes::from_static(name.as_bytes()), at);
        }
        assert_eq!((index.len(), index.earliest()), (4, Some(Millis(10))));
        assert!(index.pop_due(Millis(9)).is_none(), "nothing due yet");
        let mut due: Vec<(u64, Bytes)> = std::iter::from_fn(|| index.pop_due(Millis(20)))
            .map(|(at, name, _)| (at.0, name))
            .collect();
        due.sort();
        assert_eq!(
            due,
            [(10, "a"), (10, "a2"), (20, "b")]
                .map(|(at, n)| (at, Bytes::from_static(n.as_bytes())))
        );
        assert_eq!((index.len(), index.earliest()), (1, Some(Millis(30))));
        index.clear();
        assert_eq!((index.len(), index.earliest()), (0, None));
    }
}
