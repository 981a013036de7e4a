//! PUBSUB CHANNELS [pattern] | NUMSUB [channel ...] | NUMPAT | SHARDCHANNELS [pattern] |
//! SHARDNUMSUB [channel ...] | HELP: who listens, as in Redis (the SHARD forms count SSUBSCRIBE's
//! shard channels).

use bytes::Bytes;
use flockd_proto::Reply;

use super::args::Args;
use super::context::{CommandResult, Ctx, reply};
use super::error::CommandError;
use super::kinds::{CommandDef, LocalCommand};
use super::meta::{CommandFlags, Meta, SubMeta};
use crate::services::pubsub::SubscriptionKind;

#[derive(Debug)]
pub enum Pubsub {
    Channels(SubscriptionKind, Option<Bytes>),
    NumSub(SubscriptionKind, Vec<Bytes>),
    NumPat,
    Help,
}

impl CommandDef for Pubsub {
    const META: Meta = Meta {
        syntax: "PUBSUB CHANNELS [pattern] | NUMSUB [channel [channel ...]] | NUMPAT | SHARDCHANNELS [pattern] | SHARDNUMSUB [shardchannel [shardchannel ...]] | HELP",
        group: "pubsub",
        subcommands: &[
            SubMeta {
                name: "pubsub|channels",
                arity: -2,
                summary: "Returns the active channels.",
            },
            SubMeta {
                name: "pubsub|numsub",
                arity: -2,
                summary: "Returns a count of subscribers to channels.",
            },
            SubMeta {
                name: "pubsub|numpat",
                arity: 2,
                summary: "Returns a count of unique pattern subscriptions.",
            },
            SubMeta {
                name: "pubsub|shardchannels",
                arity: -2,
                summary: "Returns the active shard channels.",
            },
            SubMeta {
                name: "pubsub|shardnumsub",
                arity: -2,
                summary: "Returns the count of subscribers of shard channels.",
            },
            SubMeta {
                name: "pubsub|help",
                arity: 2,
                summary: "Returns helpful text about the different subcommands.",
            },
        ],
        ..Meta::new(
            "pubsub",
            -2,
            CommandFlags::READ,
            "A container for Pub/Sub commands.",
        )
    };

    fn parse(args: &mut Args) -> Result<Self, CommandError> {
        let sub = args.next_keyword().unwrap_or_default();
        match sub.as_str() {
            "CHANNELS" if args.remaining() <= 1 => {
                Ok(Pubsub::Channels(SubscriptionKind::Channel, args.next_opt()))
            }
            "SHARDCHANNELS" if args.remaining() <= 1 => {
                Ok(Pubsub::Channels(SubscriptionKind::Shard, args.next_opt()))
            }
            "NUMSUB" => Ok(Pubsub::NumSub(
                SubscriptionKind::Channel,
                std::iter::from_fn(|| args.next_opt()).collect(),
            )),
            "SHARDNUMSUB" => Ok(Pubsub::NumSub(
                SubscriptionKind::Shard,
                std::iter::from_fn(|| args.next_opt()).collect(),
            )),
            "NUMPAT" if args.remaining() == 0 => Ok(Pubsub::NumPat),
            "HELP" if args.remaining() == 0 => Ok(Pubsub::Help),
            "CHANNELS" | "SHARDCHANNELS" | "NUMPAT" | "HELP" => Err(CommandError::WrongArity(
                format!("pubsub|{}", sub.to_ascii_lowercase()).into(),
            )),
            other => Err(CommandError::UnknownSubcommand {
                command: "PUBSUB",
                sub: flockd_proto::printable(other.as_bytes(), 64),
            }),
        }
    }
}

impl LocalCommand for Pubsub {
    fn run(self, ctx: &mut Ctx<'_>) -> CommandResult {
        let pubsub = &ctx.server.applied().pubsub;
        match self {
            Pubsub::Channels(kind, pattern) => reply(Reply::Array(
                pubsub
                    .channels(kind, pattern.as_deref())
                    .into_iter()
                    .map(Reply::Bulk)
                    .collect(),
            )),
            Pubsub::NumSub(kind, channels) => reply(Reply::Array(
                channels
                    .into_iter()
                    .flat_map(|c| {
                        let n = pubsub.numsub(kind, &c) as i64;
                        [Reply::Bulk(c), Reply::Integer(n)]
                    })
                    .collect(),
            )),
            Pubsub::NumPat => reply(Reply::Integer(pubsub.numpat() as i64)),
            Pubsub::Help => reply(Reply::Array(
                [
                    "PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                    "CHANNELS [<pattern>]",
                    "    Return the currently active channels matching a <pattern> (default: '*').",
                    "NUMPAT",
                    "    Return number of subscriptions to patterns.",
                    "NUMSUB [<channel> ...]",
                    "    Return the number of subscribers for the specified channels, excluding",
                    "    pattern subscriptions(default: no channels).",
                    "SHARDCHANNELS [<pattern>]",
                    "    Return the currently active shard level channels matching a <pattern> (default: '*').",
                    "SHARDNUMSUB [<shardchannel> ...]",
                    "    Return the number of subscribers for the specified shard level channel(s)",
                    "HELP",
                    "    Prints this help.",
                ]
                .into_iter()
                .map(|line| Reply::Simple(line.into()))
                .collect(),
            )),
        }
    }
}
