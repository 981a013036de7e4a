//! SUNSUBSCRIBE [shardchannel ...]: leave the shard channels named, or all of them; one
//! `sunsubscribe` frame per channel left, with the count of shard channels left (one frame with a
//! null channel when there were none), as in Redis.

use bytes::Bytes;

use super::args::Args;
use super::context::{CommandResult, Ctx, Outcome};
use super::error::CommandError;
use super::kinds::{CommandDef, LocalCommand};
use super::meta::Meta;
use super::subscribe::FLAGS;
use super::unsubscribe::{take_all, unsubscribe};
use crate::services::pubsub::SubscriptionKind;

#[derive(Debug)]
pub struct SUnsubscribe {
    channels: Vec<Bytes>,
}

impl CommandDef for SUnsubscribe {
    const META: Meta = Meta {
        syntax: "SUNSUBSCRIBE [shardchannel [shardchannel ...]]",
        group: "pubsub",
        complexity: "O(N) where N is the number of shard channels to unsubscribe.",
        shard_channels: true,
        ..Meta::new(
            "sunsubscribe",
            -1,
            FLAGS,
            "Stops listening to messages posted to shard channels.",
        )
    };

    fn parse(args: &mut Args) -> Result<Self, CommandError> {
        Ok(SUnsubscribe {
            channels: take_all(args),
        })
    }
}

impl LocalCommand for SUnsubscribe {
    fn run(self, ctx: &mut Ctx<'_>) -> CommandResult {
        let replies = unsubscribe(
            &ctx.server.applied().pubsub,
            ctx.conn,
            SubscriptionKind::Shard,
            self.channels,
        );
        Ok(Outcome::Replies(replies))
    }
}
