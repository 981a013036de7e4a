//! Pub/sub delivery: the messages published to a subscribed connection, written into its
//! output between its commands, coalesced into one write per millisecond at most.

use std::time::Duration;

use flockd_proto::ProtocolVersion;
use tokio::io::{AsyncRead, AsyncWrite};

use super::{Connection, FLUSH_AFTER_REPLIES};
use crate::services::pubsub::{Delivery, SubscriptionKind};

/// How long a subscriber's messages may wait to be written together.
const MESSAGE_COALESCING: Duration = Duration::from_millis(1);

impl<S: AsyncRead + AsyncWrite + Unpin> Connection<S> {
    /// Writes `delivery` and what else comes within [`MESSAGE_COALESCING`]; false if the
    /// client was killed meanwhile.
    pub(super) async fn deliver(&mut self, delivery: Delivery) -> std::io::Result<bool> {
        self.encode_messages(delivery);
        // Let more batches come before writing: one write per subscriber per millisecond at
        // most, instead of one per applied batch (each write is a syscall here and a wake-up
        // and a read in the subscriber).
        let handle = &self.conn.handle;
        tokio::select! {
            _ = tokio::time::sleep(MESSAGE_COALESCING) => {}
            _ = handle.kill.cancelled() => return Ok(false),
        }
        self.encode_queued_messages();
        self.write_output().await
    }

    /// Adds what one batch published to the output: each message's frame (encoded once by the
    /// publisher), a push in RESP3. One that arrives after its channel was left is dropped, as
    /// Redis never sends it.
    fn encode_messages(&mut self, delivery: Delivery) {
        let subs = &self.conn.subscriptions;
        if let Some(mailbox) = &subs.mailbox {
            mailbox.delivered(delivery.size);
        }
        for message in delivery.messages() {
            let subscribed = match (message.kind, &message.pattern) {
                (SubscriptionKind::Pattern, Some(pattern)) => subs.patterns.contains(pattern),
                (SubscriptionKind::Shard, _) => subs.shard_channels.contains(&message.channel),
                _ => subs.channels.contains(&message.channel),
            };
            if !subscribed {
                continue;
            }
            if self.conn.protocol() == ProtocolVersion::Resp3 {
                self.output.extend_from_slice(b">");
                self.output.extend_from_slice(&message.frame[1..]);
            } else {
                self.output.extend_from_slice(&message.frame);
            }
        }
    }

    /// Adds the messages already queued (at most a batch's worth of deliveries, so a busy
    /// channel cannot keep a connection from its commands).
    pub(super) fn encode_queued_messages(&mut self) {
        for _ in 0..FLUSH_AFTER_REPLIES {
            let Some(inbox) = &mut self.conn.subscriptions.inbox else {
                return;
            };
            match inbox.try_recv() {
                Ok(messages) => self.encode_messages(messages),
                Err(_) => return,
            }
        }
    }
}
