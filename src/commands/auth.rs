//! AUTH [username] password: authenticates the connection against `requirepass` (the only
//! user is `default`, as in Redis without ACLs).

use bytes::Bytes;
use flockd_proto::Reply;

use super::{Args, CommandDef, CommandError, CommandFlags, LocalCommand, Meta};
use crate::server::context::{CommandResult, Ctx, reply};

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
        if ctx.shared.config.load().requirepass.is_none() && self.username.is_none() {
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
    let user_ok = username.is_none_or(|u| u == b"default");
    let password_ok = match &ctx.shared.config.load().requirepass {
        None => true,
        Some(expected) => constant_time_eq(expected.as_bytes(), password),
    };
    if user_ok && password_ok {
        ctx.conn.authenticated = true;
        Ok(())
    } else {
        Err(CommandError::WrongPass)
    }
}

/// Compares without an early exit, so response timing does not reveal a matching prefix.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = a.len() ^ b.len();
    for (i, x) in a.iter().enumerate() {
        diff |= (*x ^ b.get(i).copied().unwrap_or(0)) as usize;
    }
    diff == 0
}
