//! SSUBSCRIBE shardchannel [shardchannel ...]: Redis 7's sharded pub/sub. The connection enters
//! subscribed mode and gets what is published on those channels as `smessage` frames: a lock's
//! events on `__flock__:<name>`, as SUBSCRIBE gets them as `message`. One `ssubscribe` frame per
//! channel, with the connection's count of shard channels.
//!
//! A cluster client sends it to the node serving the channel's slot: on a cluster node, with
//! `cluster-redirect yes`, another node's slot is answered `-MOVED` (`crate::server`'s routing),
//! and channels of different slots `-CROSSSLOT`, as Redis Cluster does. Every node publishes
//! every event it applies, so a subscriber gets a lock's events on whichever node it is.

use bytes::Bytes;

use super::args::Args;
use super::context::{CommandResult, Ctx};
use super::error::CommandError;
use super::kinds::{CommandDef, LocalCommand};
use super::meta::Meta;
use super::subscribe::{FLAGS, subscribe, take_all};
use crate::services::pubsub::SubscriptionKind;

#[derive(Debug)]
pub struct SSubscribe {
    channels: Vec<Bytes>,
}

impl CommandDef for SSubscribe {
    const META: Meta = Meta {
        syntax: "SSUBSCRIBE shardchannel [shardchannel ...]",
        group: "pubsub",
        complexity: "O(N) where N is the number of shard channels to subscribe to.",
        shard_channels: true,
        ..Meta::new(
            "ssubscribe",
            -2,
            FLAGS,
            "Listens for messages published to shard channels.",
        )
    };

    fn parse(args: &mut Args) -> Result<Self, CommandError> {
        Ok(SSubscribe {
            channels: take_all(args)?,
        })
    }
}

impl LocalCommand for SSubscribe {
    fn run(self, ctx: &mut Ctx<'_>) -> CommandResult {
        let first = flockd_core::slot_of(&self.channels[0]);
        if ctx.server.log().shards().is_some()
            && self
                .channels
                .iter()
                .any(|c| flockd_core::slot_of(c) != first)
        {
            return Err(CommandError::CrossSlot);
        }
        subscribe(ctx, SubscriptionKind::Shard, self.channels)
    }
}
