//! Pub/sub: who subscribed to which channels and patterns, and the publishing of lock events.
//!
//! Applying a batch of the log collects its events (only while somebody subscribes and
//! `notify-flock-events` is on) and hands them to the publisher thread, which publishes, for
//! each change, `<event> <token>` on `__flock__:<name>` and `<token> <name>` on
//! `__flockevent__:<event>`, in the order they were applied. Only applied changes produce
//! events, so nothing unacknowledged (and, after a restart, nothing replayed) is announced.
//!
//! Each subscribed connection has a [`Mailbox`]: an unbounded queue that its connection task
//! drains into the socket (at most once a millisecond), and a count of the bytes in it. Each
//! frame is encoded once per round of publishing and shared by all its subscribers. Publishing never waits: a subscriber
//! whose queue passes `client-output-buffer-limit-pubsub` is disconnected, as Redis does, and
//! nobody else slows down.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

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
    /// The whole frame in RESP2, encoded once for every subscriber it goes to; RESP3's push
    /// frame differs only in its first byte (`>` for `*`).
    pub frame: Bytes,
}

impl Message {
    /// What it takes in the queue and on the wire.
    pub fn size(&self) -> usize {
        self.frame.len()
    }
}

/// What one round of publishing sent to one subscriber: the round's messages, shared by all
/// its subscribers (each frame is encoded and counted once), and which of them are this
/// subscriber's.
#[derive(Debug)]
pub struct Delivery {
    pub published: Arc<Vec<Message>>,
    pub picks: Vec<u32>,
    /// The picked frames' bytes.
    pub size: usize,
}

impl Delivery {
    pub fn messages(&self) -> impl Iterator<Item = &Message> {
        self.picks.iter().map(|&i| &self.published[i as usize])
    }
}

/// A subscribed connection's queue: each item is what one round of publishing sent to it, so
/// a subscriber is woken once per round, not once per message.
pub struct Mailbox {
    client: Arc<ClientHandle>,
    tx: mpsc::UnboundedSender<Delivery>,
    queued: AtomicUsize,
}

impl Mailbox {
    pub fn new(client: Arc<ClientHandle>) -> (Arc<Mailbox>, mpsc::UnboundedReceiver<Delivery>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let mailbox = Mailbox {
            client,
            tx,
            queued: AtomicUsize::new(0),
        };
        (Arc::new(mailbox), rx)
    }

    /// Queues `delivery`, or disconnects the subscriber if that would pass `limit` bytes.
    fn deliver(&self, delivery: Delivery, limit: usize) {
        let size = delivery.size;
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
        let _ = self.tx.send(delivery);
    }

    /// The connection took messages of `size` bytes out of the queue.
    pub fn delivered(&self, size: usize) {
        self.queued.fetch_sub(size, Ordering::AcqRel);
    }
}

type Subscribers = HashMap<u64, Arc<Mailbox>>;

/// The subscriptions and settings, shared with the publisher thread.
pub struct Registry {
    channels: RwLock<HashMap<Bytes, Subscribers>>,
    patterns: RwLock<HashMap<Bytes, Subscribers>>,
    /// Channel and pattern subscriptions, over all connections: publishing's fast path.
    subscriptions: AtomicUsize,
    /// `notify-flock-events`.
    enabled: AtomicBool,
    /// `client-output-buffer-limit-pubsub`, in bytes.
    limit: AtomicUsize,
}

impl Default for Registry {
    fn default() -> Self {
        Registry {
            channels: RwLock::default(),
            patterns: RwLock::default(),
            subscriptions: AtomicUsize::new(0),
            enabled: AtomicBool::new(true),
            limit: AtomicUsize::new(DEFAULT_OUTPUT_LIMIT),
        }
    }
}

/// Pub/sub as the server holds it: the [`Registry`], and the thread that publishes.
///
/// Applying hands each batch's events to the publisher thread (one channel send), so the
/// fan-out to subscribers never runs inside the log's critical section; the thread takes every
/// batch waiting at once and delivers them together, in order.
#[derive(Default)]
pub struct PubSub {
    registry: Arc<Registry>,
    publisher: OnceLock<Option<std::sync::mpsc::SyncSender<Vec<Event>>>>,
}

impl std::ops::Deref for PubSub {
    type Target = Registry;
    fn deref(&self) -> &Registry {
        &self.registry
    }
}

/// Batches the publisher thread takes at once, at most.
const PUBLISH_BATCHES: usize = 256;
/// Batches waiting for the publisher thread, at most: past it, applying waits for the thread
/// (which keeps the order of events and bounds their memory when publishing falls behind).
const PUBLISH_BACKLOG: usize = 4096;

impl PubSub {
    /// Publishes what applying a batch changed, on the publisher thread (started with the
    /// first batch; if it cannot start, here and now).
    pub fn publish_events(&self, events: Vec<Event>) {
        let publisher = self.publisher.get_or_init(|| {
            let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<Event>>(PUBLISH_BACKLOG);
            let registry = self.registry.clone();
            let spawned = std::thread::Builder::new()
                .name("flockd-pubsub".into())
                .spawn(move || {
                    while let Ok(mut events) = rx.recv() {
                        for more in rx.try_iter().take(PUBLISH_BATCHES) {
                            events.extend(more);
                        }
                        registry.publish_now(&events);
                    }
                });
            match spawned {
                Ok(_) => Some(tx),
                Err(e) => {
                    tracing::error!("cannot start the pub/sub thread, publishing inline: {e}");
                    None
                }
            }
        });
        match publisher {
            Some(tx) => {
                if let Err(std::sync::mpsc::SendError(events)) = tx.send(events) {
                    self.registry.publish_now(&events);
                }
            }
            None => self.registry.publish_now(&events),
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
        // Each name of the grant has its own `Granted`.
        Event::WaitEnded { .. } | Event::AllGranted { .. } => return None,
    })
}

/// What one round publishes: the messages, and per subscribed client which of them it gets.
#[derive(Default)]
struct Outbox {
    messages: Vec<Message>,
    picks: HashMap<u64, (Arc<Mailbox>, Vec<u32>, usize)>,
}

impl Outbox {
    /// A new message; returns its index.
    fn message(&mut self, channel: &Bytes, pattern: Option<&Bytes>, frame: Bytes) -> u32 {
        self.messages.push(Message {
            channel: channel.clone(),
            pattern: pattern.cloned(),
            frame,
        });
        (self.messages.len() - 1) as u32
    }

    fn pick(&mut self, id: u64, mailbox: &Arc<Mailbox>, index: u32) {
        let size = self.messages[index as usize].size();
        let entry = self
            .picks
            .entry(id)
            .or_insert_with(|| (mailbox.clone(), Vec::new(), 0));
        entry.1.push(index);
        entry.2 += size;
    }

    fn send(self, limit: usize) {
        let published = Arc::new(self.messages);
        for (mailbox, picks, size) in self.picks.into_values() {
            mailbox.deliver(
                Delivery {
                    published: published.clone(),
                    picks,
                    size,
                },
                limit,
            );
        }
    }
}

/// A RESP2 array of bulk strings.
fn encode_frame(parts: &[&[u8]]) -> Bytes {
    let mut out = BytesMut::with_capacity(16 + parts.iter().map(|p| p.len() + 16).sum::<usize>());
    out.put_u8(b'*');
    out.put_slice(parts.len().to_string().as_bytes());
    out.put_slice(b"\r\n");
    for part in parts {
        out.put_u8(b'$');
        out.put_slice(part.len().to_string().as_bytes());
        out.put_slice(b"\r\n");
        out.put_slice(part);
        out.put_slice(b"\r\n");
    }
    out.freeze()
}

fn concat(parts: &[&[u8]]) -> Bytes {
    let mut out = BytesMut::with_capacity(parts.iter().map(|p| p.len()).sum());
    for part in parts {
        out.put_slice(part);
    }
    out.freeze()
}

impl Registry {
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
    pub fn subscribe(
        &self,
        pattern: bool,
        channel: Bytes,
        id: u64,
        mailbox: &Arc<Mailbox>,
    ) -> bool {
        let map = if pattern {
            &self.patterns
        } else {
            &self.channels
        };
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
        let map = if pattern {
            &self.patterns
        } else {
            &self.channels
        };
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

    /// Adds `payload` on `channel`, for every subscriber of the channel and of a pattern
    /// matching it, to `outbox` (per client). Each frame is encoded once.
    fn collect(&self, channel: &Bytes, payload: &Bytes, outbox: &mut Outbox) {
        if let Some(subscribers) = self.channels.read().get(channel) {
            let index =
                outbox.message(channel, None, encode_frame(&[b"message", channel, payload]));
            for (&id, mailbox) in subscribers {
                outbox.pick(id, mailbox, index);
            }
        }
        for (pattern, subscribers) in self.patterns.read().iter() {
            if !flockd_acl::glob_match(pattern, channel) {
                continue;
            }
            let index = outbox.message(
                channel,
                Some(pattern),
                encode_frame(&[b"pmessage", pattern, channel, payload]),
            );
            for (&id, mailbox) in subscribers {
                outbox.pick(id, mailbox, index);
            }
        }
    }

    /// Publishes one message that is not a lock event (Sentinel's `+switch-master`).
    pub fn publish_message(&self, channel: &[u8], payload: &[u8]) {
        let mut outbox = Outbox::default();
        self.collect(
            &Bytes::copy_from_slice(channel),
            &Bytes::copy_from_slice(payload),
            &mut outbox,
        );
        outbox.send(self.limit.load(Ordering::Relaxed));
    }

    /// Publishes `events` now, in order: one delivery per subscriber.
    pub fn publish_now(&self, events: &[Event]) {
        let mut outbox = Outbox::default();
        let mut token_text = String::new();
        for event in events {
            let Some((kind, token, name)) = describe(event) else {
                continue;
            };
            token_text.clear();
            let _ = write!(token_text, "{token}");
            let token = token_text.as_bytes();
            self.collect(
                &concat(&[LOCK_CHANNEL_PREFIX, name]),
                &concat(&[kind.as_bytes(), b" ", token]),
                &mut outbox,
            );
            self.collect(
                &concat(&[EVENT_CHANNEL_PREFIX, kind.as_bytes()]),
                &concat(&[token, b" ", name]),
                &mut outbox,
            );
        }
        outbox.send(self.limit.load(Ordering::Relaxed));
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

    fn granted(name: &'static [u8], token: u64) -> Event {
        Event::Granted {
            name: Bytes::from_static(name),
            token,
            wait: None,
        }
    }

    #[test]
    fn events_go_to_channels_and_matching_patterns_once_per_batch() {
        let ps = Registry::default();
        let registry = ClientRegistry::default();
        let (a, mut a_rx) = Mailbox::new(client(&registry));
        let (b, mut b_rx) = Mailbox::new(client(&registry));
        assert!(!ps.wants_events());
        assert!(ps.subscribe(false, Bytes::from_static(b"__flock__:x"), 1, &a));
        assert!(!ps.subscribe(false, Bytes::from_static(b"__flock__:x"), 1, &a));
        assert!(ps.subscribe(true, Bytes::from_static(b"__flockevent__:*"), 2, &b));
        assert!(ps.wants_events());
        ps.publish_now(&[
            granted(b"x", 7),
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
        let delivery = a_rx.try_recv().unwrap();
        let batch: Vec<&Message> = delivery.messages().collect();
        assert_eq!(batch.len(), 1, "y's events are not on x's channel");
        assert_eq!(
            &batch[0].frame[..],
            b"*3\r\n$7\r\nmessage\r\n$11\r\n__flock__:x\r\n$9\r\ngranted 7\r\n"
        );
        assert!(a_rx.try_recv().is_err(), "one delivery per batch");
        let delivery = b_rx.try_recv().unwrap();
        let batch: Vec<&Message> = delivery.messages().collect();
        assert_eq!(batch.len(), 2);
        assert_eq!(batch[0].pattern.as_deref(), Some(&b"__flockevent__:*"[..]));
        assert_eq!(
            &batch[0].frame[..],
            &b"*4\r\n$8\r\npmessage\r\n$16\r\n__flockevent__:*\r\n$22\r\n__flockevent__:granted\r\n$3\r\n7 x\r\n"[..]
        );
        assert_eq!(&batch[1].channel[..], b"__flockevent__:expired");
        assert!(batch[1].frame.ends_with(b"$3\r\n3 y\r\n"));
        assert!(ps.unsubscribe(false, b"__flock__:x", 1));
        assert!(ps.unsubscribe(true, b"__flockevent__:*", 2));
        assert!(!ps.wants_events());
        assert!(ps.channels(None).is_empty());
    }

    #[test]
    fn a_subscriber_past_the_limit_is_disconnected_and_others_are_not() {
        let ps = Registry::default();
        ps.configure(true, 1000);
        let registry = ClientRegistry::default();
        let (slow_client, fast_client) = (client(&registry), client(&registry));
        let (slow, _slow_rx) = Mailbox::new(slow_client.clone());
        let (fast, mut fast_rx) = Mailbox::new(fast_client.clone());
        ps.subscribe(true, Bytes::from_static(b"*"), 1, &slow);
        ps.subscribe(true, Bytes::from_static(b"*"), 2, &fast);
        for token in 0..40 {
            ps.publish_now(&[granted(b"a-name-of-some-length", token)]);
            // The fast one takes everything out at once.
            while let Ok(delivery) = fast_rx.try_recv() {
                fast.delivered(delivery.size);
            }
        }
        assert!(slow_client.kill.is_cancelled());
        assert!(!fast_client.kill.is_cancelled());
    }
}
