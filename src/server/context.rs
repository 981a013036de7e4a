//! What a command sees while it runs: the shared server state, its own connection's state and
//! the time it was applied at, and what it hands back to the connection loop.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use flockd_core::{Journal, Millis, WaitTicket};
use flockd_proto::{ProtocolVersion, Reply};
use tokio::sync::oneshot;

use super::Shared;
use super::clients::ClientHandle;
use crate::commands::CommandError;

/// Per-connection state that commands read and change.
pub struct ConnState {
    pub handle: Arc<ClientHandle>,
    pub protocol: ProtocolVersion,
    pub authenticated: bool,
}

pub struct Ctx<'a> {
    pub shared: &'a Shared,
    pub conn: &'a mut ConnState,
    /// The moment the command is applied at: leases run from here.
    pub now: Millis,
}

impl Ctx<'_> {
    pub fn journal(&self) -> &dyn Journal {
        &*self.shared.aof
    }
}

/// What the connection loop does after a command.
pub enum Outcome {
    Reply(Reply),
    /// Park the connection until the lock is granted or the wait times out (like BLPOP).
    Wait(Waiting),
    /// Send the reply, then close the connection (QUIT).
    ReplyAndClose(Reply),
    /// Close without a reply (SHUTDOWN, as Redis does when it goes down).
    Close,
}

impl From<Reply> for Outcome {
    fn from(reply: Reply) -> Outcome {
        Outcome::Reply(reply)
    }
}

/// A queued FLOCK.ACQUIRE ... WAIT.
pub struct Waiting {
    pub name: Bytes,
    pub ticket: WaitTicket,
    pub grant: oneshot::Receiver<u64>,
    pub deadline: Instant,
}

pub type CommandResult = Result<Outcome, CommandError>;

pub fn reply(reply: Reply) -> CommandResult {
    Ok(Outcome::Reply(reply))
}
