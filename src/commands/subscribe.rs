//! SUBSCRIBE channel [channel ...] and PSUBSCRIBE pattern [pattern ...]: the connection enters
//! subscribed mode and receives the messages published there (flockd publishes lock events;
//! see `services::pubsub`). One `subscribe`/`psubscribe` frame per argument, each with the
//! connection's count of subscriptions, as in Redis; in RESP3 they are push frames.

use bytes::Bytes;
use flockd_acl::Denial;
use flockd_proto::Reply;

use super::args::Args;
use super::context::{CommandResult, Ctx, Outcome};
use super::error::CommandError;
use super::kinds::{CommandDef, LocalCommand};
use super::meta::{CommandFlags, Meta};
use crate::services::pubsub::{Mailbox, SubscriptionKind};

/// A subscription frame: `[kind, channel or null, count]`.
pub(super) fn frame(kind: &'static str, channel: Option<Bytes>, count: usize) -> Reply {
    Reply::Push(vec![
        Reply::Bulk(Bytes::from_static(kind.as_bytes())),
        channel.map_or(Reply::Null, Reply::Bulk),
        Reply::Integer(count as i64),
    ])
}

/// The flags of the (un)subscribe commands: reads of no key, slow as in Redis.
pub(super) const FLAGS: CommandFlags = CommandFlags {
    fast: false,
    ..CommandFlags::READ
};

pub(super) fn take_all(args: &mut Args) -> Result<Vec<Bytes>, CommandError> {
    let mut out = Vec::with_capacity(args.remaining());
    while args.remaining() > 0 {
        out.push(args.next_owned_bytes()?);
    }
    Ok(out)
}

/// Subscribes to every channel (pattern, shard channel: by `kind`), after checking the user may
/// take all of them: one refused channel subscribes to none, as in Redis.
pub(super) fn subscribe(
    ctx: &mut Ctx<'_>,
    kind: SubscriptionKind,
    channels: Vec<Bytes>,
) -> CommandResult {
    for channel in &channels {
        let allowed = match kind {
            SubscriptionKind::Pattern => ctx.conn.user.can_subscribe_pattern(channel),
            SubscriptionKind::Channel | SubscriptionKind::Shard => {
                ctx.conn.user.can_access_channel(channel)
            }
        };
        if !allowed {
            super::permissions::deny(
                ctx.server.acl(),
                ctx.conn,
                ctx.server.command_table(),
                Denial::Channel,
                &String::from_utf8_lossy(channel),
            );
            return Err(CommandError::NoPermChannel);
        }
    }
    let id = ctx.conn.handle.id;
    let subs = &mut ctx.conn.subscriptions;
    let mailbox = match &subs.mailbox {
        Some(mailbox) => mailbox.clone(),
        None => {
            let (mailbox, inbox) = Mailbox::new(ctx.conn.handle.clone());
            subs.inbox = Some(inbox);
            subs.mailbox = Some(mailbox.clone());
            mailbox
        }
    };
    let mut replies = Vec::with_capacity(channels.len());
    for channel in channels {
        if subs.of(kind).insert(channel.clone()) {
            ctx.server
                .applied()
                .pubsub
                .subscribe(kind, channel.clone(), id, &mailbox);
        }
        replies.push(frame(kind.subscribed(), Some(channel), subs.count(kind)));
    }
    Ok(Outcome::Replies(replies))
}

#[derive(Debug)]
pub struct Subscribe {
    channels: Vec<Bytes>,
}

impl CommandDef for Subscribe {
    const META: Meta = Meta {
        syntax: "SUBSCRIBE channel [channel ...]",
        group: "pubsub",
        complexity: "O(N) where N is the number of channels to subscribe to.",
        ..Meta::new(
            "subscribe",
            -2,
            FLAGS,
            "Listens for messages published to channels.",
        )
    };

    fn parse(args: &mut Args) -> Result<Self, CommandError> {
        Ok(Subscribe {
            channels: take_all(args)?,
        })
    }
}

impl LocalCommand for Subscribe {
    fn run(self, ctx: &mut Ctx<'_>) -> CommandResult {
        subscribe(ctx, SubscriptionKind::Channel, self.channels)
    }
}

#[derive(Debug)]
pub struct PSubscribe {
    patterns: Vec<Bytes>,
}

impl CommandDef for PSubscribe {
    const META: Meta = Meta {
        syntax: "PSUBSCRIBE pattern [pattern ...]",
        group: "pubsub",
        complexity: "O(N) where N is the number of patterns to subscribe to.",
        ..Meta::new(
            "psubscribe",
            -2,
            FLAGS,
            "Listens for messages published to channels that match one or more patterns.",
        )
    };

    fn parse(args: &mut Args) -> Result<Self, CommandError> {
        Ok(PSubscribe {
            patterns: take_all(args)?,
        })
    }
}

impl LocalCommand for PSubscribe {
    fn run(self, ctx: &mut Ctx<'_>) -> CommandResult {
        subscribe(ctx, SubscriptionKind::Pattern, self.patterns)
    }
}
