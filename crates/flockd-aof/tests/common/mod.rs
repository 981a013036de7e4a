//! Helpers shared by the integration tests: temporary directories, files built with the codec,
//! sample records, and a small model of the lock state that applies [`Change`]s as the contract
//! in `flockd_core::change` says (used as the fake [`SnapshotSource`]).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use flockd_aof::record::{HEADER, encode_record};
use flockd_aof::{Aof, SnapshotSource};
use flockd_core::{Change, Journal};
use parking_lot::Mutex;

/// A fresh directory under the system temp dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        static N: AtomicU64 = AtomicU64::new(0);
        let d = std::env::temp_dir().join(format!(
            "flockd-aof-test-{name}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("create temp dir");
        TempDir(d)
    }

    pub fn join(&self, p: &str) -> PathBuf {
        self.0.join(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The bytes of an AOF holding `changes`, and each record's start offset.
pub fn encode_file(changes: &[Change]) -> (Vec<u8>, Vec<u64>) {
    let mut buf = HEADER.to_vec();
    let mut offsets = Vec::new();
    for c in changes {
        offsets.push(buf.len() as u64);
        encode_record(c, &mut buf).expect("encodable");
    }
    (buf, offsets)
}

/// A few records of every kind.
pub fn sample_changes(n: usize) -> Vec<Change> {
    (0..n as u64)
        .map(|i| {
            let name = Bytes::from(format!("lock-{}", i % 5));
            match i % 8 {
                0 => Change::Grant {
                    name,
                    token: i + 1,
                    first_token: i + 1,
                    holds: 1,
                    owner: Some(Bytes::from_static(b"owner")),
                    lease_ms: 30_000,
                },
                1 => Change::Renew {
                    name,
                    lease_ms: 10_000 + i,
                },
                2 => Change::Release {
                    name,
                    holds_left: 0,
                },
                3 => Change::Expire { name },
                4 => Change::ForceRelease { name },
                5 => Change::Advance {
                    name,
                    token: i * 10,
                },
                6 => Change::FenceSet {
                    key: name,
                    token: i,
                    value: Bytes::from(vec![i as u8; (i % 13) as usize]),
                },
                _ => Change::Floor { token: i },
            }
        })
        .collect()
}

pub fn replay(path: &Path) -> Vec<Change> {
    let mut out = Vec::new();
    flockd_aof::load(path, &mut |c| out.push(c)).expect("load");
    out
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holding {
    pub token: u64,
    pub first_token: u64,
    pub holds: u32,
    pub owner: Option<Bytes>,
    pub lease_ms: u64,
}

/// The state the records describe.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Model {
    pub floor: u64,
    pub counters: BTreeMap<Bytes, u64>,
    pub holdings: BTreeMap<Bytes, Holding>,
    pub fences: BTreeMap<Bytes, (u64, Bytes)>,
}

impl Model {
    pub fn from_changes(changes: &[Change]) -> Model {
        let mut m = Model::default();
        for c in changes {
            m.apply(c);
        }
        m
    }

    fn raise(&mut self, name: &Bytes, token: u64) {
        let c = self.counters.entry(name.clone()).or_default();
        *c = (*c).max(token);
    }

    pub fn counter(&self, name: &Bytes) -> u64 {
        self.counters
            .get(name)
            .copied()
            .unwrap_or(0)
            .max(self.floor)
    }

    /// Applies a record: absolute, so applying one twice in a row changes nothing.
    pub fn apply(&mut self, c: &Change) {
        match c {
            Change::Grant {
                name,
                token,
                first_token,
                holds,
                owner,
                lease_ms,
            } => {
                self.raise(name, *token);
                self.holdings.insert(
                    name.clone(),
                    Holding {
                        token: *token,
                        first_token: *first_token,
                        holds: *holds,
                        owner: owner.clone(),
                        lease_ms: *lease_ms,
                    },
                );
            }
            Change::Renew { name, lease_ms } => {
                if let Some(h) = self.holdings.get_mut(name) {
                    h.lease_ms = *lease_ms;
                }
            }
            Change::Release { name, holds_left } => {
                if *holds_left == 0 {
                    self.holdings.remove(name);
                } else if let Some(h) = self.holdings.get_mut(name) {
                    h.holds = *holds_left;
                }
            }
            Change::Expire { name } | Change::ForceRelease { name } => {
                self.holdings.remove(name);
            }
            Change::Advance { name, token } => self.raise(name, *token),
            Change::FenceSet { key, token, value } => {
                self.fences.insert(key.clone(), (*token, value.clone()));
            }
            Change::Floor { token } => self.floor = self.floor.max(*token),
        }
    }

    /// Records that rebuild this state.
    pub fn snapshot(&self) -> Vec<Change> {
        let mut out = vec![Change::Floor { token: self.floor }];
        for (name, counter) in &self.counters {
            out.push(Change::Advance {
                name: name.clone(),
                token: *counter,
            });
        }
        for (name, h) in &self.holdings {
            out.push(Change::Grant {
                name: name.clone(),
                token: h.token,
                first_token: h.first_token,
                holds: h.holds,
                owner: h.owner.clone(),
                lease_ms: h.lease_ms,
            });
        }
        for (key, (token, value)) in &self.fences {
            out.push(Change::FenceSet {
                key: key.clone(),
                token: *token,
                value: value.clone(),
            });
        }
        out
    }
}

/// A tiny xorshift generator: deterministic tests without a dependency.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A fake lock server: applies random valid operations to a [`Model`] and journals each change
/// while holding the model's lock (as the core does with an entry's lock).
pub struct Sim {
    pub model: Mutex<Model>,
    /// Every change ever journaled, in journal order.
    pub history: Mutex<Vec<Change>>,
    /// Pause after each emitted snapshot record, to make rewrites overlap appends.
    pub snapshot_delay: Duration,
}

impl Sim {
    pub fn new(snapshot_delay: Duration) -> Sim {
        Sim {
            model: Mutex::new(Model::default()),
            history: Mutex::new(Vec::new()),
            snapshot_delay,
        }
    }

    /// One random operation on one of a few names.
    pub fn step(&self, rng: &mut Rng, journal: &Aof) {
        let mut m = self.model.lock();
        let name = Bytes::from(format!("lock-{}", rng.below(6)));
        let held = m.holdings.get(&name).cloned();
        let change = match (rng.below(7), held) {
            (0 | 1, None) => {
                let token = m.counter(&name) + 1;
                let owner = (rng.below(2) == 0).then(|| Bytes::from_static(b"me"));
                Change::Grant {
                    name,
                    token,
                    first_token: token,
                    holds: 1,
                    owner,
                    lease_ms: 1000 + rng.below(1000),
                }
            }
            (0 | 1, Some(h)) if h.owner.is_some() => {
                let token = m.counter(&name) + 1;
                Change::Grant {
                    name,
                    token,
                    first_token: h.first_token,
                    holds: h.holds + 1,
                    owner: h.owner,
                    lease_ms: h.lease_ms,
                }
            }
            (2, Some(_)) => Change::Renew {
                name,
                lease_ms: 500 + rng.below(500),
            },
            (3, Some(h)) => Change::Release {
                name,
                holds_left: h.holds - 1,
            },
            (4, Some(_)) => {
                if rng.below(2) == 0 {
                    Change::Expire { name }
                } else {
                    Change::ForceRelease { name }
                }
            }
            (5, _) => {
                let key = Bytes::from(format!("fence-{}", rng.below(4)));
                let token = m.fences.get(&key).map_or(0, |f| f.0) + rng.below(3);
                Change::FenceSet {
                    key,
                    token,
                    value: Bytes::from(format!("v{}", rng.next())),
                }
            }
            (6, _) if rng.below(20) == 0 => Change::Floor {
                token: m.floor + rng.below(5),
            },
            _ => {
                let token = m.counter(&name) + rng.below(3);
                Change::Advance { name, token }
            }
        };
        m.apply(&change);
        self.history.lock().push(change.clone());
        journal.append(change);
    }
}

impl SnapshotSource for Sim {
    fn snapshot(&self, emit: &mut dyn FnMut(Change)) {
        let snap = self.model.lock().snapshot();
        for c in snap {
            emit(c);
            if !self.snapshot_delay.is_zero() {
                std::thread::sleep(self.snapshot_delay);
            }
        }
    }
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}
