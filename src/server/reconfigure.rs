//! CONFIG SET's effects: a change builds the whole next configuration, checks it, makes the
//! changes that need more than the new value (the AOF's fsync policy and rewrite thresholds, the
//! log filter, TLS, pub/sub, requirepass) and then publishes it, one change at a time.

use super::shared::Shared;
use crate::config::Config;
use crate::logging;
use crate::services::live_config::ReconfigureError;

/// CONFIG SET: every change checked first, then all made. Blocking when the fsync policy
/// changes to `always` (what was written before is synced first).
pub fn change(shared: &Shared, changes: &[(String, String)]) -> Result<(), ReconfigureError> {
    shared.config.change(|old| make(shared, old, changes))
}

/// The next configuration, with the effects that need more than the new value made.
fn make(
    shared: &Shared,
    old: &Config,
    changes: &[(String, String)],
) -> Result<Config, ReconfigureError> {
    let next = old.with_changes(changes)?;
    if next.log_level != old.log_level {
        logging::parse_filter(&next.log_level).map_err(ReconfigureError::LogFilter)?;
    }
    // The one change that can still fail goes first: new certificates are read and checked
    // before anything else changes, and only then used for new connections.
    if next.tls_settings() != old.tls_settings()
        && let (Some(acceptor), Some(settings)) = (&shared.tls, next.tls_settings())
    {
        acceptor.reload(&settings).map_err(ReconfigureError::Tls)?;
        tracing::info!("CONFIG SET: TLS certificates reloaded for new connections");
    }
    shared.log.reconfigure(old, &next);
    if next.log_level != old.log_level
        && let Err(e) = logging::set_filter(&next.log_level)
    {
        // Checked above; a reload can only fail if the subscriber is gone.
        tracing::warn!("log-level not applied: {e}");
    }
    shared.applied.pubsub.configure(
        next.notify_flock_events,
        next.client_output_buffer_limit_pubsub,
    );
    if next.requirepass != old.requirepass {
        // requirepass is the default user's password, as in Redis.
        shared
            .acl
            .change(|acl| acl.set_default_password(next.requirepass.as_deref()));
    }
    tracing::info!(
        changes = %changes.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>().join(" "),
        "CONFIG SET"
    );
    Ok(next)
}
