//! What operators and tools touch: the metrics port and console, TLS, the command line and config, the data directory, `flockd lock` and `flockd ping`, redis-cli, the documentation's examples and recipes, the Rust client, fencing into PostgreSQL.
//!
//! One test binary per theme, each module one suite (named as the file it came from), so
//! the harness and the `redis` client are compiled and linked once per theme, not per file.

#[path = "../common/mod.rs"]
mod common;

mod cli_config;
mod client;
mod console;
mod data_dir;
mod examples;
mod in_process;
mod lock_tool;
mod metrics;
mod ping_tool;
mod postgres_fencing;
mod recipes;
mod redis_cli_hints;
mod tls;
