//! Helpers shared by the integration tests: temporary directories; files built with the codec
//! (log entries, snapshots, first-format changes) and read back record by record; sample entries
//! with every kind of op and sample first-format changes; the test [`flockd_log::Apply`] ([`Host`], a
//! plain [`StateMachine`] behind a mutex that also keeps the history it applied); a random
//! proposer ([`Sim`]); a model of what first-format records mean (as the releases that wrote
//! them defined it); and a capture of the crate's log lines.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fmt::{Debug, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use flockd_aof::record::{
    HEADER, HEADER_V1, Payload, Record, Version, decode_record, encode_entry, encode_item,
    encode_snapshot_begin, encode_v1,
};
use flockd_aof::{Aof, AofError, AofOptions, FileError, FsyncPolicy, ProposalResult, ReplayReport};
use flockd_core::{
    HoldingRef, Millis, Op, OpResult, Snapshot, SnapshotItem, StateMachine, V1Change, WaitId,
};
use flockd_log::{Apply, Entry};
use parking_lot::Mutex;
use tokio::sync::oneshot;

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

// ----------------------------------------------------------------------------- entries and files

/// One log entry, owned (the writer's [`Entry`] is not `Clone`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogEntry {
    pub position: u64,
    pub at: Millis,
    pub ops: Vec<Op>,
}

/// Applies an entry to `m` as the writer's applier and replay do.
pub fn apply_entry(m: &mut StateMachine, position: u64, at: Millis, ops: &[Op]) -> Vec<OpResult> {
    let mut events = Vec::new();
    ops.iter()
        .enumerate()
        .map(|(i, op)| m.apply_in_entry(position, i as u32, at, op, &mut events))
        .collect()
}

/// A machine that applied `entries` in order.
pub fn machine_of(entries: &[LogEntry]) -> StateMachine {
    let mut m = StateMachine::new();
    for e in entries {
        apply_entry(&mut m, e.position, e.at, &e.ops);
    }
    m
}

/// A machine that restored first-format `changes`, as `load` does.
pub fn v1_machine(changes: &[V1Change]) -> StateMachine {
    let mut m = StateMachine::new();
    for c in changes {
        m.restore_v1(c);
    }
    m.restore_end();
    m
}

/// The bytes of a version 2 file holding `entries`, and each record's start offset.
pub fn encode_file(entries: &[LogEntry]) -> (Vec<u8>, Vec<u64>) {
    let mut buf = HEADER.to_vec();
    let mut offsets = Vec::new();
    for e in entries {
        offsets.push(buf.len() as u64);
        encode_entry(e.position, e.at, &e.ops, &mut buf).expect("encodable");
    }
    (buf, offsets)
}

/// The bytes of a first-format file holding `changes`, and each record's start offset.
pub fn encode_v1_file(changes: &[V1Change]) -> (Vec<u8>, Vec<u64>) {
    let mut buf = HEADER_V1.to_vec();
    let mut offsets = Vec::new();
    for c in changes {
        offsets.push(buf.len() as u64);
        encode_v1(c, &mut buf).expect("encodable");
    }
    (buf, offsets)
}

/// Appends a snapshot of `m` (its start, then its items) to `out`; returns the item count.
pub fn encode_snapshot(m: &StateMachine, out: &mut Vec<u8>) -> usize {
    let snap = m.snapshot();
    encode_snapshot_begin(snap.position(), snap.at(), out);
    let mut n = 0;
    snap.emit(&mut |item| {
        encode_item(&item, out).expect("encodable");
        n += 1;
    });
    n
}

/// A record of a file, owned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FileRecord {
    V1(V1Change),
    Entry(LogEntry),
    SnapshotBegin {
        position: u64,
        at: Millis,
    },
    /// A snapshot item, as its `Debug` text.
    Item(String),
}

/// Every record of a valid file (panics on damage). Zeros after the last record are the
/// file's end: a running writer keeps space written ahead under `always`.
pub fn read_file(path: &Path) -> (Version, Vec<FileRecord>) {
    let bytes = std::fs::read(path).expect("read");
    let version = Version::of_header(&bytes[..8]).expect("a flockd AOF header");
    let mut rest = &bytes[8..];
    let mut out = Vec::new();
    while !rest.is_empty() && rest.iter().any(|&b| b != 0) {
        let (p, n) = decode_record(version, rest).expect("valid record");
        out.push(match p {
            Payload::V1(c) => FileRecord::V1(c),
            Payload::V2(Record::Entry { position, at, ops }) => {
                FileRecord::Entry(LogEntry { position, at, ops })
            }
            Payload::V2(Record::SnapshotBegin { position, at }) => {
                FileRecord::SnapshotBegin { position, at }
            }
            Payload::V2(Record::Item(item)) => FileRecord::Item(format!("{item:?}")),
        });
        rest = &rest[n..];
    }
    (version, out)
}

/// The log entries of a file, in file order.
pub fn file_entries(path: &Path) -> Vec<LogEntry> {
    read_file(path)
        .1
        .into_iter()
        .filter_map(|r| match r {
            FileRecord::Entry(e) => Some(e),
            _ => None,
        })
        .collect()
}

pub fn try_load(path: &Path) -> Result<(StateMachine, ReplayReport), FileError> {
    let mut m = StateMachine::new();
    let r = flockd_aof::load(path, &mut m)?;
    Ok((m, r))
}

pub fn load_machine(path: &Path) -> StateMachine {
    try_load(path).expect("load").0
}

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

/// `n` entries at positions 1..=n using every kind of op, some entries holding several.
pub fn sample_entries(n: usize) -> Vec<LogEntry> {
    (0..n as u64)
        .map(|i| {
            let position = i + 1;
            let at = Millis(1_000 + 100 * i);
            let name = b(&format!("lock-{}", i % 5));
            let ops = match i % 12 {
                0 => vec![Op::Acquire {
                    conditions: Default::default(),
                    name,
                    lease_ms: 30_000,
                    owner: Some(b("owner")),
                    wait: false.into(),
                }],
                1 => vec![Op::Renew {
                    name,
                    token: i,
                    lease_ms: 10_000 + i,
                }],
                2 => vec![Op::Release { name, token: i }],
                3 => vec![
                    // A transaction: queue, then give up (the wait id is this entry's op 0).
                    Op::Acquire {
                        conditions: Default::default(),
                        name: name.clone(),
                        lease_ms: 5_000,
                        owner: None,
                        wait: true.into(),
                    },
                    Op::CancelWait {
                        name,
                        wait: WaitId { position, index: 0 },
                        release_if_granted: true,
                    },
                ],
                4 => vec![Op::ForceRelease { name }],
                5 => vec![Op::Advance {
                    name,
                    token: i * 10,
                }],
                6 => vec![Op::FenceSet {
                    lock: None,
                    key: name,
                    token: i,
                    value: Bytes::from(vec![i as u8; (i % 13) as usize]),
                }],
                7 => vec![Op::Expire {
                    leases: vec![
                        HoldingRef {
                            name,
                            first_token: i,
                        },
                        HoldingRef {
                            name: b("lock-0"),
                            first_token: 1,
                        },
                    ],
                }],
                8 => vec![Op::Rearm { extra_ms: 100 }],
                9 => vec![Op::Forget {
                    names: vec![name, b("nobody")],
                }],
                10 => vec![Op::BumpAll { by: 3 }],
                _ => vec![
                    Op::Acquire {
                        conditions: Default::default(),
                        name: name.clone(),
                        lease_ms: 2_000,
                        owner: Some(b("tx")),
                        wait: false.into(),
                    },
                    Op::Acquire {
                        conditions: Default::default(),
                        name,
                        lease_ms: 2_000,
                        owner: Some(b("tx")),
                        wait: false.into(),
                    },
                    Op::FenceSet {
                        lock: None,
                        key: b("tx-fence"),
                        token: i,
                        value: b("tx"),
                    },
                ],
            };
            LogEntry { position, at, ops }
        })
        .collect()
}

/// First-format records of every kind.
pub fn sample_v1_changes(n: usize) -> Vec<V1Change> {
    (0..n as u64)
        .map(|i| {
            let name = b(&format!("lock-{}", i % 5));
            match i % 8 {
                0 => V1Change::Grant {
                    name,
                    token: i + 1,
                    first_token: i + 1,
                    holds: 1,
                    owner: Some(b("owner")),
                    lease_ms: 30_000,
                },
                1 => V1Change::Renew {
                    name,
                    lease_ms: 10_000 + i,
                },
                2 => V1Change::Release {
                    name,
                    holds_left: 0,
                },
                3 => V1Change::Expire { name },
                4 => V1Change::ForceRelease { name },
                5 => V1Change::Advance {
                    name,
                    token: i * 10,
                },
                6 => V1Change::FenceSet {
                    key: name,
                    token: i,
                    value: Bytes::from(vec![i as u8; (i % 13) as usize]),
                },
                _ => V1Change::Floor { token: i },
            }
        })
        .collect()
}

// ----------------------------------------------------------------------------- the applier

/// The state machine as the log's applier, keeping every entry it applied.
pub struct Host {
    pub machine: Mutex<StateMachine>,
    /// Every entry applied, in order.
    pub history: Mutex<Vec<LogEntry>>,
    /// Sleep before and after taking a snapshot, to make rewrites overlap proposals.
    pub snapshot_delay: Duration,
    /// Snapshots taken, and the position of the last one.
    pub snapshots: AtomicU64,
    pub last_snapshot_position: AtomicU64,
}

impl Host {
    pub fn new() -> Arc<Host> {
        Host::with(StateMachine::new(), Duration::ZERO)
    }

    pub fn with(machine: StateMachine, snapshot_delay: Duration) -> Arc<Host> {
        Arc::new(Host {
            machine: Mutex::new(machine),
            history: Mutex::new(Vec::new()),
            snapshot_delay,
            snapshots: AtomicU64::new(0),
            last_snapshot_position: AtomicU64::new(0),
        })
    }

    pub fn digest(&self) -> u64 {
        self.machine.lock().digest()
    }

    /// Opens the AOF at `opts` with this host as applier, continuing after its state.
    pub fn open(self: &Arc<Host>, opts: AofOptions) -> Result<Arc<Aof>, AofError> {
        let (position, at) = {
            let m = self.machine.lock();
            (m.position(), m.time())
        };
        Aof::open(opts, self.clone(), position, at)
    }
}

impl Apply for Host {
    fn apply(&self, entries: &[Entry], _local: bool, results: &mut Vec<Vec<OpResult>>) {
        let mut m = self.machine.lock();
        let mut history = self.history.lock();
        for e in entries {
            results.push(apply_entry(&mut m, e.position, e.at, &e.ops));
            history.push(LogEntry {
                position: e.position,
                at: e.at,
                ops: e.ops.clone(),
            });
        }
    }

    fn snapshot(&self) -> Snapshot {
        std::thread::sleep(self.snapshot_delay);
        let snap = self.machine.lock().snapshot();
        self.snapshots.fetch_add(1, Ordering::SeqCst);
        self.last_snapshot_position
            .store(snap.position(), Ordering::SeqCst);
        std::thread::sleep(self.snapshot_delay);
        snap
    }

    // The AOF never replaces the state (only a Raft peer's snapshot does).
    fn replace(&self, machine: StateMachine) {
        *self.machine.lock() = machine;
    }

    fn time(&self) -> Millis {
        self.machine.lock().time()
    }
}

pub fn opts(path: PathBuf, fsync: FsyncPolicy) -> AofOptions {
    AofOptions {
        fsync,
        ..AofOptions::new(path)
    }
}

pub fn fence(key: &str, token: u64) -> Op {
    Op::FenceSet {
        lock: None,
        key: b(key),
        token,
        value: b(&format!("v{token}")),
    }
}

// ----------------------------------------------------------------------------- random proposer

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

/// A fake lock server: proposes random operations, chosen from what the host's machine shows
/// (which may have changed by the time they apply: they are decided then, as on the server).
pub struct Sim {
    pub host: Arc<Host>,
    /// The proposers' clock (log time), advanced by each step.
    pub clock: AtomicU64,
}

impl Sim {
    pub fn new(host: Arc<Host>) -> Arc<Sim> {
        Arc::new(Sim {
            host,
            clock: AtomicU64::new(1_000),
        })
    }

    fn op(&self, rng: &mut Rng, m: &mut StateMachine, now: Millis) -> Op {
        let name = b(&format!("lock-{}", rng.below(6)));
        let status = m.status(&name, now);
        let owner = match rng.below(3) {
            0 => None,
            1 => Some(b("me")),
            _ => Some(b("you")),
        };
        match rng.below(12) {
            0..=2 => Op::Acquire {
                conditions: Default::default(),
                name,
                lease_ms: 200 + rng.below(2000),
                owner,
                wait: (rng.below(3) == 0).into(),
            },
            3 => Op::Renew {
                name,
                token: status.token.unwrap_or(status.last_token),
                lease_ms: 500 + rng.below(1500),
            },
            4 => Op::Release {
                name,
                token: status.token.unwrap_or(1 + rng.below(10)),
            },
            5 if rng.below(4) == 0 => Op::ForceRelease { name },
            5 => Op::Expire {
                leases: m.due_leases(now, 8),
            },
            6 | 7 => {
                let key = format!("fence-{}", rng.below(4));
                let token = (m.fence_token(key.as_bytes()) + rng.below(3)).saturating_sub(1);
                Op::FenceSet {
                    lock: None,
                    key: b(&key),
                    token,
                    value: Bytes::from(format!("v{}", rng.next())),
                }
            }
            8 => {
                // A waiter gives up: one of those queued (or granted by now) on some name, as
                // the server proposes it on a timeout or a closed connection.
                let mut waits = Vec::new();
                m.snapshot().emit(&mut |item| match item {
                    SnapshotItem::Waiter { name, wait, .. } => {
                        waits.push((Bytes::copy_from_slice(name), wait))
                    }
                    SnapshotItem::Holding { name, grants, .. } => waits.extend(
                        grants
                            .iter()
                            .map(|(wait, _)| (Bytes::copy_from_slice(name), *wait)),
                    ),
                    _ => {}
                });
                let (name, wait) = if waits.is_empty() {
                    let wait = WaitId {
                        position: m.position(),
                        index: 0,
                    };
                    (name, wait)
                } else {
                    waits.swap_remove(rng.below(waits.len() as u64) as usize)
                };
                Op::CancelWait {
                    name,
                    wait,
                    release_if_granted: rng.below(2) == 0,
                }
            }
            9 => match rng.below(30) {
                0 => Op::Rearm {
                    extra_ms: rng.below(100),
                },
                1 => Op::BumpAll {
                    by: 1 + rng.below(3),
                },
                2..=5 => Op::Forget { names: vec![name] },
                _ => Op::Advance {
                    name,
                    token: status.last_token + rng.below(3),
                },
            },
            _ => Op::Advance {
                name,
                token: status.last_token + rng.below(3),
            },
        }
    }

    /// Proposes one random entry (sometimes a transaction of a few ops), pushing the write
    /// under `everysec`/`no` as the server does.
    pub fn step(&self, rng: &mut Rng, aof: &Aof) -> oneshot::Receiver<ProposalResult> {
        let now = Millis(self.clock.fetch_add(1 + rng.below(30), Ordering::Relaxed));
        let ops = {
            let mut m = self.host.machine.lock();
            let n = if rng.below(10) == 0 {
                2 + rng.below(2)
            } else {
                1
            };
            (0..n).map(|_| self.op(rng, &mut m, now)).collect()
        };
        let rx = aof.propose(now, ops);
        aof.write_now();
        rx
    }
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

// ----------------------------------------------------------------------------- first-format model

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holding {
    pub token: u64,
    pub first_token: u64,
    pub holds: u32,
    pub owner: Option<Bytes>,
    pub lease_ms: u64,
}

/// The state first-format records describe, as the releases that wrote them defined it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct V1Model {
    pub floor: u64,
    pub counters: BTreeMap<Bytes, u64>,
    pub holdings: BTreeMap<Bytes, Holding>,
    pub fences: BTreeMap<Bytes, (u64, Bytes)>,
}

impl V1Model {
    pub fn from_changes(changes: &[V1Change]) -> V1Model {
        let mut m = V1Model::default();
        for c in changes {
            m.apply(c);
        }
        m
    }

    fn raise(&mut self, name: &Bytes, token: u64) {
        let c = self.counters.entry(name.clone()).or_default();
        *c = (*c).max(token);
    }

    pub fn counter(&self, name: &[u8]) -> u64 {
        self.counters
            .get(name)
            .copied()
            .unwrap_or(0)
            .max(self.floor)
    }

    /// Applies a record: absolute, so applying one twice in a row changes nothing.
    pub fn apply(&mut self, c: &V1Change) {
        match c {
            V1Change::Grant {
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
            V1Change::Renew { name, lease_ms } => {
                if let Some(h) = self.holdings.get_mut(name) {
                    h.lease_ms = *lease_ms;
                }
            }
            V1Change::Release { name, holds_left } => {
                if *holds_left == 0 {
                    self.holdings.remove(name);
                } else if let Some(h) = self.holdings.get_mut(name) {
                    h.holds = *holds_left;
                }
            }
            V1Change::Expire { name } | V1Change::ForceRelease { name } => {
                self.holdings.remove(name);
            }
            V1Change::Advance { name, token } => self.raise(name, *token),
            V1Change::FenceSet { key, token, value } => {
                // Records carried accepted sets only, so a key's tokens never went down; a
                // restore keeps the newest anyway.
                let keep = self.fences.get(key).is_none_or(|f| *token >= f.0);
                if keep {
                    self.fences.insert(key.clone(), (*token, value.clone()));
                }
            }
            V1Change::Floor { token } => self.floor = self.floor.max(*token),
        }
    }

    /// Checks every counter, holding, fence and the floor of `m` against the model.
    pub fn assert_matches(&self, m: &StateMachine) {
        assert_eq!(m.token_floor(), self.floor, "floor");
        for name in self.counters.keys().chain(self.holdings.keys()) {
            assert_eq!(
                m.last_token(name),
                self.counter(name),
                "counter of {name:?}"
            );
        }
        for (key, (token, value)) in &self.fences {
            assert_eq!(m.fence_token(key), *token, "fence token of {key:?}");
            assert_eq!(m.fence_value(key).as_ref(), Some(value), "fence of {key:?}");
        }
        assert_eq!(m.fence_stats().keys, self.fences.len() as u64, "fence keys");
        assert_eq!(holdings_of(m), self.holdings, "holdings");
        assert_eq!(m.lock_stats().locks_held, self.holdings.len() as u64);
    }
}

/// The holdings of a machine, read from its snapshot (a first-format load leaves their
/// deadlines at 0, so `status` would call them free until a re-arm).
pub fn holdings_of(m: &StateMachine) -> BTreeMap<Bytes, Holding> {
    let mut out = BTreeMap::new();
    m.snapshot().emit(&mut |item| {
        if let SnapshotItem::Holding {
            name,
            first_token,
            token,
            holds,
            owner,
            lease_ms,
            ..
        } = item
        {
            out.insert(
                Bytes::copy_from_slice(name),
                Holding {
                    token,
                    first_token,
                    holds,
                    owner: owner.map(Bytes::copy_from_slice),
                    lease_ms,
                },
            );
        }
    });
    out
}

// ----------------------------------------------------------------------------- log capture

/// Collects the events logged on the thread that set a sink, one line each: level, then
/// `name=value` fields. Installed once as the global subscriber: with a thread-local default
/// per test, a callsite first reached on a thread without one could have its interest cached
/// as "never" while another test was capturing, and that test missed its warning.
struct Capture;

thread_local! {
    static SINK: std::cell::RefCell<Option<Arc<Mutex<Vec<String>>>>> =
        const { std::cell::RefCell::new(None) };
}

struct Line(String);

impl tracing::field::Visit for Line {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn Debug) {
        let _ = write!(self.0, " {}={:?}", field.name(), value);
    }
}

impl tracing::Subscriber for Capture {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }

    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}

    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}

    fn event(&self, event: &tracing::Event<'_>) {
        SINK.with(|sink| {
            if let Some(lines) = sink.borrow().as_ref() {
                let mut line = Line(event.metadata().level().to_string());
                event.record(&mut line);
                lines.lock().push(line.0);
            }
        });
    }

    fn enter(&self, _: &tracing::span::Id) {}

    fn exit(&self, _: &tracing::span::Id) {}
}

/// Runs `f` with the lines it logs (on this thread) captured.
pub fn capture_logs<R>(f: impl FnOnce() -> R) -> (R, Vec<String>) {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        let _ = tracing::subscriber::set_global_default(Capture);
    });
    let lines = Arc::new(Mutex::new(Vec::new()));
    SINK.with(|sink| *sink.borrow_mut() = Some(lines.clone()));
    let r = f();
    SINK.with(|sink| *sink.borrow_mut() = None);
    let lines = lines.lock().clone();
    (r, lines)
}
