//! The bookkeeping of one command call that the server does around it: commandstats, the
//! latency monitor and the slow log, each judged by the command's place in the command table.

use std::time::Instant;

use super::shared::Shared;
use crate::commands::TABLE;
use crate::config::Config;
use crate::services::clients::ClientHandle;
use crate::services::stats::{SlowArgs, Tally};

/// One call that ran from `started` until now: commandstats and histogram (through the
/// connection's tally), the latency monitor (event `fast-command` or `command`, as Redis) and,
/// given its arguments, the slow log.
pub fn account_call(
    shared: &Shared,
    config: &Config,
    tally: &mut Tally,
    index: usize,
    started: Instant,
    slow: Option<(&SlowArgs, &ClientHandle)>,
) {
    let usec = started.elapsed().as_micros() as u64;
    tally.add(index, usec);
    let event = if TABLE[index].flags.fast {
        "fast-command"
    } else {
        "command"
    };
    shared
        .stats
        .latency
        .add_if_needed(config.latency_monitor_threshold, event, usec / 1000);
    // EXEC is not logged (as in Redis): the commands it ran are.
    if let Some((args, client)) = slow
        && TABLE[index].name != "exec"
    {
        shared.stats.slowlog.record(
            config.slowlog_log_slower_than,
            config.slowlog_max_len,
            usec,
            args,
            client,
        );
    }
}
