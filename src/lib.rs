//! flockd as a library: the daemon's every layer, so the binary (`main.rs`), the
//! instruction-count guard (`crates/flockd-instructions`) and tests reach the real code. The layers,
//! in the order a request meets them:
//!
//! * [`server`]: listening, a connection's bytes to requests and replies back, admission.
//! * [`commands`]: one file per command; each parses its arguments, and a state command turns
//!   into ops.
//! * [`log`]: where ops are proposed (the AOF on a single node, Raft on a cluster node) and
//!   what comes back.
//! * [`services`]: what commands use of a running server: the applied state and its events,
//!   users, configuration, counters, clients.
//! * [`config`]: flags, file and environment into one [`config::Config`]; [`logging`];
//!   [`data_dir`].
//! * Tools beside the daemon: [`check_aof`], [`healthcheck`] (`flockd ping`), [`lock`]
//!   (`flockd lock`).

pub mod check_aof;
pub mod commands;
pub mod config;
pub mod data_dir;
pub mod healthcheck;
pub mod lock;
pub mod log;
pub mod logging;
pub mod server;
pub mod services;

use std::process::ExitCode;

use config::{Cli, Tool};

/// Runs what the command line asks for: a tool, or the daemon until SIGTERM, SIGINT or
/// SHUTDOWN. The exit code is 2 for a configuration that cannot be used.
pub fn run(cli: Cli) -> ExitCode {
    if let Some(Tool::CheckAof { fix, file }) = &cli.command {
        return check_aof::run(file, *fix);
    }
    let cli = match cli.command {
        Some(Tool::Lock(args)) => return lock::run(*args),
        _ => cli,
    };
    // `flockd ping --port N` and `flockd --port N ping` alike: the subcommand's flags first.
    let (ping, settings) = match cli.command {
        Some(Tool::Ping { settings }) => (true, settings.or(cli.settings)),
        _ => (false, cli.settings),
    };
    let config = match settings.resolve() {
        Ok(config) => config,
        Err(e) => {
            eprintln!("flockd: {e}");
            return ExitCode::from(2);
        }
    };
    if ping {
        return healthcheck::run(&config);
    }
    if let Err(e) = logging::init(&config) {
        eprintln!("flockd: {e}");
        return ExitCode::from(2);
    }
    let names = std::env::vars_os().filter_map(|(name, _)| name.into_string().ok());
    for warning in config::env::unknown_variables(names) {
        tracing::warn!("{warning}");
    }
    // jemalloc hands freed pages back to the system only on some later allocation, unless its
    // background thread does it: without it a server gone idle after a burst kept its peak
    // RSS for good (297 bytes per name against 181 with it, 15 s after 4M acquires).
    if let Err(e) = tikv_jemalloc_ctl::background_thread::write(true) {
        tracing::warn!("jemalloc's background thread did not start: {e}");
    }
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    runtime.enable_all().thread_name("flockd-worker");
    if config.worker_threads > 0 {
        runtime.worker_threads(config.worker_threads);
    }
    let runtime = match runtime.build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("flockd: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(server::run(config, cli.bump_tokens)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Logging writes to stderr: one line says it (JSON too, with `log-format json`).
            tracing::error!("{e}");
            ExitCode::FAILURE
        }
    }
}
