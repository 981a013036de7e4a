//! HELLO [protover [AUTH username password] [SETNAME name]]: switch to RESP2 or RESP3,
//! optionally authenticating and naming the connection, and describe the server.

use bytes::Bytes;
use flockd_proto::{ProtocolVersion, Reply};

use super::args::Args;
use super::client::validate_client_name;
use super::context::{CommandResult, Ctx, reply};
use super::error::CommandError;
use super::kinds::{CommandDef, LocalCommand};
use super::meta::{CommandFlags, Meta};
use flockd_proto::parse_int;

/// The Redis version flockd reports to client libraries that gate features on it.
pub const REDIS_COMPAT_VERSION: &str = "7.2.0";

#[derive(Debug)]
pub struct Hello {
    protocol: Option<ProtocolVersion>,
    auth: Option<(Bytes, Bytes)>,
    setname: Option<Bytes>,
}

impl CommandDef for Hello {
    const META: Meta = Meta {
        syntax: "HELLO [protover [AUTH username password] [SETNAME clientname]]",
        ..Meta::new(
            "hello",
            -1,
            CommandFlags {
                no_auth: true,
                ..CommandFlags::READ
            },
            "Handshakes with the server.",
        )
    };

    fn parse(args: &mut Args) -> Result<Self, CommandError> {
        let mut hello = Hello {
            protocol: None,
            auth: None,
            setname: None,
        };
        let Some(version) = args.next_opt() else {
            return Ok(hello);
        };
        hello.protocol = match parse_int(&version) {
            Some(2) => Some(ProtocolVersion::Resp2),
            Some(3) => Some(ProtocolVersion::Resp3),
            Some(_) => {
                return Err(CommandError::NoProto);
            }
            None => {
                return Err(CommandError::BadProtocolVersion);
            }
        };
        while let Some(option) = args.next_keyword() {
            match option.as_str() {
                "AUTH" if args.remaining() >= 2 => {
                    hello.auth = Some((args.next_bytes()?, args.next_bytes()?))
                }
                "SETNAME" if args.remaining() >= 1 => hello.setname = Some(args.next_bytes()?),
                _ => {
                    return Err(CommandError::HelloSyntax(flockd_proto::printable(
                        option.as_bytes(),
                        64,
                    )));
                }
            }
        }
        Ok(hello)
    }
}

impl LocalCommand for Hello {
    fn run(self, ctx: &mut Ctx<'_>) -> CommandResult {
        if let Some((user, pass)) = &self.auth {
            super::auth::check_credentials(ctx, Some(user), pass)?;
        }
        if !ctx.conn.authenticated {
            return Err(CommandError::HelloNoAuth);
        }
        if let Some(name) = &self.setname {
            validate_client_name(name)?;
            ctx.conn.handle.names.lock().name = (!name.is_empty()).then(|| name.clone());
        }
        if let Some(protocol) = self.protocol {
            ctx.conn.handle.set_protocol(protocol);
        }
        let proto = if ctx.conn.protocol() == ProtocolVersion::Resp3 {
            3
        } else {
            2
        };
        reply(Reply::Map(vec![
            (Reply::bulk("server"), Reply::bulk("flockd")),
            (Reply::bulk("version"), Reply::bulk(REDIS_COMPAT_VERSION)),
            (Reply::bulk("proto"), Reply::Integer(proto)),
            (Reply::bulk("id"), Reply::Integer(ctx.conn.handle.id as i64)),
            (Reply::bulk("mode"), Reply::bulk("standalone")),
            (Reply::bulk("role"), Reply::bulk("master")),
            (Reply::bulk("modules"), Reply::Array(vec![])),
            (
                Reply::bulk("flockd_version"),
                Reply::bulk(env!("CARGO_PKG_VERSION")),
            ),
        ]))
    }
}
