//! ECHO message: the message back.

use bytes::Bytes;
use flockd_proto::Reply;

use super::args::Args;
use super::context::{CommandResult, Ctx, reply};
use super::error::CommandError;
use super::kinds::{CommandDef, LocalCommand};
use super::meta::{CommandFlags, Meta};

#[derive(Debug)]
pub struct Echo {
    message: Bytes,
}

impl CommandDef for Echo {
    const META: Meta = Meta {
        syntax: "ECHO message",
        ..Meta::new("echo", 2, CommandFlags::READ, "Returns the given string.")
    };

    fn parse(args: &mut Args) -> Result<Self, CommandError> {
        Ok(Echo {
            message: args.next_bytes()?,
        })
    }
}

impl LocalCommand for Echo {
    fn run(self, _ctx: &mut Ctx<'_>) -> CommandResult {
        reply(Reply::Bulk(self.message))
    }
}
