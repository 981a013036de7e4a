//! What a connection does besides moving requests and replies, one job per file: a transaction
//! (MULTI ... EXEC), a blocking wait (FLOCK.ACQUIRE ... WAIT), monitor mode, pub/sub delivery,
//! and what a closing connection ends; `outcome.rs` says which a command's outcome asks for.
//! Each is a part of `server::connection::Connection`, which calls into them; the ops they
//! need are built by the commands that own them. Here: what the session keeps, and closing
//! while a stopping leader drains.

mod blocking;
mod closing;
mod monitor;
mod outcome;
mod subscriber;
mod transaction;

use std::collections::BTreeSet;

use bytes::Bytes;

use super::Shared;
use crate::commands::{Command, TABLE};

/// What a connection keeps beyond its commands' view.
pub(super) struct Session {
    /// Between MULTI and EXEC: the queued commands.
    transaction: Option<Transaction>,
    /// The names this connection acquired with SESSION: their session holdings end when it
    /// closes.
    holdings: BTreeSet<Bytes>,
    /// Accepted while a stopping leader drains (`Shared::draining`): such a connection is closed
    /// only once idle after real work, so a client that came back to this port is served first.
    joined_while_draining: bool,
    /// Has run a command other than connection setup (HELLO, AUTH, CLIENT, ...).
    worked: bool,
}

/// The commands queued between MULTI and EXEC (see `transaction.rs`).
#[derive(Default)]
struct Transaction {
    /// (table index, command), in order.
    queued: Vec<(usize, Command)>,
    /// A command failed to queue: EXEC aborts.
    failed: bool,
}

impl Session {
    pub(super) fn new(shared: &Shared) -> Session {
        Session {
            transaction: None,
            holdings: BTreeSet::new(),
            joined_while_draining: shared.draining.is_cancelled(),
            worked: false,
        }
    }
}

/// What client libraries send while they set a connection up, before the work it is for.
fn is_setup(name: &str) -> bool {
    matches!(
        name,
        "hello"
            | "auth"
            | "client"
            | "select"
            | "ping"
            | "echo"
            | "command"
            | "readonly"
            | "readwrite"
    )
}

impl Session {
    /// The command at `index` is about to run.
    #[inline]
    pub(super) fn worked_on(&mut self, index: usize) {
        if !self.worked && !is_setup(TABLE[index].name) {
            self.worked = true;
        }
    }

    /// Whether a drain may close the connection now, as far as its session goes (the
    /// connection also has no input or replies pending).
    pub(super) fn idle(&self) -> bool {
        self.transaction.is_none() && (!self.joined_while_draining || self.worked)
    }
}
