//! RESET: back to a fresh connection's state (RESP2, no name, not authenticated when a password
//! is set, no subscriptions).

use flockd_proto::{ProtocolVersion, Reply};

use super::args::Args;
use super::context::{CommandResult, Ctx, Outcome};
use super::error::CommandError;
use super::kinds::{CommandDef, LocalCommand};
use super::meta::{CommandFlags, Meta};

#[derive(Debug)]
pub struct Reset;

impl CommandDef for Reset {
    const META: Meta = Meta {
        syntax: "RESET",
        ..Meta::new(
            "reset",
            1,
            CommandFlags {
                no_auth: true,
                ..CommandFlags::READ
            },
            "Resets the connection.",
        )
    };

    fn parse(_args: &mut Args) -> Result<Self, CommandError> {
        Ok(Reset)
    }
}

impl LocalCommand for Reset {
    fn run(self, ctx: &mut Ctx<'_>) -> CommandResult {
        ctx.conn.handle.set_protocol(ProtocolVersion::Resp2);
        ctx.conn.readonly = false;
        // Back to `default`, logged in only if that user needs no password (Redis's RESET).
        if let Some(user) = ctx.server.acl().user("default") {
            ctx.conn.authenticated = user.enabled && user.nopass;
            ctx.conn.set_user(user);
        }
        ctx.conn.acl_generation = ctx.server.acl().generation();
        ctx.conn.handle.names.lock().name = None;
        super::unsubscribe::leave_all(&ctx.server.applied().pubsub, ctx.conn);
        Ok(Outcome::Discard(Reply::Simple("RESET".into())))
    }
}
