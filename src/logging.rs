//! Logging: a RUST_LOG-style filter (RUST_LOG wins over `log-level`), text or JSON lines on
//! stderr.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::config::{Config, LogFormat};

#[derive(Debug, thiserror::Error)]
pub enum LoggingError {
    #[error(
        "bad value for 'log-level': {0} (allowed: a RUST_LOG filter such as info or flockd=debug)"
    )]
    Filter(String),
}

pub fn init(config: &Config) -> Result<(), LoggingError> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(from_env) if !from_env.is_empty() => from_env,
        _ => config.log_level.clone(),
    };
    let filter =
        EnvFilter::try_new(&filter).map_err(|e| LoggingError::Filter(format!("{filter}: {e}")))?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match config.log_format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
    Ok(())
}
