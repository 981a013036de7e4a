//! Pub/sub: who subscribed to which channels and patterns, and the publishing of lock events.
//!
//! Applying a batch of the log collects its events (only while somebody subscribes and
//! `notify-flock-events` is on); once the state machine's lock is released they are published,
//! for each change, on `__flock__:<name>` as `<event> <token>` and on `__flockevent__:<event>`
//! as `<token> <name>`. Only applied changes produce events, so nothing unacknowledged (and,
//! after a restart, nothing replayed) is ever announced.
//!
//! Each subscribed connection has a [`Mailbox`]: an unbounded queue that its connection task
//! drains into the socket, and a count of the bytes in it. Publishing never waits: a subscriber
//! whose queue passes `client-output-buffer-limit-pubsub` is disconnected, as Redis does, and
//! nobody else slows down.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use bytes::{BufMut, Bytes, BytesMut};
use flockd_core::Event;
use parking_lot::RwLock;
use tokio::sync::mpsc;

use super::clients::ClientHandle;

/// The channel of a lock's own events, before its name.
pub const LOCK_CHANNEL_PREFIX: &[u8] = b"__flock__:";
/// The channel of one kind of event, before its kind.
pub const EVENT_CHANNEL_PREFIX: &[u8] = b"__flockevent__:";
/// The default `client-output-buffer-limit-pubsub`, as Redis's hard limit for pub/sub clients.
pub const DEFAULT_OUTPUT_LIMIT: usize = 32 * 1024 * 1024;

/// One message on its way to a subscriber.
#[derive(Debug)]
pub struct Message {
    pub channel: Bytes,
    /// The pattern it matched, for a pattern subscription (`pmessage`).
    pub pattern: Option<Bytes>,
    pub payload: Bytes,
}

impl Message {
    /// About what it takes in the queue and on the wire.
    pub fn size(&self) -> usize {
        32 + self.channel.len() + self.payload.len() + self.pattern.as_ref().map_or(0, Bytes::len)
    }
}

/// A subscribed connection's queue.
pub struct Mailbox {
    client: Arc<ClientHandle>,
    tx: mpsc::UnboundedSender<Message>,
    queued: AtomicUsize,
}

impl Mailbox {
    pub fn new(client: Arc<ClientHandle>) -> (Arc<Mailbox>, mpsc::UnboundedReceiver<Message>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let mailbox = Mailbox {
            client,
            tx,
            queued: AtomicUsize::new(0),
        };
        (Arc::new(mailbox), rx)
    }

    /// Queues `message`, or disconnects the subscriber if that would pass `limit` bytes.
    fn deliver(&self, message: Message, limit: usize) {
        let size = message.size();
        let queued = self.queued.fetch_add(size, Ordering::AcqRel) + size;
        if queued > limit {
            if !self.client.kill.is_cancelled() {
                tracing::warn!(
                    client = self.client.id,
                    addr = %self.client.addr,
                    queued,
                    limit,
                    "pub/sub client disconnected: its output passed client-output-buffer-limit-pubsub"
                );
                self.client.kill.cancel();
            }
            return;
        }
        let _ = self.tx.send(message);
    }

    /// The connection wrote a message of `size` bytes out.
    pub fn delivered(&self, size: usize) {
        self.queued.fetch_sub(size, Ordering::AcqRel);
    }
}

type Subscribers = HashMap<u64, Arc<Mailbox>>;

pub struct PubSub {
    channels: RwLock<HashMap<Bytes, Subscribers>>,
    patterns: RwLock<HashMap<Bytes, Subscribers>>,
    /// Channel and pattern subscriptions, over all connections: publishing's fast path.
    subscriptions: AtomicUsize,
    /// `notify-flock-events`.
    enabled: AtomicBool,
    /// `client-output-buffer-limit-pubsub`, in bytes.
    limit: AtomicUsize,
}

impl Default for PubSub {
    fn default() -> Self {
        PubSub {
            channels: RwLock::default(),
            patterns: RwLock::default(),
            subscriptions: AtomicUsize::new(0),
            enabled: AtomicBool::new(true),
            limit: AtomicUsize::new(DEFAULT_OUTPUT_LIMIT),
        }
    }
}

/// An event's name on the channels, and the token and lock it is about; `None` for events
/// that are not a change of a lock's holding (a waiter leaving the queue).
fn describe(event: &Event) -> Option<(&'static str, u64, &Bytes)> {
    Some(match event {
        Event::Granted { name, token, .. } => ("granted", *token, name),
        Event::Renewed { name, token } => ("renewed", *token, name),
        Event::Released { name, token, .. } => ("released", *token, name),
        Event::Expired { name, token } => ("expired", *token, name),
        Event::ForceReleased { name, token } => ("forcereleased", *token, name),
        Event::WaitEnded { .. } => return None,
    })
}

fn concat(parts: &[&[u8]]) -> Bytes {
    let mut out = BytesMut::with_capacity(parts.iter().map(|p| p.len()).sum());
    for part in parts {
        out.put_slice(part);
    }
    out.freeze()
}

impl PubSub {
    pub fn configure(&self, enabled: bool, limit: usize) {
        self.enabled.store(enabled, Ordering::Relaxed);
        self.limit.store(limit, Ordering::Relaxed);
    }

    /// Whether applying should collect events for [`PubSub::publish_events`].
    pub fn wants_events(&self) -> bool {
        self.subscriptions.load(Ordering::Relaxed) > 0 && self.enabled.load(Ordering::Relaxed)
    }

    /// Adds `id`'s subscription to `channel` (or to the pattern, with `pattern`); false if it
    /// had it already.
    pub fn subscribe(&self, pattern: bool, channel: Bytes, id: u64, mailbox: &Arc<Mailbox>) -> bool {
        let map = if pattern { &self.patterns } else { &self.channels };
        let added = map
            .write()
            .entry(channel)
            .or_default()
            .insert(id, mailbox.clone())
            .is_none();
        if added {
            self.subscriptions.fetch_add(1, Ordering::Relaxed);
        }
        added
    }

    /// Removes `id`'s subscription; false if it had none.
    pub fn unsubscribe(&self, pattern: bool, channel: &[u8], id: u64) -> bool {
        let map = if pattern { &self.patterns } else { &self.channels };
        let mut map = map.write();
        let Some(subscribers) = map.get_mut(channel) else {
            return false;
        };
        let removed = subscribers.remove(&id).is_some();
        if subscribers.is_empty() {
            map.remove(channel);
        }
        if removed {
            self.subscriptions.fetch_sub(1, Ordering::Relaxed);
        }
        removed
    }

    /// Sends `payload` to every subscriber of `channel` and of a pattern matching it; returns
    /// how many it went to.
    pub fn publish(&self, channel: &Bytes, payload: &Bytes) -> usize {
        let limit = self.limit.load(Ordering::Relaxed);
        let mut receivers = 0;
        if let Some(subscribers) = self.channels.read().get(channel) {
            for mailbox in subscribers.values() {
                mailbox.deliver(
                    Message {
                        channel: channel.clone(),
                        pattern: None,
                        payload: payload.clone(),
                    },
                    limit,
                );
                receivers += 1;
            }
        }
        for (pattern, subscribers) in self.patterns.read().iter() {
            if !flockd_acl::glob_match(pattern, channel) {
                continue;
            }
            for mailbox in subscribers.values() {
                mailbox.deliver(
                    Message {
                        channel: channel.clone(),
                        pattern: Some(pattern.clone()),
                        payload: payload.clone(),
                    },
                    limit,
                );
                receivers += 1;
            }
        }
        receivers
    }

    /// Publishes what applying a batch changed, in order.
    pub fn publish_events(&self, events: &[Event]) {
        for event in events {
            let Some((kind, token, name)) = describe(event) else {
                continue;
            };
            let token = token.to_string();
            let token = token.as_bytes();
            self.publish(
                &concat(&[LOCK_CHANNEL_PREFIX, name]),
                &concat(&[kind.as_bytes(), b" ", token]),
            );
            self.publish(
                &concat(&[EVENT_CHANNEL_PREFIX, kind.as_bytes()]),
                &concat(&[token, b" ", name]),
            );
        }
    }

    /// PUBSUB CHANNELS: the channels with a subscriber, matching `pattern` if given.
    pub fn channels(&self, pattern: Option<&[u8]>) -> Vec<Bytes> {
        let mut out: Vec<Bytes> = self
            .channels
            .read()
            .keys()
            .filter(|c| pattern.is_none_or(|p| flockd_acl::glob_match(p, c)))
            .cloned()
            .collect();
        out.sort();
        out
    }

    /// PUBSUB NUMSUB: subscribers of `channel` (not counting patterns).
    pub fn numsub(&self, channel: &[u8]) -> usize {
        self.channels.read().get(channel).map_or(0, HashMap::len)
    }

    /// PUBSUB NUMPAT: pattern subscriptions over all connections.
    pub fn numpat(&self) -> usize {
        self.patterns.read().values().map(HashMap::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    use crate::server::clients::ClientRegistry;

    fn client(registry: &ClientRegistry) -> Arc<ClientHandle> {
        let addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
        registry.register(addr, addr, 10).unwrap()
    }

    #[test]
    fn events_go_to_channels_and_matching_patterns() {
        let ps = PubSub::default();
        let registry = ClientRegistry::default();
        let (a, mut a_rx) = Mailbox::new(client(&registry));
        let (b, mut b_rx) = Mailbox::new(client(&registry));
        assert!(!ps.wants_events());
        assert!(ps.subscribe(false, Bytes::from_static(b"__flock__:x"), 1, &a));
        assert!(!ps.subscribe(false, Bytes::from_static(b"__flock__:x"), 1, &a));
        assert!(ps.subscribe(true, Bytes::from_static(b"__flockevent__:*"), 2, &b));
        assert!(ps.wants_events());
        ps.publish_events(&[
            Event::Granted {
                name: Bytes::from_static(b"x"),
                token: 7,
                wait: None,
            },
            Event::WaitEnded {
                name: Bytes::from_static(b"x"),
                wait: flockd_core::WaitId {
                    position: 1,
                    index: 0,
                },
            },
            Event::Expired {
                name: Bytes::from_static(b"y"),
                token: 3,
            },
        ]);
        let m = a_rx.try_recv().unwrap();
        assert_eq!((&m.channel[..], &m.payload[..]), (&b"__flock__:x"[..], &b"granted 7"[..]));
        assert!(a_rx.try_recv().is_err(), "y's events are not on x's channel");
        let m = b_rx.try_recv().unwrap();
        assert_eq!(m.pattern.as_deref(), Some(&b"__flockevent__:*"[..]));
        assert_eq!((&m.channel[..], &m.payload[..]), (&b"__flockevent__:granted"[..], &b"7 x"[..]));
        let m = b_rx.try_recv().unwrap();
        assert_eq!((&m.channel[..], &m.payload[..]), (&b"__flockevent__:expired"[..], &b"3 y"[..]));
        assert!(ps.unsubscribe(false, b"__flock__:x", 1));
        assert!(ps.unsubscribe(true, b"__flockevent__:*", 2));
        assert!(!ps.wants_events());
        assert!(ps.channels(None).is_empty());
    }

    #[test]
    fn a_subscriber_past_the_limit_is_disconnected_and_others_are_not() {
        let ps = PubSub::default();
        ps.configure(true, 1000);
        let registry = ClientRegistry::default();
        let (slow_client, fast_client) = (client(&registry), client(&registry));
        let (slow, _slow_rx) = Mailbox::new(slow_client.clone());
        let (fast, mut fast_rx) = Mailbox::new(fast_client.clone());
        ps.subscribe(false, Bytes::from_static(b"c"), 1, &slow);
        ps.subscribe(false, Bytes::from_static(b"c"), 2, &fast);
        let payload = Bytes::from(vec![b'x'; 100]);
        for _ in 0..20 {
            ps.publish(&Bytes::from_static(b"c"), &payload);
            // The fast one reads everything at once.
            while let Ok(m) = fast_rx.try_recv() {
                fast.delivered(m.size());
            }
        }
        assert!(slow_client.kill.is_cancelled());
        assert!(!fast_client.kill.is_cancelled());
    }
}
