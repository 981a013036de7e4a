//! PING [message]: +PONG, or the message back.

use bytes::Bytes;
use flockd_proto::Reply;

use super::{Args, CommandDef, CommandError, CommandFlags, LocalCommand, Meta};
use crate::server::context::{CommandResult, Ctx, reply};

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
    fn run(self, _ctx: &mut Ctx<'_>) -> CommandResult {
        reply(match self.message {
            None => Reply::Simple("PONG".into()),
            Some(message) => Reply::Bulk(message),
        })
    }
}
