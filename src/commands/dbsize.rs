//! DBSIZE: the number of lock names the table keeps (held, waited for, or idle with a counter),
//! as INFO's `lock_names` and the keyspace line `db0:keys=` report it. Fence keys are not
//! counted.

use flockd_proto::Reply;

use super::args::Args;
use super::context::{CommandResult, Ctx, reply};
use super::error::CommandError;
use super::kinds::{CommandDef, LocalCommand};
use super::meta::{CommandFlags, Meta};

#[derive(Debug)]
pub struct DbSize;

impl CommandDef for DbSize {
    const META: Meta = Meta {
        syntax: "DBSIZE",
        group: "server",
        ..Meta::new(
            "dbsize",
            1,
            CommandFlags::READ,
            "Returns the number of lock names kept.",
        )
    };

    fn parse(_args: &mut Args) -> Result<Self, CommandError> {
        Ok(DbSize)
    }
}

impl LocalCommand for DbSize {
    fn run(self, ctx: &mut Ctx<'_>) -> CommandResult {
        let names: u64 = ctx
            .server
            .groups()
            .iter()
            .map(|group| group.applied.read().lock_stats().names)
            .sum();
        reply(Reply::Integer(names as i64))
    }
}
