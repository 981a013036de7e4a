//! What a local command's outcome asks of its connection: a reply or several, closing, an
//! awaited reply, or one of the session's jobs (a transaction, monitor mode).

use flockd_proto::Reply;
use tokio::io::{AsyncRead, AsyncWrite};

use super::{Connection, Next};
use crate::commands::context::{CommandResult, Outcome};
use crate::services::stats;

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
