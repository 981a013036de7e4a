//! A granted lock: its token, the watchdog that renews it, and how its loss is told.

use std::future::Future;
use std::time::Duration;

use std::sync::Arc;

use redis::aio::PubSub;
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;

use crate::Error;
use crate::lost::Lost;
use crate::nodes::{Nodes, Route, SHARED_REPLY_TIMEOUT};
use crate::watchdog::Watchdog;

/// A granted lock. Renewed while it lives; released by [`LockGuard::release`], or in the
/// background when dropped.
pub struct LockGuard {
    name: String,
    token: u64,
    route: Route,
    /// Until when the holding is known to be valid (set by the watchdog).
    valid_until: watch::Receiver<Instant>,
    lost: watch::Receiver<Option<Lost>>,
    margin: Duration,
    stop: Option<oneshot::Sender<()>>,
    released: bool,
}

impl LockGuard {
    pub(crate) async fn start(
        name: String,
        token: u64,
        lease: Duration,
        sent: Instant,
        route: Route,
        nodes: Arc<Nodes>,
        events: Option<PubSub>,
    ) -> LockGuard {
        let margin = safety_margin(lease);
        let (valid_tx, valid_until) = watch::channel(sent + lease);
        let (lost_tx, lost) = watch::channel(None);
        let (stop, stopped) = oneshot::channel();
        let watchdog = Watchdog {
            name: name.clone(),
            token,
            lease,
            margin,
            renewed_at: sent,
            route: route.clone(),
            nodes,
            valid_until: valid_tx,
            lost: lost_tx,
        };
        watchdog.spawn(events, stopped).await;
        LockGuard {
            name,
            token,
            route,
            valid_until,
            lost,
            margin,
            stop: Some(stop),
            released: false,
        }
    }

    /// The fencing token of the grant: pass it with every write to what the lock protects.
    pub fn token(&self) -> u64 {
        self.token
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Until when the holding is valid by this process's clock: the lease counted from when the
    /// last successful renewal (or the acquire) was sent. Later only as renewals succeed.
    pub fn valid_until(&self) -> Instant {
        *self.valid_until.borrow()
    }

    /// How long before [`LockGuard::valid_until`] the lock counts as lost.
    pub fn safety_margin(&self) -> Duration {
        self.margin
    }

    /// Why the lock is lost, if it is, checked now: also when the lease is about to run out by
    /// the clock and the watchdog has not run yet (after this process was paused).
    pub fn is_lost(&self) -> Option<Lost> {
        if let Some(lost) = self.lost.borrow().clone() {
            return Some(lost);
        }
        let valid_until = *self.valid_until.borrow();
        (Instant::now() + self.margin >= valid_until).then_some(Lost::LeaseRunningOut)
    }

    /// Resolves when the lock is lost, with why; never after a release.
    pub fn lost(&self) -> impl Future<Output = Lost> + Send + 'static {
        let mut lost = self.lost.clone();
        async move {
            loop {
                if let Some(why) = lost.borrow_and_update().clone() {
                    return why;
                }
                if lost.changed().await.is_err() {
                    // Released or dropped: it will never be lost now.
                    return std::future::pending().await;
                }
            }
        }
    }

    /// `FENCE.SET key token value LOCK name`: stores `value` if this guard's token is not below
    /// the highest the key accepted and the holding is live on the server. `Ok(false)`: refused.
    /// Not sent at all, `Err(Error::Lost)`, when the lock is already known to be lost.
    pub async fn fence_set(
        &self,
        key: impl redis::ToRedisArgs + Send + Sync,
        value: impl redis::ToRedisArgs + Send + Sync,
    ) -> Result<bool, Error> {
        if let Some(lost) = self.is_lost() {
            return Err(Error::Lost(lost));
        }
        let mut cmd = redis::cmd("FENCE.SET");
        cmd.arg(key)
            .arg(self.token)
            .arg(value)
            .arg("LOCK")
            .arg(&self.name);
        let stored: i64 = self.route.query(&cmd, self.retry_until()).await?;
        Ok(stored == 1)
    }

    /// Stops the renewals and releases the lock: `true` when the holding is gone now, `false`
    /// when a reentrant hold remains. A lock that was lost already is `-NOTOWNER` (an error).
    pub async fn release(mut self) -> Result<bool, Error> {
        self.stop_watchdog();
        self.released = true;
        let mut cmd = redis::cmd("FLOCK.RELEASE");
        cmd.arg(&self.name).arg(self.token);
        let free: i64 = self.route.query(&cmd, self.retry_until()).await?;
        Ok(free == 1)
    }

    /// How long a request of this holding is sent again after a failure: while the lease may
    /// still be valid (a release after that has nothing left to free), and at least one reply
    /// timeout.
    fn retry_until(&self) -> Instant {
        self.valid_until()
            .max(Instant::now() + SHARED_REPLY_TIMEOUT)
    }

    fn stop_watchdog(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        self.stop_watchdog();
        if self.released {
            return;
        }
        // Released in the background, on the runtime the guard was made on (none: the lease
        // runs out on its own).
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let route = self.route.clone();
        let until = self.retry_until();
        let mut cmd = redis::cmd("FLOCK.RELEASE");
        cmd.arg(std::mem::take(&mut self.name)).arg(self.token);
        runtime.spawn(async move {
            let _: Result<i64, _> = route.query(&cmd, until).await;
        });
    }
}

/// How long before the lease's end the lock counts as lost: a tenth of the lease (at most
/// 2 s), so a write started just before still lands well inside it.
fn safety_margin(lease: Duration) -> Duration {
    (lease / 10).min(Duration::from_secs(2))
}
