//! Pub/sub: who subscribed to which channels and patterns, and the publishing of lock events.
//!
//! Applying a batch of the log collects its events (only while somebody subscribes and
//! `notify-flock-events` is on) and hands them to the publisher thread, which publishes, for
//! each change, `<event> <token>` on `__flock__:<name>` and `<token> <name>` on
//! `__flockevent__:<event>`, in the order they were applied. Only applied changes produce
//! events, so nothing unacknowledged (and, after a restart, nothing replayed) is announced.
//! Its rounds are at least a millisecond apart: under load, one round carries the events of
//! many batches, which halved the thread's CPU per event delivered.
//!
//! Each subscribed connection has a [`Mailbox`]: an unbounded queue that its connection task
//! drains into the socket (at most once a millisecond), and a count of the bytes in it. Each
//! frame is encoded once per round of publishing, only if somebody gets it, and shared by all
//! its subscribers; subscribers of the same subscription share its list of picks too, so an
//! event costs the publisher the same for one subscriber or a hundred. Publishing never waits:
//! a subscriber whose queue passes `client-output-buffer-limit-pubsub` is disconnected, as
//! Redis does, and nobody else slows down.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

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
    /// The subscription it is for: a message on a channel that has both subscribers and shard
    /// subscribers goes out twice, as `message` and as `smessage`.
    pub kind: SubscriptionKind,
    pub channel: Bytes,
    /// The pattern it matched, for a pattern subscription (`pmessage`).
    pub pattern: Option<Bytes>,
    /// The whole frame in RESP2, encoded once for every subscriber it goes to; RESP3's push
    /// frame differs only in its first byte (`>` for `*`).
    pub frame: Bytes,
}

impl Message {
    /// The message's payload: the last bulk string of its frame (`None` if the frame is not
    /// the array of bulk strings publishing encodes).
    pub fn payload(&self) -> Option<&[u8]> {
        fn line<'a>(rest: &mut &'a [u8]) -> Option<&'a [u8]> {
            let end = rest.windows(2).position(|w| w == b"\r\n")?;
            let (head, tail) = rest.split_at(end);
            *rest = &tail[2..];
            Some(head)
        }
        fn number(text: &[u8], sigil: u8) -> Option<usize> {
            std::str::from_utf8(text.strip_prefix(&[sigil])?)
                .ok()?
                .parse()
                .ok()
        }
        let mut rest: &[u8] = &self.frame;
        let parts = number(line(&mut rest)?, b'*')?;
        let mut last = None;
        for _ in 0..parts {
            let len = number(line(&mut rest)?, b'$')?;
            last = Some(rest.get(..len)?);
            rest = rest.get(len + 2..)?;
        }
        last
    }
}

/// What one round of publishing sent to one subscriber: the round's messages, shared by all
/// its subscribers (each frame is encoded and counted once), and which of them are this
/// subscriber's.
#[derive(Debug)]
pub struct Delivery {
    pub published: Arc<Vec<Message>>,
    pub picks: Arc<Vec<u32>>,
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

/// What a subscription is to: a channel (SUBSCRIBE), a pattern of channels (PSUBSCRIBE), or a
/// shard channel (SSUBSCRIBE, Redis 7's sharded pub/sub: a channel routed by its slot, whose
/// messages come as `smessage`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubscriptionKind {
    Channel,
    Pattern,
    Shard,
}

impl SubscriptionKind {
    /// The first word of its subscribe frame.
    pub fn subscribed(self) -> &'static str {
        match self {
            SubscriptionKind::Channel => "subscribe",
            SubscriptionKind::Pattern => "psubscribe",
            SubscriptionKind::Shard => "ssubscribe",
        }
    }

    /// The first word of its unsubscribe frame.
    pub fn unsubscribed(self) -> &'static str {
        match self {
            SubscriptionKind::Channel => "unsubscribe",
            SubscriptionKind::Pattern => "punsubscribe",
            SubscriptionKind::Shard => "sunsubscribe",
        }
    }
}

/// The subscriptions and settings, shared with the publisher thread.
pub struct Registry {
    channels: RwLock<HashMap<Bytes, Subscribers>>,
    patterns: RwLock<HashMap<Bytes, Subscribers>>,
    shard_channels: RwLock<HashMap<Bytes, Subscribers>>,
    /// Subscriptions of every kind, over all connections: publishing's fast path.
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
            shard_channels: RwLock::default(),
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

/// The publisher thread's rounds are at least this far apart.
const PUBLISH_PACING: Duration = Duration::from_millis(1);
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
                    let mut last_round: Option<Instant> = None;
                    while let Ok(mut events) = rx.recv() {
                        // The first events after a quiet spell go out at once; under load, the
                        // batches of a millisecond share one round (and one delivery per
                        // subscriber), and appliers hand over without waking this thread.
                        if let Some(wait) = last_round
                            .map(|at| PUBLISH_PACING.saturating_sub(at.elapsed()))
                            .filter(|wait| !wait.is_zero())
                        {
                            std::thread::sleep(wait);
                        }
                        last_round = Some(Instant::now());
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
        Event::Expired { name, token, .. } => ("expired", *token, name),
        Event::ForceReleased { name, token, .. } => ("forcereleased", *token, name),
        // Each name of the grant has its own `Granted`.
        Event::WaitEnded { .. } | Event::AllGranted { .. } => return None,
    })
}

/// What one round publishes: the messages, and per subscription (an exact channel, or a
/// pattern) which of them it matched. Subscribers are looked at once per round, when the
/// round is sent, so an event costs the same whatever the number of subscribers.
struct Outbox<'a> {
    messages: Vec<Message>,
    /// Where the round's frames are encoded, one after another: a few allocations a round, not
    /// one a frame. Every frame is a shared slice of it.
    frames: BytesMut,
    /// Per subscription matched this round: its subscribers, the messages' indexes, their bytes.
    groups: Vec<(&'a Subscribers, Vec<u32>, usize)>,
    /// The group of each pattern (by its place in the round's pattern list), once it matched.
    pattern_groups: Vec<Option<usize>>,
    /// The group of each exact channel that matched, by the address of its subscribers' map
    /// (stable while the round holds the registry's read lock).
    channel_groups: HashMap<usize, usize>,
}

impl<'a> Outbox<'a> {
    fn new(patterns: usize) -> Outbox<'a> {
        Outbox {
            messages: Vec::new(),
            frames: BytesMut::new(),
            groups: Vec::new(),
            pattern_groups: vec![None; patterns],
            channel_groups: HashMap::new(),
        }
    }

    /// Adds `frame` (whose channel is `channel` within it) for the subscribers of `group`.
    fn add(
        &mut self,
        group: usize,
        kind: SubscriptionKind,
        channel: Bytes,
        pattern: Option<&Bytes>,
        frame: Bytes,
    ) {
        let index = self.messages.len() as u32;
        let size = frame.len();
        self.messages.push(Message {
            kind,
            channel,
            pattern: pattern.cloned(),
            frame,
        });
        let (_, picks, bytes) = &mut self.groups[group];
        picks.push(index);
        *bytes += size;
    }

    fn new_group(&mut self, subscribers: &'a Subscribers) -> usize {
        self.groups.push((subscribers, Vec::new(), 0));
        self.groups.len() - 1
    }

    fn pattern_group(&mut self, at: usize, subscribers: &'a Subscribers) -> usize {
        if let Some(group) = self.pattern_groups[at] {
            return group;
        }
        let group = self.new_group(subscribers);
        self.pattern_groups[at] = Some(group);
        group
    }

    fn channel_group(&mut self, subscribers: &'a Subscribers) -> usize {
        let key = std::ptr::from_ref(subscribers) as usize;
        if let Some(&group) = self.channel_groups.get(&key) {
            return group;
        }
        let group = self.new_group(subscribers);
        self.channel_groups.insert(key, group);
        group
    }

    /// One delivery per subscribed client: a client in one subscription this round shares
    /// that subscription's list of picks; one in several gets them merged, in publishing order.
    fn send(self, limit: usize) {
        let mut clients: HashMap<u64, (&Arc<Mailbox>, Vec<usize>)> = HashMap::new();
        for (group, (subscribers, _, _)) in self.groups.iter().enumerate() {
            for (&id, mailbox) in subscribers.iter() {
                clients
                    .entry(id)
                    .or_insert((mailbox, Vec::new()))
                    .1
                    .push(group);
            }
        }
        let published = Arc::new(self.messages);
        let groups: Vec<(Arc<Vec<u32>>, usize)> = self
            .groups
            .into_iter()
            .map(|(_, picks, size)| (Arc::new(picks), size))
            .collect();
        for (mailbox, of) in clients.into_values() {
            let (picks, size) = match &of[..] {
                [one] => groups[*one].clone(),
                several => {
                    let mut merged: Vec<u32> = several
                        .iter()
                        .flat_map(|g| groups[*g].0.iter().copied())
                        .collect();
                    merged.sort_unstable();
                    let size = several.iter().map(|g| groups[*g].1).sum();
                    (Arc::new(merged), size)
                }
            };
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

/// The first buffer of a round's frames; each next one is twice the size, up to the last.
const FRAMES_FIRST: usize = 4 * 1024;
const FRAMES_MOST: usize = 256 * 1024;

impl Outbox<'_> {
    /// A RESP2 array of bulk strings, and the range of `parts[at]` in it.
    fn encode(&mut self, parts: &[&[u8]], at: usize) -> (Bytes, std::ops::Range<usize>) {
        let size = 16 + parts.iter().map(|p| p.len() + 16).sum::<usize>();
        if self.frames.capacity() < size {
            // The frames already taken share the old buffer; a new one is started.
            let next = (self.frames.capacity() * 2).clamp(FRAMES_FIRST, FRAMES_MOST);
            self.frames = BytesMut::with_capacity(next.max(size));
        }
        let out = &mut self.frames;
        let mut number = itoa::Buffer::new();
        out.put_u8(b'*');
        out.put_slice(number.format(parts.len()).as_bytes());
        out.put_slice(b"\r\n");
        let mut range = 0..0;
        for (i, part) in parts.iter().enumerate() {
            out.put_u8(b'$');
            out.put_slice(number.format(part.len()).as_bytes());
            out.put_slice(b"\r\n");
            if i == at {
                range = out.len()..out.len() + part.len();
            }
            out.put_slice(part);
            out.put_slice(b"\r\n");
        }
        (out.split().freeze(), range)
    }
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

    fn map(&self, kind: SubscriptionKind) -> &RwLock<HashMap<Bytes, Subscribers>> {
        match kind {
            SubscriptionKind::Channel => &self.channels,
            SubscriptionKind::Pattern => &self.patterns,
            SubscriptionKind::Shard => &self.shard_channels,
        }
    }

    /// Adds `id`'s subscription of `kind` to `channel` (a pattern, for a pattern); false if it
    /// had it already.
    pub fn subscribe(
        &self,
        kind: SubscriptionKind,
        channel: Bytes,
        id: u64,
        mailbox: &Arc<Mailbox>,
    ) -> bool {
        let added = self
            .map(kind)
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
    pub fn unsubscribe(&self, kind: SubscriptionKind, channel: &[u8], id: u64) -> bool {
        let mut map = self.map(kind).write();
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

    /// Adds `payload` on `channel`, for the subscribers of the channel and of every pattern
    /// matching it, to `outbox`. Each frame is encoded once, and only if somebody gets it.
    fn collect<'a>(
        channels: &'a HashMap<Bytes, Subscribers>,
        shard_channels: &'a HashMap<Bytes, Subscribers>,
        patterns: &[(&Bytes, &'a Subscribers)],
        channel: &[u8],
        payload: &[u8],
        outbox: &mut Outbox<'a>,
    ) {
        if let Some(subscribers) = channels.get(channel) {
            let group = outbox.channel_group(subscribers);
            let (frame, at) = outbox.encode(&[b"message", channel, payload], 1);
            outbox.add(
                group,
                SubscriptionKind::Channel,
                frame.slice(at),
                None,
                frame,
            );
        }
        if let Some(subscribers) = shard_channels.get(channel) {
            let group = outbox.channel_group(subscribers);
            let (frame, at) = outbox.encode(&[b"smessage", channel, payload], 1);
            outbox.add(group, SubscriptionKind::Shard, frame.slice(at), None, frame);
        }
        for (at, (pattern, subscribers)) in patterns.iter().enumerate() {
            if !flockd_acl::glob_match(pattern, channel) {
                continue;
            }
            let group = outbox.pattern_group(at, subscribers);
            let (frame, range) = outbox.encode(&[b"pmessage", pattern, channel, payload], 2);
            outbox.add(
                group,
                SubscriptionKind::Pattern,
                frame.slice(range),
                Some(pattern),
                frame,
            );
        }
    }

    /// Runs `publish` with the subscriptions read once for the whole round, then sends it.
    fn round(&self, publish: impl FnOnce(&mut dyn FnMut(&[u8], &[u8]))) {
        let channels = self.channels.read();
        let shard_channels = self.shard_channels.read();
        let patterns = self.patterns.read();
        let patterns: Vec<(&Bytes, &Subscribers)> = patterns.iter().collect();
        let mut outbox = Outbox::new(patterns.len());
        publish(&mut |channel, payload| {
            Registry::collect(
                &channels,
                &shard_channels,
                &patterns,
                channel,
                payload,
                &mut outbox,
            )
        });
        outbox.send(self.limit.load(Ordering::Relaxed));
    }

    /// Publishes one message that is not a lock event (Sentinel's `+switch-master`).
    pub fn publish_message(&self, channel: &[u8], payload: &[u8]) {
        self.round(|publish| publish(channel, payload));
    }

    /// Publishes `events` now, in order: one delivery per subscriber.
    pub fn publish_now(&self, events: &[Event]) {
        self.round(|publish| {
            let (mut channel, mut payload) = (Vec::new(), Vec::new());
            let mut number = itoa::Buffer::new();
            for event in events {
                let Some((kind, token, name)) = describe(event) else {
                    continue;
                };
                channel.clear();
                channel.extend_from_slice(LOCK_CHANNEL_PREFIX);
                channel.extend_from_slice(name);
                let token = number.format(token).as_bytes();
                payload.clear();
                payload.extend_from_slice(kind.as_bytes());
                payload.push(b' ');
                payload.extend_from_slice(token);
                publish(&channel, &payload);
                channel.clear();
                channel.extend_from_slice(EVENT_CHANNEL_PREFIX);
                channel.extend_from_slice(kind.as_bytes());
                payload.clear();
                payload.extend_from_slice(token);
                payload.push(b' ');
                payload.extend_from_slice(name);
                publish(&channel, &payload);
            }
        });
    }

    /// PUBSUB CHANNELS (SHARDCHANNELS, with `Shard`): the channels with a subscriber, matching
    /// `pattern` if given.
    pub fn channels(&self, kind: SubscriptionKind, pattern: Option<&[u8]>) -> Vec<Bytes> {
        let mut out: Vec<Bytes> = self
            .map(kind)
            .read()
            .keys()
            .filter(|c| pattern.is_none_or(|p| flockd_acl::glob_match(p, c)))
            .cloned()
            .collect();
        out.sort();
        out
    }

    /// PUBSUB NUMSUB (SHARDNUMSUB, with `Shard`): subscribers of `channel` (not counting
    /// patterns).
    pub fn numsub(&self, kind: SubscriptionKind, channel: &[u8]) -> usize {
        self.map(kind).read().get(channel).map_or(0, HashMap::len)
    }

    /// PUBSUB NUMPAT: pattern subscriptions over all connections.
    pub fn numpat(&self) -> usize {
        self.patterns.read().values().map(HashMap::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use SubscriptionKind::{Channel, Pattern};
    use std::net::SocketAddr;

    use crate::services::clients::ClientRegistry;

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
    fn a_message_knows_its_payload() {
        let registry = ClientRegistry::default();
        let pubsub = Registry::default();
        let (mailbox, mut rx) = Mailbox::new(client(&registry));
        pubsub.subscribe(
            Channel,
            Bytes::from_static(b"__flock__:a\r\nb"),
            1,
            &mailbox,
        );
        pubsub.publish_now(&[granted(b"a\r\nb", 7)]);
        let delivery = rx.try_recv().unwrap();
        let payloads: Vec<&[u8]> = delivery.messages().filter_map(Message::payload).collect();
        assert_eq!(payloads, vec![&b"granted 7"[..]]);
    }

    #[test]
    fn frames_stay_whole_when_the_rounds_buffer_fills_up() {
        let mut outbox = Outbox::new(0);
        let mut frames = Vec::new();
        // From tiny to past the largest buffer, so frames land in several buffers.
        for size in (0..400).map(|i| i * 37).chain([FRAMES_MOST + 1, 3]) {
            let payload = vec![b'x'; size];
            let (frame, range) = outbox.encode(&[b"message", b"chan", &payload], 2);
            frames.push((frame, range, payload));
        }
        for (frame, range, payload) in frames {
            let mut expected = format!(
                "*3\r\n$7\r\nmessage\r\n$4\r\nchan\r\n${}\r\n",
                payload.len()
            )
            .into_bytes();
            expected.extend_from_slice(&payload);
            expected.extend_from_slice(b"\r\n");
            assert_eq!(&frame[..], &expected[..]);
            assert_eq!(&frame[range], &payload[..]);
        }
    }

    #[test]
    fn events_go_to_channels_and_matching_patterns_once_per_batch() {
        let ps = Registry::default();
        let registry = ClientRegistry::default();
        let (a, mut a_rx) = Mailbox::new(client(&registry));
        let (b, mut b_rx) = Mailbox::new(client(&registry));
        assert!(!ps.wants_events());
        assert!(ps.subscribe(Channel, Bytes::from_static(b"__flock__:x"), 1, &a));
        assert!(!ps.subscribe(Channel, Bytes::from_static(b"__flock__:x"), 1, &a));
        assert!(ps.subscribe(Pattern, Bytes::from_static(b"__flockevent__:*"), 2, &b));
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
                held_ms: Some(5),
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
        assert!(ps.unsubscribe(Channel, b"__flock__:x", 1));
        assert!(ps.unsubscribe(Pattern, b"__flockevent__:*", 2));
        assert!(!ps.wants_events());
        assert!(ps.channels(Channel, None).is_empty());
    }

    #[test]
    fn a_client_in_several_subscriptions_gets_them_in_publishing_order() {
        let ps = Registry::default();
        let registry = ClientRegistry::default();
        let (a, mut a_rx) = Mailbox::new(client(&registry));
        let (b, mut b_rx) = Mailbox::new(client(&registry));
        let (c, mut c_rx) = Mailbox::new(client(&registry));
        ps.subscribe(Channel, Bytes::from_static(b"__flock__:y"), 1, &a);
        ps.subscribe(Pattern, Bytes::from_static(b"__flockevent__:*"), 1, &a);
        ps.subscribe(Pattern, Bytes::from_static(b"__flock*"), 1, &a);
        ps.subscribe(Pattern, Bytes::from_static(b"__flockevent__:*"), 2, &b);
        ps.subscribe(Pattern, Bytes::from_static(b"__flockevent__:*"), 3, &c);
        ps.publish_now(&[granted(b"x", 1), granted(b"y", 2)]);
        let delivery = a_rx.try_recv().unwrap();
        let got: Vec<(Option<&[u8]>, &[u8])> = delivery
            .messages()
            .map(|m| (m.pattern.as_deref(), &m.channel[..]))
            .collect();
        let star: &[u8] = b"__flock*";
        let events: &[u8] = b"__flockevent__:*";
        let channels: Vec<&[u8]> = got.iter().map(|(_, c)| *c).collect();
        let granted: &[u8] = b"__flockevent__:granted";
        assert_eq!(
            channels,
            [
                &b"__flock__:x"[..],
                granted,
                granted,
                b"__flock__:y",
                b"__flock__:y",
                granted,
                granted
            ]
        );
        assert_eq!(got[0].0, Some(star));
        assert_eq!((got[3].0, got[4].0), (None, Some(star)));
        // The two patterns that match one message come in the same order each time.
        let mut both = [got[1].0, got[2].0];
        assert_eq!(both, [got[5].0, got[6].0]);
        both.sort();
        assert_eq!(both, [Some(star), Some(events)]);
        let sizes: usize = delivery.messages().map(|m| m.frame.len()).sum();
        assert_eq!(delivery.size, sizes);
        // Subscribers of one subscription share its picks.
        let (b, c) = (b_rx.try_recv().unwrap(), c_rx.try_recv().unwrap());
        assert!(Arc::ptr_eq(&b.picks, &c.picks));
        assert_eq!(b.messages().count(), 2);
        assert_eq!(b.size, c.size);
    }

    #[test]
    fn a_subscriber_past_the_limit_is_disconnected_and_others_are_not() {
        let ps = Registry::default();
        ps.configure(true, 1000);
        let registry = ClientRegistry::default();
        let (slow_client, fast_client) = (client(&registry), client(&registry));
        let (slow, _slow_rx) = Mailbox::new(slow_client.clone());
        let (fast, mut fast_rx) = Mailbox::new(fast_client.clone());
        ps.subscribe(Pattern, Bytes::from_static(b"*"), 1, &slow);
        ps.subscribe(Pattern, Bytes::from_static(b"*"), 2, &fast);
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
