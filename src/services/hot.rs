//! The most contended lock names (FLOCK.HOT), in bounded memory: no lock name ever becomes a
//! metric label, so this answers "which locks are hot" instead.
//!
//! Contention events (a wait queued, the time it waited, a lease that expired, an acquire
//! answered busy) are counted per name in a Space-Saving sketch (Metwally et al.): at most
//! `capacity` names are tracked; a new name takes the place of the one with the least weight
//! and starts from that weight, so a name with more than 1/capacity of a slot's events is never
//! pushed out, however many cold ones pass through. The weight of a name is its waits plus busy answers plus expiries.
//!
//! "The last 60 s" is six slots of ten seconds, each its own sketch of `capacity` names; a
//! report adds up the slots that are less than a minute old (so it covers 50 to 60 s), and a
//! slot is emptied when its ten seconds come round again. Events arrive from the apply path
//! (already serialized by the state machine's lock) and from connections ending a wait.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;

const SLOTS: usize = 6;
const SLOT: Duration = Duration::from_secs(10);

/// One name's counts within one slot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HotCounts {
    pub waits: u64,
    pub wait_ms: u64,
    pub expiries: u64,
    pub busy: u64,
}

impl HotCounts {
    fn add(&mut self, other: &HotCounts) {
        self.waits += other.waits;
        self.wait_ms += other.wait_ms;
        self.expiries += other.expiries;
        self.busy += other.busy;
    }
}

/// What happened to a name.
#[derive(Clone, Copy, Debug)]
pub enum Contention {
    Queued,
    Waited(Duration),
    Expired,
    Busy,
}

struct Tracked {
    /// Ranking weight: events counted plus the weight inherited from the name it replaced.
    weight: u64,
    /// Its key in the slot's weight index, beside the weight.
    id: u64,
    counts: HotCounts,
}

#[derive(Default)]
struct Slot {
    /// Which ten-second period since the start this slot holds.
    period: u64,
    /// Hashed with foldhash, as the lock table is: a busy answer on a cold name, the commonest
    /// event under load, looks its name up here on the apply path.
    names: HashMap<Bytes, Tracked, foldhash::fast::RandomState>,
    /// Every tracked name by (weight, id): the least weighty is the first, so making room
    /// costs O(log capacity), not a scan of the slot (with a million cold names passing
    /// through, as in a flood of busy answers, the scan was a tenth of the server's CPU). Keyed
    /// by an id, not the name: moving a name to its next weight then compares two integers and
    /// moves the name's `Bytes` along, instead of comparing names and cloning them.
    by_weight: BTreeMap<(u64, u64), Bytes>,
    next_id: u64,
}

pub struct HotLocks {
    capacity: usize,
    started: Instant,
    slots: Mutex<[Slot; SLOTS]>,
}

/// One line of FLOCK.HOT.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HotName {
    pub name: Bytes,
    pub counts: HotCounts,
}

impl HotLocks {
    pub fn new(capacity: usize, started: Instant) -> HotLocks {
        HotLocks {
            capacity: capacity.max(1),
            started,
            slots: Mutex::new(Default::default()),
        }
    }

    fn period(&self, now: Instant) -> u64 {
        (now.saturating_duration_since(self.started).as_millis() / SLOT.as_millis()) as u64
    }

    pub fn record(&self, name: &Bytes, what: Contention, now: Instant) {
        self.record_all([(name, what)], now);
    }

    /// Records several at once, under one take of the sketch's lock (apply records a batch's
    /// contention after it released the machine's lock, so readers do not wait for this).
    pub fn record_all<'a>(
        &self,
        seen: impl IntoIterator<Item = (&'a Bytes, Contention)>,
        now: Instant,
    ) {
        let period = self.period(now);
        let mut slots = self.slots.lock();
        let slot = &mut slots[(period % SLOTS as u64) as usize];
        if slot.period != period {
            slot.period = period;
            slot.names.clear();
            slot.by_weight.clear();
            slot.next_id = 0;
        }
        for (name, what) in seen {
            slot.count(name, what, self.capacity);
        }
    }
    /// The `count` most contended names of the last minute: most waits first, then most busy
    /// answers, most expiries, most time waited, then by name.
    pub fn top(&self, count: usize, now: Instant) -> Vec<HotName> {
        let current = self.period(now);
        let slots = self.slots.lock();
        let mut totals: HashMap<&Bytes, HotCounts> = HashMap::new();
        for slot in slots.iter() {
            if current.saturating_sub(slot.period) >= SLOTS as u64 || slot.period > current {
                continue;
            }
            for (name, tracked) in &slot.names {
                totals.entry(name).or_default().add(&tracked.counts);
            }
        }
        let mut lines: Vec<HotName> = totals
            .into_iter()
            .filter(|(_, c)| c.waits + c.busy + c.expiries > 0)
            .map(|(name, counts)| HotName {
                name: name.clone(),
                counts,
            })
            .collect();
        lines.sort_by(|a, b| {
            let key = |h: &HotName| {
                (
                    h.counts.waits,
                    h.counts.busy,
                    h.counts.expiries,
                    h.counts.wait_ms,
                )
            };
            key(b).cmp(&key(a)).then_with(|| a.name.cmp(&b.name))
        });
        lines.truncate(count);
        lines
    }
}

impl Slot {
    fn count(&mut self, name: &Bytes, what: Contention, capacity: usize) {
        if let Some(tracked) = self.names.get_mut(name) {
            if tracked.add(what) {
                let (weight, id) = (tracked.weight, tracked.id);
                if let Some(name) = self.by_weight.remove(&(weight - 1, id)) {
                    self.by_weight.insert((weight, id), name);
                }
            }
            return;
        }
        // Space-Saving: when full, the least weighty name makes room and leaves its weight
        // behind.
        let mut floor = 0;
        if self.names.len() >= capacity
            && let Some(((weight, _), victim)) = self.by_weight.pop_first()
        {
            self.names.remove(&victim);
            floor = weight;
        }
        let id = self.next_id;
        self.next_id += 1;
        let mut tracked = Tracked {
            weight: floor,
            id,
            counts: HotCounts::default(),
        };
        tracked.add(what);
        // A copy, not a clone: the name is a slice of some connection's read buffer, which a
        // clone would keep alive (and whose shared count every drop would touch).
        let name = Bytes::copy_from_slice(name);
        self.by_weight.insert((tracked.weight, id), name.clone());
        self.names.insert(name, tracked);
    }
}

impl Tracked {
    /// Counts one event; true if it added to the weight.
    fn add(&mut self, what: Contention) -> bool {
        match what {
            Contention::Queued => self.counts.waits += 1,
            Contention::Waited(d) => {
                self.counts.wait_ms += d.as_millis() as u64;
                // The time adds to what was counted when it queued, not to the weight.
                return false;
            }
            Contention::Expired => self.counts.expiries += 1,
            Contention::Busy => self.counts.busy += 1,
        }
        self.weight += 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    #[test]
    fn the_most_contended_come_first_with_their_counts() {
        let t0 = Instant::now();
        let hot = HotLocks::new(16, t0);
        for _ in 0..3 {
            hot.record(&name("a"), Contention::Queued, t0);
        }
        hot.record(
            &name("a"),
            Contention::Waited(Duration::from_millis(250)),
            t0,
        );
        hot.record(&name("b"), Contention::Busy, t0);
        hot.record(&name("b"), Contention::Expired, t0);
        hot.record(&name("c"), Contention::Queued, t0);
        let top = hot.top(10, t0);
        let names: Vec<&[u8]> = top.iter().map(|h| &h.name[..]).collect();
        assert_eq!(names, vec![&b"a"[..], b"c", b"b"]);
        assert_eq!(
            top[0].counts,
            HotCounts {
                waits: 3,
                wait_ms: 250,
                expiries: 0,
                busy: 0
            }
        );
        assert_eq!(hot.top(1, t0).len(), 1);
    }

    #[test]
    fn a_hot_name_survives_a_flood_of_cold_ones() {
        // Space-Saving keeps every name with more than total/capacity events: here 100 of
        // 100 + 500 events with capacity 8 (threshold 75).
        let t0 = Instant::now();
        let hot = HotLocks::new(8, t0);
        for _ in 0..100 {
            hot.record(&name("hot"), Contention::Busy, t0);
        }
        for i in 0..500 {
            hot.record(&name(&format!("cold{i}")), Contention::Busy, t0);
        }
        let top = hot.top(3, t0);
        assert_eq!(&top[0].name[..], b"hot");
        assert_eq!(top[0].counts.busy, 100);
        // Memory stays bounded: one slot holds at most `capacity` names, and its weight index
        // holds exactly those.
        assert!(hot.slots.lock().iter().all(|s| s.names.len() <= 8));
        assert!(hot.slots.lock().iter().all(|s| {
            s.by_weight.len() == s.names.len()
                && s.by_weight
                    .iter()
                    .all(|((w, id), n)| s.names[n].weight == *w && s.names[n].id == *id)
        }));
        // A flood far above that threshold does push it out: the guarantee, not more.
        for i in 0..10_000 {
            hot.record(&name(&format!("flood{i}")), Contention::Busy, t0);
        }
        assert!(hot.slots.lock().iter().all(|s| s.names.len() <= 8));
    }

    #[test]
    fn only_the_last_minute_counts() {
        let t0 = Instant::now();
        let hot = HotLocks::new(16, t0);
        hot.record(&name("old"), Contention::Queued, t0);
        hot.record(&name("new"), Contention::Busy, t0 + Duration::from_secs(55));
        let at = |s| t0 + Duration::from_secs(s);
        assert_eq!(hot.top(10, at(55)).len(), 2);
        // 60 s on, the first slot is out of the window; at 70 s it has been reused.
        let names: Vec<Bytes> = hot.top(10, at(61)).into_iter().map(|h| h.name).collect();
        assert_eq!(names, vec![name("new")]);
        hot.record(&name("newer"), Contention::Expired, at(61));
        let names: Vec<Bytes> = hot.top(10, at(61)).into_iter().map(|h| h.name).collect();
        assert_eq!(names, vec![name("new"), name("newer")]);
        assert!(hot.top(10, at(200)).is_empty());
    }
}
