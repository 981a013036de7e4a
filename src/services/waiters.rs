//! The registry of blocked FLOCK.ACQUIRE ... WAIT (and FLOCK.ACQUIREALL ... WAIT) calls: which wait id belongs to which parked
//! connection. The core only knows wait ids; when an applied op grants a lock to one, the
//! applier looks it up here and hands the token over.
//!
//! A slot is created when the acquire that queued is applied (before its proposer even sees the
//! result), so a grant that comes right after cannot be missed; the proposer claims the receiving
//! end afterwards. The slot goes when the wait is granted and claimed, or ends.

use std::collections::HashMap;

use flockd_core::WaitId;
use parking_lot::Mutex;
use tokio::sync::oneshot;

/// What a wait was granted: one token, or FLOCK.ACQUIREALL's tokens in the order of its names.
#[derive(Debug)]
pub enum Grant {
    One(u64),
    All(Vec<u64>),
}

struct WaitSlot {
    /// `None` once the grant was sent.
    grant: Option<oneshot::Sender<Grant>>,
    /// `None` once the parked connection claimed it.
    receiver: Option<oneshot::Receiver<Grant>>,
}

#[derive(Default)]
pub struct WaitRegistry {
    slots: Mutex<HashMap<WaitId, WaitSlot>>,
}

impl WaitRegistry {
    /// A wait was queued.
    pub fn queued(&self, wait: WaitId) {
        let (grant, receiver) = oneshot::channel();
        self.slots.lock().insert(
            wait,
            WaitSlot {
                grant: Some(grant),
                receiver: Some(receiver),
            },
        );
    }

    /// The wait was granted.
    pub fn granted(&self, wait: WaitId, token: Grant) {
        let mut slots = self.slots.lock();
        let Some(slot) = slots.get_mut(&wait) else {
            return;
        };
        if let Some(grant) = slot.grant.take() {
            let _ = grant.send(token);
        }
        if slot.receiver.is_none() {
            slots.remove(&wait);
        }
    }

    /// The wait left the queue without a grant (cancelled, or dropped by a re-arm): the parked
    /// connection's receiver sees its sender gone.
    pub fn ended(&self, wait: WaitId) {
        self.slots.lock().remove(&wait);
    }

    /// The parked connection takes the receiving end (once). `None`: the wait already ended.
    pub fn claim(&self, wait: WaitId) -> Option<oneshot::Receiver<Grant>> {
        let mut slots = self.slots.lock();
        let slot = slots.get_mut(&wait)?;
        let receiver = slot.receiver.take();
        if slot.grant.is_none() {
            slots.remove(&wait);
        }
        receiver
    }
}
