//! PING [message]: +PONG, or the message back (in RESP2's subscribed mode, a `pong` frame).

use bytes::Bytes;
use flockd_proto::{ProtocolVersion, Reply};

use super::args::Args;
use super::context::{CommandResult, Ctx, reply};
use super::error::CommandError;
use super::kinds::{CommandDef, LocalCommand};
use super::meta::{CommandFlags, Meta};

#[derive(Debug)]
pub struct Ping {
    message: Option<Bytes>,
}

impl CommandDef for Ping {
    const META: Meta = Meta {
        syntax: "PING [message]",
        ..Meta::new(
            "ping",
            -1,
            CommandFlags::READ,
            "Returns PONG, or the message.",
        )
    };

    fn parse(args: &mut Args) -> Result<Self, CommandError> {
        if args.remaining() > 1 {
            return Err(CommandError::WrongArity("ping".into()));
        }
        Ok(Ping {
            message: args.next_opt(),
        })
    }
}

impl LocalCommand for Ping {
    fn run(self, ctx: &mut Ctx<'_>) -> CommandResult {
        // RESP2's subscribed mode answers as a message would come: `[pong, message or ""]`.
        if ctx.conn.subscriptions.active() && ctx.conn.protocol() == ProtocolVersion::Resp2 {
            return reply(Reply::Array(vec![
                Reply::Bulk(Bytes::from_static(b"pong")),
                Reply::Bulk(self.message.unwrap_or_default()),
            ]));
        }
        reply(match self.message {
            None => Reply::Simple("PONG".into()),
            Some(message) => Reply::Bulk(message),
        })
    }
}
