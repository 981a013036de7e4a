//! QUIT: +OK, then the server closes the connection.

use flockd_proto::Reply;

use super::args::Args;
use super::context::{CommandResult, Ctx, Outcome};
use super::error::CommandError;
use super::kinds::{CommandDef, LocalCommand};
use super::meta::{CommandFlags, Meta};

#[derive(Debug)]
pub struct Quit;

impl CommandDef for Quit {
    const META: Meta = Meta {
        syntax: "QUIT",
        ..Meta::new(
            "quit",
            -1,
            CommandFlags {
                no_auth: true,
                ..CommandFlags::READ
            },
            "Closes the connection.",
        )
    };

    fn parse(args: &mut Args) -> Result<Self, CommandError> {
        while args.next_opt().is_some() {}
        Ok(Quit)
    }
}

impl LocalCommand for Quit {
    fn run(self, _ctx: &mut Ctx<'_>) -> CommandResult {
        Ok(Outcome::ReplyAndClose(Reply::ok()))
    }
}
