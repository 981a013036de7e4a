//! Logging: a RUST_LOG-style filter (RUST_LOG wins over `log-level` at start), text or JSON
//! lines on stderr. The filter can change at run time (CONFIG SET log-level); the format cannot.

use std::io::IsTerminal;
use std::sync::OnceLock;

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Registry, fmt, reload};

use crate::config::{Config, LogFormat};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LoggingError {
    #[error(
        "bad value for 'log-level': {0} (allowed: a RUST_LOG filter such as info or flockd=debug)"
    )]
    Filter(String),
    #[error("cannot change the log filter: {0}")]
    Reload(String),
}

/// The running subscriber's filter, set once by [`init`].
static FILTER: OnceLock<reload::Handle<EnvFilter, Registry>> = OnceLock::new();

pub fn init(config: &Config) -> Result<(), LoggingError> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(from_env) if !from_env.is_empty() => from_env,
        _ => config.log_level.clone(),
    };
    let (filter, handle) = reload::Layer::new(parse_filter(&filter)?);
    let _ = FILTER.set(handle);
    let registry = tracing_subscriber::registry().with(filter);
    let lines = fmt::layer()
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match config.log_format {
        LogFormat::Text => registry.with(lines).init(),
        LogFormat::Json => registry.with(lines.json()).init(),
    }
    Ok(())
}

/// Checks a `log-level` value without applying it.
pub fn parse_filter(filter: &str) -> Result<EnvFilter, LoggingError> {
    EnvFilter::try_new(filter).map_err(|e| LoggingError::Filter(format!("{filter}: {e}")))
}

/// Replaces the running filter (CONFIG SET log-level): the operator's latest word wins, over
/// RUST_LOG too.
pub fn set_filter(filter: &str) -> Result<(), LoggingError> {
    let filter = parse_filter(filter)?;
    match FILTER.get() {
        Some(handle) => handle
            .reload(filter)
            .map_err(|e| LoggingError::Reload(e.to_string())),
        // No subscriber (a test that never called `init`): nothing to change.
        None => Ok(()),
    }
}
