//! UNSUBSCRIBE [channel ...] and PUNSUBSCRIBE [pattern ...]: leave the channels (patterns)
//! named, or all of them. One frame per channel left, with the count left; without arguments
//! and without subscriptions, one frame with a null channel, as in Redis.

use bytes::Bytes;
use flockd_proto::Reply;

use super::args::Args;
use super::context::{CommandResult, ConnState, Ctx, Outcome};
use super::error::CommandError;
use super::kinds::{CommandDef, LocalCommand};
use super::meta::Meta;
use super::subscribe::{FLAGS, frame};
use crate::services::pubsub::{PubSub, SubscriptionKind};

pub(super) fn take_all(args: &mut Args) -> Vec<Bytes> {
    std::iter::from_fn(|| args.next_opt()).collect()
}

/// Leaves `channels` of `kind` (all of that kind, if empty) and returns the frames.
pub fn unsubscribe(
    pubsub: &PubSub,
    conn: &mut ConnState,
    kind: SubscriptionKind,
    channels: Vec<Bytes>,
) -> Vec<Reply> {
    let id = conn.handle.id;
    let subs = &mut conn.subscriptions;
    let channels = if channels.is_empty() {
        subs.of(kind).iter().cloned().collect()
    } else {
        channels
    };
    if channels.is_empty() {
        return vec![frame(kind.unsubscribed(), None, subs.count(kind))];
    }
    let mut replies = Vec::with_capacity(channels.len());
    for channel in channels {
        if subs.of(kind).remove(&channel) {
            pubsub.unsubscribe(kind, &channel, id);
        }
        replies.push(frame(kind.unsubscribed(), Some(channel), subs.count(kind)));
    }
    replies
}

#[derive(Debug)]
pub struct Unsubscribe {
    channels: Vec<Bytes>,
}

impl CommandDef for Unsubscribe {
    const META: Meta = Meta {
        syntax: "UNSUBSCRIBE [channel [channel ...]]",
        group: "pubsub",
        complexity: "O(N) where N is the number of channels to unsubscribe.",
        ..Meta::new(
            "unsubscribe",
            -1,
            FLAGS,
            "Stops listening to messages posted to channels.",
        )
    };

    fn parse(args: &mut Args) -> Result<Self, CommandError> {
        Ok(Unsubscribe {
            channels: take_all(args),
        })
    }
}

impl LocalCommand for Unsubscribe {
    fn run(self, ctx: &mut Ctx<'_>) -> CommandResult {
        let replies = unsubscribe(
            &ctx.server.applied().pubsub,
            ctx.conn,
            SubscriptionKind::Channel,
            self.channels,
        );
        Ok(Outcome::Replies(replies))
    }
}

#[derive(Debug)]
pub struct PUnsubscribe {
    patterns: Vec<Bytes>,
}

impl CommandDef for PUnsubscribe {
    const META: Meta = Meta {
        syntax: "PUNSUBSCRIBE [pattern [pattern ...]]",
        group: "pubsub",
        complexity: "O(N) where N is the number of patterns to unsubscribe.",
        ..Meta::new(
            "punsubscribe",
            -1,
            FLAGS,
            "Stops listening to messages published to channels that match one or more patterns.",
        )
    };

    fn parse(args: &mut Args) -> Result<Self, CommandError> {
        Ok(PUnsubscribe {
            patterns: take_all(args),
        })
    }
}

impl LocalCommand for PUnsubscribe {
    fn run(self, ctx: &mut Ctx<'_>) -> CommandResult {
        let replies = unsubscribe(
            &ctx.server.applied().pubsub,
            ctx.conn,
            SubscriptionKind::Pattern,
            self.patterns,
        );
        Ok(Outcome::Replies(replies))
    }
}

/// Leaves every channel, pattern and shard channel (RESET, and a connection that ends), without
/// frames.
pub fn leave_all(pubsub: &PubSub, conn: &mut ConnState) {
    let id = conn.handle.id;
    let subs = &mut conn.subscriptions;
    for kind in [
        SubscriptionKind::Channel,
        SubscriptionKind::Pattern,
        SubscriptionKind::Shard,
    ] {
        for channel in std::mem::take(subs.of(kind)) {
            pubsub.unsubscribe(kind, &channel, id);
        }
    }
}
