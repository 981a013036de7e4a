//! AUTH [username] password: authenticates the connection against `requirepass` (the only
//! user is `default`, as in Redis without ACLs).

use bytes::Bytes;
use flockd_proto::Reply;

use super::args::Args;
use super::context::{CommandResult, Ctx, reply};
use super::error::CommandError;
use super::kinds::{CommandDef, LocalCommand};
use super::meta::{CommandFlags, Meta};

#[derive(Debug)]
pub struct Auth {
    username: Option<Bytes>,
    password: Bytes,
}

impl CommandDef for Auth {
    const META: Meta = Meta {
        syntax: "AUTH [username] password",
        ..Meta::new(
            "auth",
            -2,
            CommandFlags {
                no_auth: true,
                ..CommandFlags::READ
            },
            "Authenticates the connection.",
        )
    };

    fn parse(args: &mut Args) -> Result<Self, CommandError> {
        match args.remaining() {
            1 => Ok(Auth {
                username: None,
                password: args.next_bytes()?,
            }),
            2 => Ok(Auth {
                username: Some(args.next_bytes()?),
                password: args.next_bytes()?,
            }),
            _ => Err(CommandError::Syntax),
        }
    }
}

impl LocalCommand for Auth {
    fn run(self, ctx: &mut Ctx<'_>) -> CommandResult {
        if self.username.is_none()
            && ctx
                .server
                .acl()
                .user("default")
                .is_some_and(|u| u.nopass && u.enabled)
        {
            return Err(CommandError::NoPasswordConfigured);
        }
        check_credentials(ctx, self.username.as_deref(), &self.password)?;
        reply(Reply::ok())
    }
}

/// Checks a username/password pair and marks the connection authenticated.
pub fn check_credentials(
    ctx: &mut Ctx<'_>,
    username: Option<&[u8]>,
    password: &[u8],
) -> Result<(), CommandError> {
    let name = String::from_utf8_lossy(username.unwrap_or(b"default")).into_owned();
    let user = ctx.server.acl().read().authenticate(&name, password);
    match user {
        Some(user) => {
            ctx.conn.set_user(user);
            ctx.conn.acl_generation = ctx.server.acl().generation();
            ctx.conn.authenticated = true;
            Ok(())
        }
        None => {
            // Logged (never the password) and in ACL LOG, so guessing is visible.
            tracing::warn!(
                client = ctx.conn.handle.id,
                addr = %ctx.conn.handle.addr,
                user = %name,
                "AUTH failed"
            );
            super::permissions::record(
                ctx.server.acl(),
                ctx.conn,
                ctx.server.command_table(),
                &name,
                flockd_acl::Denial::Auth,
                "AUTH",
            );
            Err(CommandError::WrongPass)
        }
    }
}
