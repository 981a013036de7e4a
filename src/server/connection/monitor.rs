//! Monitor mode (after MONITOR): every command the server receives is written to this client,
//! until it sends QUIT or RESET (the only commands it may still run), closes, or falls too far
//! behind (the feed itself is `services::monitor`).

use flockd_proto::Reply;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::broadcast::error::RecvError;
use tracing::debug;

use super::{Connection, Next, READ_CHUNK};
use crate::commands::LocalCommand;
use crate::commands::context::{Ctx, Outcome};
use crate::commands::reset::Reset;
use crate::server::shared::{PREAUTH_QUERY_BUFFER, limits};
use crate::services::stats;

impl<S: AsyncRead + AsyncWrite + Unpin> Connection<S> {
    /// Sends MONITOR's reply `ok`, then serves the feed until the mode ends.
    pub(super) async fn monitor(&mut self, ok: Reply) -> std::io::Result<Next> {
        // Subscribed before the +OK goes out: every command a client sends after it sees the
        // +OK is in the feed (it raced before, under load).
        let mut watch = self.shared.monitors.subscribe();
        self.push_ready(ok);
        self.flush().await?;
        let shared = self.shared.clone();
        let handle = self.conn.handle.clone();
        loop {
            loop {
                match self
                    .parser
                    .parse(&mut self.input, &limits(self.config.load()))
                {
                    Ok(Some(request)) => {
                        let name = request.args[0].to_ascii_lowercase();
                        if name == b"quit" {
                            self.push_ready(Reply::ok());
                            return Ok(Next::Close);
                        }
                        if name == b"reset" {
                            let mut ctx = Ctx {
                                server: &*self.shared,
                                conn: &mut self.conn,
                            };
                            if let Ok(Outcome::Reply(reply) | Outcome::Discard(reply)) =
                                LocalCommand::run(Reset, &mut ctx)
                            {
                                self.push_ready(reply);
                            }
                            self.flush().await?;
                            return Ok(Next::Continue);
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        self.protocol_error(e);
                        return Ok(Next::Close);
                    }
                }
            }
            if self.input.len() > PREAUTH_QUERY_BUFFER {
                return Ok(Next::Close);
            }
            self.input.reserve(READ_CHUNK);
            tokio::select! {
                line = watch.lines.recv() => match line {
                    Ok(line) => {
                        stats::bump(&shared.stats.net_output_bytes, line.len() as u64);
                        self.stream.write_all(&line).await?;
                    }
                    Err(RecvError::Lagged(missed)) => {
                        debug!(client = handle.id, missed, "monitor fell behind; disconnected");
                        return Ok(Next::Close);
                    }
                    Err(RecvError::Closed) => return Ok(Next::Close),
                },
                read = self.stream.read_buf(&mut self.input) => match read {
                    Ok(n) if n > 0 => stats::bump(&shared.stats.net_input_bytes, n as u64),
                    _ => return Ok(Next::Close),
                },
                _ = shared.shutdown.cancelled() => return Ok(Next::Close),
                _ = handle.kill.cancelled() => return Ok(Next::Close),
            }
        }
    }
}
