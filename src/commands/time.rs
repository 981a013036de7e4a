//! TIME: the server's wall clock as [seconds, microseconds], as Redis replies it.

use std::time::{SystemTime, UNIX_EPOCH};

use flockd_proto::Reply;

use super::args::Args;
use super::context::{CommandResult, Ctx, reply};
use super::error::CommandError;
use super::kinds::{CommandDef, LocalCommand};
use super::meta::{CommandFlags, Meta};

#[derive(Debug)]
pub struct Time;

impl CommandDef for Time {
    const META: Meta = Meta {
        syntax: "TIME",
        group: "server",
        ..Meta::new("time", 1, CommandFlags::READ, "Returns the server time.")
    };

    fn parse(_args: &mut Args) -> Result<Self, CommandError> {
        Ok(Time)
    }
}

impl LocalCommand for Time {
    fn run(self, _ctx: &mut Ctx<'_>) -> CommandResult {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        reply(Reply::Array(vec![
            Reply::bulk(now.as_secs().to_string()),
            Reply::bulk(now.subsec_micros().to_string()),
        ]))
    }
}
