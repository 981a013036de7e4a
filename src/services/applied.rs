//! The state machine as the server runs it: the one [`StateMachine`], applied to by whoever
//! commits a batch of the log, read by every connection. Applying a batch also routes its
//! events: grants to the parked connections that waited for them, an earlier lease deadline to
//! the expiry task, hold times to the metrics, and, once the state machine's lock is released,
//! the changes to pub/sub.

use std::sync::Arc;
use std::time::Duration;

use flockd_core::{
    AcquireAllResult, AcquireResult, Event, Millis, Op, OpResult, Snapshot, StateMachine,
};
use flockd_log::{Apply, Entry};
use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use tokio::sync::Notify;

use super::hot::{Contention, HotLocks};
use super::pubsub::PubSub;
use super::stats::time_histogram;
use super::waiters::{Grant, WaitRegistry};
use flockd_histogram::Histogram;

/// How long locks are held, from the events of applied ops (log time, so a hold's length is
/// what the leases saw). Holdings restored from a snapshot have no known start and are not
/// measured.
pub struct HoldTimes {
    pub released: Histogram,
    pub expired: Histogram,
    pub force_released: Histogram,
}

impl Default for HoldTimes {
    fn default() -> Self {
        HoldTimes {
            released: time_histogram(),
            expired: time_histogram(),
            force_released: time_histogram(),
        }
    }
}

impl HoldTimes {
    fn observe(&self, event: &Event) {
        let (held_ms, ended) = match event {
            Event::Released { held_ms, .. } => (held_ms, &self.released),
            Event::Expired { held_ms, .. } => (held_ms, &self.expired),
            Event::ForceReleased { held_ms, .. } => (held_ms, &self.force_released),
            _ => return,
        };
        if let Some(ms) = held_ms {
            ended.observe_duration(Duration::from_millis(*ms));
        }
    }
}

/// The timer tasks' view of the machine: what is due and when, bookkept under the machine's
/// lock, but never a change of the replicated state (that is proposed as an op and applied).
pub struct Timers<'a>(RwLockWriteGuard<'a, StateMachine>);

impl Timers<'_> {
    /// Leases due at `now`, at most `limit`, for one [`Op::Expire`].
    pub fn due_leases(&mut self, now: Millis, limit: usize) -> Vec<flockd_core::HoldingRef> {
        self.0.due_leases(now, limit)
    }

    /// Leases from [`Timers::due_leases`] whose expiry was not applied: due again.
    pub fn reschedule_leases(&mut self, leases: &[flockd_core::HoldingRef]) {
        self.0.reschedule_leases(leases)
    }

    /// The earliest scheduled deadline (it may be stale).
    pub fn next_deadline(&self) -> Option<Millis> {
        self.0.next_deadline()
    }

    /// Idle names beyond `max_idle` to forget (at most `limit`), least recently used first.
    pub fn idle_candidates(&mut self, max_idle: usize, limit: usize) -> Vec<bytes::Bytes> {
        self.0.idle_candidates(max_idle, limit)
    }
}

/// The lock table's and the fence register's figures over several groups' states, as one
/// node's (INFO, the metrics, the console).
#[derive(Default)]
pub struct Totals {
    pub locks: flockd_core::LockStats,
    pub fences: flockd_core::FenceStats,
    /// The highest of the groups' token floors.
    pub token_floor: u64,
}

impl Totals {
    pub fn of<'a>(states: impl IntoIterator<Item = &'a AppliedState>) -> Totals {
        let mut totals = Totals::default();
        for state in states {
            let machine = state.read();
            totals.locks += &machine.lock_stats();
            totals.fences += &machine.fence_stats();
            totals.token_floor = totals.token_floor.max(machine.token_floor());
        }
        totals
    }
}

pub struct AppliedState {
    machine: RwLock<StateMachine>,
    pub waits: WaitRegistry,
    /// How long locks were held: the node's, shared by its groups.
    pub holds: Arc<HoldTimes>,
    /// The most contended names (FLOCK.HOT): one for the whole node, as `pubsub`.
    pub hot: Arc<HotLocks>,
    /// Woken when an applied op scheduled a lease deadline earlier than all others.
    pub expiry_wake: Notify,
    /// Subscriptions, and the publishing of applied changes: one for the whole node, shared by
    /// the state of every group of a multi-group cluster.
    pub pubsub: Arc<PubSub>,
}

impl AppliedState {
    pub fn new(machine: StateMachine, hot_capacity: usize) -> AppliedState {
        AppliedState {
            hot: Arc::new(HotLocks::new(hot_capacity, std::time::Instant::now())),
            machine: RwLock::new(machine),
            waits: WaitRegistry::default(),
            holds: Arc::default(),
            expiry_wake: Notify::new(),
            pubsub: Arc::default(),
        }
    }

    /// Another group's state on the same node (a multi-group cluster): a machine and waits of
    /// its own, and the node's pub/sub, FLOCK.HOT and hold times, shared with `first`.
    pub fn beside(first: &AppliedState) -> AppliedState {
        AppliedState {
            hot: first.hot.clone(),
            machine: RwLock::new(StateMachine::new()),
            waits: WaitRegistry::default(),
            holds: first.holds.clone(),
            expiry_wake: Notify::new(),
            pubsub: first.pubsub.clone(),
        }
    }

    /// For reads: the applied state (every acknowledged change, nothing unacknowledged).
    pub fn read(&self) -> RwLockReadGuard<'_, StateMachine> {
        self.machine.read()
    }

    /// For the timer tasks: the machine's deadline index and recency marks, and nothing that
    /// changes its state (only an applied entry does that). Holds the machine's write lock
    /// until dropped (the index is walked in place), so keep it short.
    pub fn lock_timers(&self) -> Timers<'_> {
        Timers(self.machine.write())
    }

    /// CONFIG RESETSTAT: the lock table's event counters (its gauges are state, and stay).
    pub fn reset_counters(&self) {
        self.machine.write().reset_stats();
    }

    /// Routes the events of one op; those to publish move to `publish` (when it is `Some`),
    /// expiries to `expired` (for FLOCK.HOT, once the machine's lock is released).
    fn route(
        &self,
        events: &mut Vec<Event>,
        publish: &mut Option<Vec<Event>>,
        expired: &mut Vec<bytes::Bytes>,
    ) {
        for event in events.drain(..) {
            self.holds.observe(&event);
            if let Event::Expired { name, .. } = &event {
                expired.push(name.clone());
            }
            match &event {
                Event::Granted {
                    wait: Some(wait),
                    token,
                    ..
                } => self.waits.granted(*wait, Grant::One(*token)),
                Event::AllGranted { wait, tokens } => {
                    self.waits.granted(*wait, Grant::All(tokens.clone()))
                }
                Event::WaitEnded { wait, .. } => self.waits.ended(*wait),
                _ => {}
            }
            if let Some(publish) = publish {
                publish.push(event);
            }
        }
    }
}

impl AppliedState {
    /// Applies committed entries and routes their events. `proposed_here`: this node proposed them,
    /// so the waits they queue belong to connections parked here (a cluster node applies the
    /// others' entries too, and keeps no slot for their waits).
    fn apply_entries(
        &self,
        entries: &[Entry],
        proposed_here: bool,
        results: &mut Vec<Vec<OpResult>>,
    ) {
        let mut events = Vec::new();
        // Collected only while somebody listens, and published on the pub/sub thread, so
        // subscribers never hold up applying (or the readers waiting for it).
        let mut publish = self.pubsub.wants_events().then(Vec::new);
        // FLOCK.HOT's counts, recorded after the machine's lock is released.
        let mut contended = Vec::new();
        let mut expired = Vec::new();
        let mut machine = self.machine.write();
        for entry in entries {
            let mut entry_results = Vec::with_capacity(entry.ops.len());
            for (index, op) in entry.ops.iter().enumerate() {
                let result =
                    machine.apply_in_entry(entry.position, index as u32, entry.at, op, &mut events);
                match (&result, op) {
                    (OpResult::Acquire(AcquireResult::Queued(wait)), Op::Acquire { name, .. }) => {
                        if proposed_here {
                            self.waits.queued(*wait);
                        }
                        contended.push((name, Contention::Queued));
                    }
                    (OpResult::Acquire(AcquireResult::Queued(wait)), _)
                    | (OpResult::AcquireAll(AcquireAllResult::Queued(wait)), _)
                        if proposed_here =>
                    {
                        self.waits.queued(*wait)
                    }
                    (OpResult::Acquire(AcquireResult::Busy), Op::Acquire { name, .. }) => {
                        contended.push((name, Contention::Busy));
                    }
                    // A cancel ends the wait whatever it found: nobody claims it any more.
                    (_, Op::CancelWait { wait, .. } | Op::CancelWaitAll { wait, .. }) => {
                        self.waits.ended(*wait)
                    }
                    _ => {}
                }
                entry_results.push(result);
                self.route(&mut events, &mut publish, &mut expired);
            }
            results.push(entry_results);
        }
        let wake = machine.take_deadline_moved_earlier();
        drop(machine);
        if wake {
            self.expiry_wake.notify_one();
        }
        if !contended.is_empty() || !expired.is_empty() {
            let expiries = expired.iter().map(|name| (name, Contention::Expired));
            let seen = contended.into_iter().chain(expiries);
            self.hot.record_all(seen, std::time::Instant::now());
        }
        if let Some(publish) = publish
            && !publish.is_empty()
        {
            self.pubsub.publish_events(publish);
        }
    }
}

/// The one seam both logs drive it through: the AOF's writer after each durable batch, the
/// Raft state machine after each committed entry.
impl Apply for AppliedState {
    fn apply(&self, entries: &[Entry], proposed_here: bool, results: &mut Vec<Vec<OpResult>>) {
        self.apply_entries(entries, proposed_here, results)
    }

    fn snapshot(&self) -> Snapshot {
        self.machine.read().snapshot()
    }

    fn replace(&self, machine: StateMachine) {
        *self.machine.write() = machine;
        self.expiry_wake.notify_one();
    }

    fn time(&self) -> Millis {
        self.machine.read().time()
    }
}
