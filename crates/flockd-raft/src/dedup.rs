//! At most once: which proposals of each node have taken effect, so one forwarded twice (after
//! a leader change that left the first attempt's fate unknown, openraft #2095) applies once.
//! Part of the replicated state: every replica decides the same from the same log, and a
//! snapshot carries it.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::types::{NodeId, Origin};

/// What the log has seen of one node's current run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Run {
    incarnation: u64,
    /// Every seq below it was answered at its node before a later proposal was sent.
    floor: u64,
    /// Seqs at or above `floor` that took effect.
    applied: BTreeSet<u64>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dedup {
    runs: BTreeMap<NodeId, Run>,
}

impl Dedup {
    /// Whether a proposal from `origin` takes effect (and, if so, notes that it did). No: it
    /// took effect already, or its node had given up on it, or it comes from an earlier run.
    pub fn admit(&mut self, origin: &Origin) -> bool {
        let run = self.runs.entry(origin.node).or_insert_with(|| Run {
            incarnation: origin.incarnation,
            ..Run::default()
        });
        if origin.incarnation < run.incarnation {
            return false;
        }
        if origin.incarnation > run.incarnation {
            *run = Run {
                incarnation: origin.incarnation,
                ..Run::default()
            };
        }
        if origin.floor > run.floor {
            run.floor = origin.floor;
            run.applied = run.applied.split_off(&origin.floor);
        }
        origin.seq >= run.floor && run.applied.insert(origin.seq)
    }

    /// Whether `seq` of that node's run `incarnation` has been decided (applied or given up):
    /// after installing a snapshot, the proposals it decided will not be applied here again.
    pub fn decided(&self, node: NodeId, incarnation: u64, seq: u64) -> bool {
        self.runs.get(&node).is_some_and(|run| {
            run.incarnation > incarnation
                || (run.incarnation == incarnation
                    && (seq < run.floor || run.applied.contains(&seq)))
        })
    }

    /// Seqs remembered, over all nodes (bounded by what is in flight at each node).
    pub fn remembered(&self) -> usize {
        self.runs.values().map(|run| run.applied.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin(node: u64, incarnation: u64, seq: u64, floor: u64) -> Origin {
        Origin {
            node,
            incarnation,
            seq,
            floor,
        }
    }

    #[test]
    fn a_retry_is_refused_and_the_floor_forgets_what_is_answered() {
        let mut d = Dedup::default();
        assert!(d.admit(&origin(1, 1, 0, 0)));
        assert!(d.admit(&origin(1, 1, 2, 0)));
        assert!(!d.admit(&origin(1, 1, 0, 0)), "the same seq again");
        assert!(d.admit(&origin(1, 1, 1, 0)), "out of order is fine");
        assert!(d.admit(&origin(1, 1, 5, 3)));
        assert_eq!(d.remembered(), 1, "below the floor is forgotten");
        assert!(
            !d.admit(&origin(1, 1, 2, 3)),
            "below the floor never applies"
        );
        assert!(d.decided(1, 1, 2) && d.decided(1, 1, 5) && !d.decided(1, 1, 4));
    }

    #[test]
    fn runs_are_per_node_and_an_earlier_run_is_refused() {
        let mut d = Dedup::default();
        assert!(d.admit(&origin(1, 7, 0, 0)));
        assert!(d.admit(&origin(2, 7, 0, 0)));
        assert!(d.admit(&origin(1, 8, 0, 0)), "a new run starts afresh");
        assert!(
            !d.admit(&origin(1, 7, 1, 0)),
            "a late copy from the old run"
        );
        assert!(d.decided(1, 7, 99));
    }
}
