//! TYPE key: what a key is, as Redis answers it (a simple string): `flock` for a lock name,
//! `fence` for a fence key (also when the name is a lock name too: see `flockd_core::keyspace`),
//! `none` for neither. GUI tools call it on each key SCAN lists.

use bytes::Bytes;
use flockd_proto::Reply;

use super::args::Args;
use super::context::{CommandResult, Ctx, reply};
use super::error::CommandError;
use super::kinds::{CommandDef, LocalCommand};
use super::meta::{CommandFlags, Meta};

#[derive(Debug)]
pub struct Type {
    key: Bytes,
}

impl CommandDef for Type {
    const META: Meta = Meta {
        syntax: "TYPE key",
        keys: (1, 1, 1),
        group: "generic",
        ..Meta::new(
            "type",
            2,
            CommandFlags::READ,
            "Returns the type of a key: flock, fence or none.",
        )
    };

    fn parse(args: &mut Args) -> Result<Self, CommandError> {
        // Any bytes: a name no key can have is simply `none`, as in Redis.
        Ok(Type {
            key: args.next_bytes()?,
        })
    }
}

impl LocalCommand for Type {
    fn run(self, ctx: &mut Ctx<'_>) -> CommandResult {
        let kind = ctx.machine_of(&self.key).key_type(&self.key);
        reply(Reply::Simple(kind.map_or("none", |k| k.name()).into()))
    }
}
