//! The server: [`start`] (`start.rs`: check, bind, open the log, build the shared state, start
//! the timer tasks) and [`Running::serve`] (`accept.rs`: accept clients until it stops, then
//! shut down cleanly); [`run`] does both, as the binary does.
//!
//! The layers, in the order a request meets them: `connection` (bytes to requests, replies to
//! bytes), `admission` (lookup, auth, arity, whether the log serves and takes writes),
//! `crate::commands` (typed commands: state commands become ops), `crate::log` (where they are
//! proposed), `crate::services::applied` (the state machine applies what the log committed, and
//! routes its events to `waiters`).

mod accept;
mod accounting;
mod admission;
mod connection;
pub mod console;
mod expiry;
mod for_commands;
pub mod metrics;
pub mod reconfigure;
mod routing;
mod sentinel;
mod shared;
mod start;
mod stopping;
mod tasks;

use crate::config::Config;

pub use shared::{PREAUTH_LIMITS, PREAUTH_QUERY_BUFFER, Shared};
pub use start::{Running, ServerError, start};
pub use tasks::sample_memory;

/// Starts the server and serves until it stops.
pub async fn run(config: Config, bump_tokens: Option<u64>) -> Result<(), ServerError> {
    start(config, bump_tokens).await?.serve().await
}
