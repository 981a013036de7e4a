//! A state machine fed ops one position at a time, for the scan tests: names with counters,
//! forgotten names and fence keys, made the way the log would make them.

use std::collections::HashMap;

use bytes::Bytes;
use flockd_core::{Millis, Op, StateMachine};

pub struct Log {
    pub sm: StateMachine,
    pos: u64,
}

impl Log {
    pub fn new() -> Log {
        Log {
            sm: StateMachine::new(),
            pos: 0,
        }
    }

    pub fn apply(&mut self, op: Op) {
        self.pos += 1;
        self.sm.apply(self.pos, Millis(1), &op);
    }

    /// A name with a counter and no holding. The counter is above every earlier one, so above
    /// the floor that forgetting raises.
    pub fn create(&mut self, name: Bytes) {
        let token = self.pos + 1;
        self.apply(Op::Advance { name, token });
    }

    pub fn forget(&mut self, name: Bytes) {
        self.apply(Op::Forget { names: vec![name] });
    }

    #[allow(dead_code)] // not every test file writes fence keys
    pub fn fence(&mut self, key: Bytes) {
        self.apply(Op::FenceSet {
            key,
            token: 1,
            value: Bytes::from_static(b"v"),
            lock: None,
        });
    }
}

/// The whole walk of a scan from `cursor`, `count` per call (`scan` is one call: cursor and
/// count in, the next cursor and the names out), calling `between` after each call: every name
/// with how often it came back, and the cursors given (as many as the calls but the last).
pub fn walk_with(
    log: &mut Log,
    cursor: u64,
    count: usize,
    mut scan: impl FnMut(&StateMachine, u64, usize) -> (u64, Vec<Bytes>),
    mut between: impl FnMut(&mut Log, usize),
) -> (HashMap<Bytes, usize>, Vec<u64>) {
    let mut seen = HashMap::new();
    let mut cursors = vec![];
    let mut cursor = cursor;
    for call in 1..=1_000_000 {
        let (next, names) = scan(&log.sm, cursor, count);
        assert!(
            names.len() <= count + 2,
            "{} names for COUNT {count}",
            names.len()
        );
        for name in names {
            *seen.entry(name).or_insert(0) += 1;
        }
        if next == 0 {
            return (seen, cursors);
        }
        cursors.push(next);
        cursor = next;
        between(log, call);
    }
    panic!("the walk never ended");
}
