//! SHUTDOWN [NOSAVE|SAVE] [NOW] [FORCE] [ABORT]: stop the server as SIGTERM does (the AOF is
//! flushed and fsynced whatever the options say; there is nothing to skip).

use super::args::Args;
use super::context::{CommandResult, Ctx, Outcome};
use super::error::CommandError;
use super::kinds::{CommandDef, LocalCommand};
use super::meta::{CommandFlags, Meta};

#[derive(Debug)]
pub struct Shutdown {
    abort: bool,
}

impl CommandDef for Shutdown {
    const META: Meta = Meta {
        syntax: "SHUTDOWN [NOSAVE|SAVE] [NOW] [FORCE] [ABORT]",
        group: "server",
        ..Meta::new(
            "shutdown",
            -1,
            CommandFlags {
                admin: true,
                fast: false,
                ..CommandFlags::READ
            },
            "Flushes the AOF and stops the server.",
        )
    };

    fn parse(args: &mut Args) -> Result<Self, CommandError> {
        let mut abort = false;
        while let Some(option) = args.next_keyword() {
            match option.as_str() {
                "NOSAVE" | "SAVE" | "NOW" | "FORCE" => {}
                "ABORT" => abort = true,
                _ => return Err(CommandError::Syntax),
            }
        }
        Ok(Shutdown { abort })
    }
}

impl LocalCommand for Shutdown {
    fn run(self, ctx: &mut Ctx<'_>) -> CommandResult {
        if self.abort {
            return Err(CommandError::NoShutdownInProgress);
        }
        tracing::info!(
            client = ctx.conn.handle.id,
            "SHUTDOWN requested by a client"
        );
        ctx.server.stop();
        Ok(Outcome::Close)
    }
}
