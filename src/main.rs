//! The flockd binary: the daemon, or a tool such as `flockd check-aof` or `flockd lock`
//! (see [`flockd::run`]).

use std::process::ExitCode;

/// jemalloc: its statistics are counters, cheap to read for INFO and the metrics (see
/// `services::stats::memory`), where glibc's had to walk the heap.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    flockd::run(flockd::config::Cli::parse_with_defaults())
}
