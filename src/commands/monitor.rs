//! MONITOR: the connection sees every command the server receives from then on (see
//! `services::monitor`), until QUIT, RESET or its disconnection.

use flockd_proto::Reply;

use super::args::Args;
use super::context::{CommandResult, Ctx, Outcome};
use super::error::CommandError;
use super::kinds::{CommandDef, LocalCommand};
use super::meta::{CommandFlags, Meta};

#[derive(Debug)]
pub struct Monitor;

impl CommandDef for Monitor {
    const META: Meta = Meta {
        syntax: "MONITOR",
        group: "server",
        ..Meta::new(
            "monitor",
            1,
            CommandFlags {
                admin: true,
                fast: false,
                ..CommandFlags::READ
            },
            "Listens for all requests received by the server in real time.",
        )
    };

    fn parse(_args: &mut Args) -> Result<Self, CommandError> {
        Ok(Monitor)
    }
}

impl LocalCommand for Monitor {
    fn run(self, _ctx: &mut Ctx<'_>) -> CommandResult {
        Ok(Outcome::Monitor(Reply::ok()))
    }
}
