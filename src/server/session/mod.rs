//! What a connection does besides moving requests and replies, one job per file: a transaction
//! (MULTI ... EXEC), a blocking wait (FLOCK.ACQUIRE ... WAIT), monitor mode, pub/sub delivery,
//! closing while a stopping leader drains, and what a closing connection ends. Each is a part of
//! [`super::connection::Connection`] that the connection calls into, as the outcome of a command
//! says ([`Connection::follow`]); the ops they need are built by the commands that own them.

mod blocking;
mod closing;
mod draining;
mod monitor;
mod subscriber;
mod transaction;

use std::collections::BTreeSet;

use bytes::Bytes;
use flockd_proto::Reply;
use tokio::io::{AsyncRead, AsyncWrite};

use super::Shared;
use super::connection::{Connection, Next};
use super::context::{CommandResult, Outcome};
use super::stats;

pub(super) use subscriber::next_message;
use transaction::Transaction;

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

impl<S: AsyncRead + AsyncWrite + Unpin> Connection<S> {
    /// Does what a local command's outcome says.
    pub(super) async fn follow(
        &mut self,
        index: usize,
        result: CommandResult,
    ) -> std::io::Result<Next> {
        match result {
            Ok(Outcome::Reply(reply)) => self.push_ready(reply),
            Ok(Outcome::ReplyAndClose(reply)) => {
                self.push_ready(reply);
                return Ok(Next::Close);
            }
            // The replies of commands before it in the batch still go out.
            Ok(Outcome::Close) => return Ok(Next::Close),
            Ok(Outcome::Replies(replies)) => {
                for reply in replies {
                    self.push_ready(reply);
                }
            }
            Ok(Outcome::Await(finishing)) => {
                self.resolve().await;
                let reply = finishing.await;
                self.push_ready(reply);
            }
            Ok(Outcome::BeginTransaction) => {
                self.begin_transaction();
                self.push_ready(Reply::ok());
            }
            Ok(Outcome::Exec) => return self.exec(index).await,
            Ok(Outcome::Discard(reply)) => {
                self.discard_transaction();
                self.push_ready(reply);
            }
            Ok(Outcome::Monitor(reply)) => return self.monitor(reply).await,
            Err(e) => {
                let stat = &self.shared.stats.commands[index];
                self.push_ready(Reply::error(stats::failed(stat, &e)));
            }
        }
        Ok(Next::Continue)
    }
}
