//! SELECT index: flockd has one keyspace, database 0; any other index is refused.

use flockd_proto::Reply;

use super::args::Args;
use super::context::{CommandResult, Ctx, reply};
use super::error::CommandError;
use super::kinds::{CommandDef, LocalCommand};
use super::meta::{CommandFlags, Meta};
use flockd_proto::parse_int;

#[derive(Debug)]
pub struct Select {
    index: i64,
}

impl CommandDef for Select {
    const META: Meta = Meta {
        syntax: "SELECT index",
        ..Meta::new(
            "select",
            2,
            CommandFlags::READ,
            "Selects database 0, the only one.",
        )
    };

    fn parse(args: &mut Args) -> Result<Self, CommandError> {
        let index = parse_int(&args.next_bytes()?).ok_or(CommandError::NotInteger)?;
        Ok(Select { index })
    }
}

impl LocalCommand for Select {
    fn run(self, _ctx: &mut Ctx<'_>) -> CommandResult {
        match self.index {
            0 => reply(Reply::ok()),
            _ => Err(CommandError::DbIndexOutOfRange),
        }
    }
}
