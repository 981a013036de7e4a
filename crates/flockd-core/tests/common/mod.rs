//! A state machine fed ops one position at a time, for the scan tests: names with counters,
//! forgotten names and fence keys, made the way the log would make them.

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
