//! Closing while a stopping leader drains: a connection between commands is closed, so its
//! client finds the new leader through its sentinels before its next command; one that came in
//! during the drain is closed only once idle after real work, so a client that came back to this
//! port is served first.

use super::Session;
use crate::commands::TABLE;

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
    pub(in crate::server) fn worked_on(&mut self, index: usize) {
        if !self.worked && !is_setup(TABLE[index].name) {
            self.worked = true;
        }
    }

    /// Whether a drain may close the connection now, as far as its session goes (the
    /// connection also has no input or replies pending).
    pub(in crate::server) fn idle(&self) -> bool {
        self.transaction.is_none() && (!self.joined_while_draining || self.worked)
    }
}
