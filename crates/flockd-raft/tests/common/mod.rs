//! What the in-process tests share: an [`Apply`] over a plain state machine (the server's routes
//! events to waiters and pub/sub; these tests only need the state), and temporary directories.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use flockd_core::{Millis, OpResult, Snapshot, StateMachine};
use flockd_log::{Apply, Entry};
use parking_lot::RwLock;

#[derive(Default)]
pub struct PlainHost {
    pub machine: RwLock<StateMachine>,
    /// How many times a snapshot replaced the whole state.
    pub replaced: AtomicU64,
}

impl Apply for PlainHost {
    fn apply(&self, entries: &[Entry], _local: bool, results: &mut Vec<Vec<OpResult>>) {
        let mut machine = self.machine.write();
        let mut events = Vec::new();
        for entry in entries {
            results.push(
                entry
                    .ops
                    .iter()
                    .enumerate()
                    .map(|(i, op)| {
                        machine.apply_in_entry(entry.position, i as u32, entry.at, op, &mut events)
                    })
                    .collect(),
            );
        }
    }

    fn snapshot(&self) -> Snapshot {
        self.machine.read().snapshot()
    }

    fn replace(&self, machine: StateMachine) {
        self.replaced.fetch_add(1, Ordering::Relaxed);
        *self.machine.write() = machine;
    }

    fn time(&self) -> Millis {
        self.machine.read().time()
    }
}

/// A fresh directory, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "flockd-raft-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("temp dir");
        TempDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
