//! The running configuration: commands read it without a lock (one atomic load); CONFIG SET
//! (`super::reconfigure`) publishes a whole new one, one change at a time. A connection reads
//! it through its own [`ConfigCache`]: a load of `ArcSwap` costs about 40 instructions, a
//! cache's look at whether anything changed one atomic read, and a request read it three times.

use std::sync::Arc;

use arc_swap::{ArcSwap, Cache, Guard};
use parking_lot::Mutex;

use crate::config::Config;
use crate::config::change::ChangeError;
use crate::logging::LoggingError;

pub struct LiveConfig {
    current: Arc<ArcSwap<Config>>,
    /// Serializes changes, so two CONFIG SETs cannot each publish half of theirs.
    changing: Mutex<()>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ReconfigureError {
    #[error(transparent)]
    Change(#[from] ChangeError),
    #[error("CONFIG SET failed (possibly related to argument 'log-level') - {0}")]
    LogFilter(LoggingError),
    #[error("CONFIG SET failed (possibly related to argument 'tls-cert-file') - {0}")]
    Tls(flockd_tls::TlsError),
}

impl LiveConfig {
    pub fn new(config: Config) -> LiveConfig {
        LiveConfig {
            current: Arc::new(ArcSwap::from_pointee(config)),
            changing: Mutex::new(()),
        }
    }

    /// Makes one change at a time: `make` gets the configuration in force and returns the next
    /// one (with whatever effects need more than the new value made), which is then published.
    pub fn change<E>(&self, make: impl FnOnce(&Config) -> Result<Config, E>) -> Result<(), E> {
        let _one_at_a_time = self.changing.lock();
        let old = self.current.load_full();
        let next = make(&old)?;
        self.current.store(Arc::new(next));
        Ok(())
    }

    /// The configuration in force now (a later change does not alter what this returned).
    pub fn load(&self) -> Guard<Arc<Config>> {
        self.current.load()
    }

    /// A cache for one reader: its `load` sees every change published before it.
    pub fn cache(&self) -> ConfigCache {
        Cache::new(self.current.clone())
    }
}

/// One reader's view of the configuration (arc-swap's `Cache`: `load` takes `&mut`).
pub type ConfigCache = Cache<Arc<ArcSwap<Config>>, Arc<Config>>;
