//! A lock's live events for the console, as server-sent events: the feed subscribes to the
//! lock's channel `__flock__:<name>` in the same registry SUBSCRIBE uses, so it gets exactly
//! what pub/sub publishes, and it is a client of the server as a subscriber is (CLIENT LIST
//! shows it as `name=console`, CLIENT KILL ends it, it counts towards `maxclients`).
//!
//! Bounded: at most [`MAX_FEEDS`] feeds; each has [`QUEUE`] chunks waiting for its
//! reader at most. A reader that falls behind loses events, not memory: the feed drops what
//! does not fit and, once there is room, sends a `dropped` event saying how many it lost.
//! The feed ends when its reader goes, when the server shuts down, when the client is killed
//! (or passes `client-output-buffer-limit-pubsub`, as any subscriber would), and when the
//! user loses the right to see the lock.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use flockd_acl::User;
use flockd_metrics::{PageBody, PageRequest, PageResponse};
use serde_json::json;
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;

use std::sync::atomic::{AtomicUsize, Ordering};

use super::error::{ConsoleError, MAX_FEEDS};
use crate::server::shared::Shared;
use crate::services::clients::ClientHandle;
use crate::services::pubsub::{Delivery, LOCK_CHANNEL_PREFIX, Mailbox, SubscriptionKind};

/// Chunks waiting for a feed's reader, at most.
pub const QUEUE: usize = 64;
/// A comment line this often keeps proxies from closing a quiet stream, and finds a reader
/// that left.
const HEARTBEAT: Duration = Duration::from_secs(15);

pub fn open(
    shared: &Arc<Shared>,
    user: Arc<User>,
    name: Bytes,
    request: &PageRequest<'_>,
    slot: FeedSlot,
) -> Result<PageResponse, ConsoleError> {
    let channel = Bytes::from([LOCK_CHANNEL_PREFIX, &name].concat());
    if !user.can_access_key(&name) {
        return Err(ConsoleError::NoPermKey);
    }
    if !user.can_access_channel(&channel) {
        return Err(ConsoleError::NoPermChannel);
    }
    let maxclients = shared.config.load().maxclients;
    let client = shared
        .clients
        .register(request.peer, request.local, maxclients)
        .ok_or(ConsoleError::MaxClients)?;
    {
        let mut names = client.names.lock();
        names.name = Some(Bytes::from_static(b"console"));
        names.user = Some(Bytes::from(user.name.clone()));
    }
    let (mailbox, deliveries) = Mailbox::new(client.clone());
    shared.applied.pubsub.subscribe(
        SubscriptionKind::Channel,
        channel.clone(),
        client.id,
        &mailbox,
    );
    let feed = Feed {
        shared: shared.clone(),
        client,
        channel,
        _slot: slot,
    };
    let (tx, rx) = mpsc::channel(QUEUE);
    let display = String::from_utf8_lossy(&name).into_owned();
    let hello = json!({
        "name": display,
        "events": shared.config.load().notify_flock_events,
    });
    let _ = tx.try_send(Bytes::from(format!(
        "retry: 2000\nevent: ready\ndata: {hello}\n\n"
    )));
    tokio::spawn(run(feed, user, name, mailbox, deliveries, tx));
    Ok(PageResponse {
        status: 200,
        headers: vec![
            ("content-type", "text/event-stream".into()),
            ("cache-control", "no-store".into()),
            ("x-accel-buffering", "no".into()),
        ],
        body: PageBody::Stream(rx),
    })
}

/// The feed's hold on the server: unsubscribed and unregistered when dropped.
struct Feed {
    shared: Arc<Shared>,
    client: Arc<ClientHandle>,
    channel: Bytes,
    _slot: FeedSlot,
}

impl Drop for Feed {
    fn drop(&mut self) {
        self.shared.applied.pubsub.unsubscribe(
            SubscriptionKind::Channel,
            &self.channel,
            self.client.id,
        );
        self.shared.clients.unregister(self.client.id);
    }
}

/// The reader's side of the queue, with what it lost while it was full.
struct Outlet {
    tx: mpsc::Sender<Bytes>,
    dropped: u64,
}

impl Outlet {
    /// Sends `chunk` (after the notice of what was dropped, if any); false once the reader is
    /// gone.
    fn send(&mut self, chunk: Bytes) -> bool {
        if self.dropped > 0 {
            let notice = format!(
                "event: dropped\ndata: {}\n\n",
                json!({ "dropped": self.dropped })
            );
            match self.tx.try_send(Bytes::from(notice)) {
                Ok(()) => self.dropped = 0,
                Err(TrySendError::Full(_)) => {
                    self.dropped += 1;
                    return true;
                }
                Err(TrySendError::Closed(_)) => return false,
            }
        }
        match self.tx.try_send(chunk) {
            Ok(()) => true,
            Err(TrySendError::Full(_)) => {
                self.dropped += 1;
                true
            }
            Err(TrySendError::Closed(_)) => false,
        }
    }
}

const NO_LONGER_ALLOWED: &str = "the user may no longer see this lock";

/// Whether the feed's user may still see the lock: a change of users (ACL SETUSER, DELUSER,
/// LOAD) is looked at before anything more is sent, so a user that lost the lock's name, its
/// channel or SUBSCRIBE gets nothing further.
fn still_allowed(
    shared: &Shared,
    user: &mut Arc<User>,
    generation: &mut u64,
    name: &[u8],
    channel: &[u8],
) -> bool {
    let now = shared.acl.generation();
    if now == *generation {
        return true;
    }
    *generation = now;
    match shared.acl.user(&user.name) {
        Some(fresh)
            if fresh.enabled
                && fresh.can_access_key(name)
                && fresh.can_access_channel(channel)
                && crate::commands::permissions::may_run(
                    crate::commands::TABLE,
                    &fresh,
                    "subscribe",
                ) =>
        {
            *user = fresh;
            true
        }
        _ => false,
    }
}

async fn run(
    feed: Feed,
    mut user: Arc<User>,
    name: Bytes,
    mailbox: Arc<Mailbox>,
    mut deliveries: mpsc::UnboundedReceiver<Delivery>,
    tx: mpsc::Sender<Bytes>,
) {
    let shared = feed.shared.clone();
    let mut generation = shared.acl.generation();
    let mut outlet = Outlet { tx, dropped: 0 };
    let mut heartbeat = tokio::time::interval(HEARTBEAT);
    heartbeat.tick().await;
    let mut id: u64 = 0;
    let why = loop {
        tokio::select! {
            delivery = deliveries.recv() => {
                let Some(delivery) = delivery else { break None };
                mailbox.delivered(delivery.size);
                if !still_allowed(&shared, &mut user, &mut generation, &name, &feed.channel) {
                    break Some(NO_LONGER_ALLOWED);
                }
                let mut open = true;
                for message in delivery.messages() {
                    let Some((event, token)) = message
                        .payload()
                        .and_then(|p| std::str::from_utf8(p).ok())
                        .and_then(|p| p.split_once(' '))
                    else {
                        continue;
                    };
                    id += 1;
                    let data = json!({
                        "event": event,
                        "token": token,
                        "at_ms": crate::services::acl::unix_ms(),
                    });
                    open &= outlet.send(Bytes::from(format!("id: {id}\nevent: lock\ndata: {data}\n\n")));
                }
                if !open {
                    break None;
                }
            }
            _ = heartbeat.tick() => {
                if !still_allowed(&shared, &mut user, &mut generation, &name, &feed.channel) {
                    break Some(NO_LONGER_ALLOWED);
                }
                if !outlet.send(Bytes::from_static(b": keepalive\n\n")) {
                    break None;
                }
            }
            _ = outlet.tx.closed() => break None,
            _ = shared.shutdown.cancelled() => break Some("the server is shutting down"),
            _ = feed.client.kill.cancelled() => break Some("the feed was disconnected (CLIENT KILL, or it fell too far behind)"),
        }
    };
    if let Some(why) = why {
        let _ = outlet.tx.try_send(Bytes::from(format!(
            "event: closed\ndata: {}\n\n",
            json!({ "reason": why })
        )));
    }
    drop(feed);
}

/// One of the [`MAX_FEEDS`] places for an event stream, given back when dropped.
pub struct FeedSlot(Arc<AtomicUsize>);

impl FeedSlot {
    pub(super) fn take(feeds: &Arc<AtomicUsize>) -> Result<FeedSlot, ConsoleError> {
        feeds
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |open| {
                (open < MAX_FEEDS).then_some(open + 1)
            })
            .map_err(|_| ConsoleError::TooManyFeeds)?;
        Ok(FeedSlot(feeds.clone()))
    }
}

impl Drop for FeedSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}
