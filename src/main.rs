//! The flockd daemon: parse flags, set up logging, run the server until SIGTERM, SIGINT or
//! SHUTDOWN; or run a tool such as `flockd check-aof` or `flockd lock`.

mod check_aof;
mod commands;
mod config;
mod data_dir;
mod healthcheck;
mod lock;
mod log;
mod logging;
mod server;
mod services;

use std::process::ExitCode;

use config::{Cli, Tool};

/// jemalloc: its statistics are counters, cheap to read for INFO and the metrics (see
/// `services::stats::memory`), where glibc's had to walk the heap.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let cli = Cli::parse_with_defaults();
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
