//! The task that keeps a lock: renews at a third of the lease, watches the clock against the
//! lease counted from each renewal's send time, and listens on `__flock__:<name>` for the
//! holding's `expired` and `forcereleased` events. It says the lock is lost once, then ends.

use std::pin::Pin;
use std::time::Duration;

use std::sync::Arc;

use futures_util::{Stream, StreamExt};
use redis::aio::PubSub;
use tokio::sync::{oneshot, watch};
use tokio::time::{Instant, sleep_until};

use crate::lost::Lost;
use crate::nodes::Nodes;
use crate::nodes::Route;

pub(crate) struct Watchdog {
    pub name: String,
    pub token: u64,
    pub lease: Duration,
    pub margin: Duration,
    /// When the request behind the current validity was sent.
    pub renewed_at: Instant,
    pub route: Route,
    /// Where a new event subscription is made after the first one's node went away.
    pub nodes: Arc<Nodes>,
    pub valid_until: watch::Sender<Instant>,
    pub lost: watch::Sender<Option<Lost>>,
}

type Events = Pin<Box<dyn Stream<Item = redis::Msg> + Send>>;

enum Renewal {
    Renewed,
    /// The guard was released or dropped while the renewal was out.
    Stopped,
    Lost(Lost),
}

impl Watchdog {
    /// Subscribes to the lock's channel (before returning, so no event after the grant is
    /// missed), then runs until stopped or the lock is lost.
    pub async fn spawn(self, events: Option<PubSub>, stopped: oneshot::Receiver<()>) {
        let events = match events {
            Some(pubsub) => self.subscribe(pubsub).await,
            None => None,
        };
        tokio::spawn(self.run(events, stopped));
    }

    async fn subscribe(&self, mut pubsub: PubSub) -> Option<Events> {
        let channel = format!("__flock__:{}", self.name);
        match pubsub.subscribe(&channel).await {
            Ok(()) => Some(Box::pin(pubsub.into_on_message())),
            Err(_) => None,
        }
    }

    /// Events again, from the node that answers now, after the first subscription's node went
    /// away. An event between the two is missed; the renewal after it is refused instead.
    async fn resubscribe(&self) -> Option<Events> {
        let Route::Nodes(_) = self.route else {
            return None;
        };
        let index = self.nodes.current_index().await;
        let pubsub = self.nodes.pubsub(index).await?;
        self.subscribe(pubsub).await
    }

    fn deadline(&self) -> Instant {
        *self.valid_until.borrow() - self.margin
    }

    async fn run(mut self, mut events: Option<Events>, mut stopped: oneshot::Receiver<()>) {
        loop {
            let next_renewal = self.renewed_at + self.lease / 3;
            tokio::select! {
                biased;
                _ = &mut stopped => return,
                message = next_event(&mut events) => match message {
                    Some(message) => {
                        if let Some(lost) = self.event_ends_holding(&message) {
                            return self.lose(lost);
                        }
                    }
                    // The event connection is gone: renewals still tell.
                    None => events = None,
                },
                _ = sleep_until(self.deadline()) => return self.lose(Lost::LeaseRunningOut),
                _ = sleep_until(next_renewal) => {
                    // After a pause both may be due: the clock decides, not the select.
                    if Instant::now() >= self.deadline() {
                        return self.lose(Lost::LeaseRunningOut);
                    }
                    match self.renew(&mut stopped).await {
                        Renewal::Renewed => {
                            if events.is_none() {
                                events = tokio::select! {
                                    events = self.resubscribe() => events,
                                    _ = sleep_until(self.deadline()) => None,
                                };
                            }
                        }
                        Renewal::Stopped => return,
                        Renewal::Lost(lost) => return self.lose(lost),
                    }
                }
            }
        }
    }

    /// One renewal; it must come back before the lease (from the last one sent) is about to end.
    async fn renew(&mut self, stopped: &mut oneshot::Receiver<()>) -> Renewal {
        let mut cmd = redis::cmd("FLOCK.RENEW");
        cmd.arg(&self.name)
            .arg(self.token)
            .arg(self.lease.as_millis() as u64);
        // Each attempt's send time counts: a renewal sent again to another node after a failure
        // makes the lease valid from then, not from the first try.
        let sent = std::sync::Mutex::new(Instant::now());
        let attempts = async {
            loop {
                *sent.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
                let reply = self.route.query::<i64>(&cmd, Instant::now()).await;
                match &reply {
                    Err(e) if crate::nodes::worth_another_node(e) => {
                        if let Route::Pinned(_) = self.route {
                            return reply;
                        }
                        crate::nodes::pause().await;
                    }
                    _ => return reply,
                }
            }
        };
        let reply = tokio::select! {
            reply = attempts => reply,
            _ = sleep_until(self.deadline()) => return Renewal::Lost(Lost::LeaseRunningOut),
            // Released meanwhile: nothing is lost.
            _ = stopped => return Renewal::Stopped,
        };
        let sent = sent.into_inner().unwrap_or_else(|e| e.into_inner());
        match reply {
            Ok(1) => {
                self.renewed_at = sent;
                let _ = self.valid_until.send(sent + self.lease);
                Renewal::Renewed
            }
            Ok(other) => Renewal::Lost(Lost::RenewFailed(format!("FLOCK.RENEW replied {other}"))),
            Err(e) if e.code() == Some("NOTOWNER") => {
                Renewal::Lost(Lost::RenewRefused(e.to_string()))
            }
            Err(e) => Renewal::Lost(Lost::RenewFailed(e.to_string())),
        }
    }

    /// `expired <token>` or `forcereleased <token>` of this holding.
    fn event_ends_holding(&self, message: &redis::Msg) -> Option<Lost> {
        let payload: String = message.get_payload().ok()?;
        let (event, token) = payload.split_once(' ')?;
        if token.parse::<u64>().ok()? != self.token {
            return None;
        }
        match event {
            "expired" => Some(Lost::Expired),
            "forcereleased" => Some(Lost::ForceReleased),
            _ => None,
        }
    }

    fn lose(self, lost: Lost) {
        // A guard released meanwhile has dropped its receiver: then nobody needs to know.
        if !self.lost.is_closed() {
            let _ = self.lost.send(Some(lost));
        }
    }
}

async fn next_event(events: &mut Option<Events>) -> Option<redis::Msg> {
    match events {
        Some(stream) => stream.next().await,
        None => std::future::pending().await,
    }
}
