//! LATENCY LATEST | HISTORY event | RESET [event ...] | HISTOGRAM [command ...] | DOCTOR | HELP.
//!
//! The latency monitor (LATEST, HISTORY, RESET, DOCTOR) records, per event, the worst latency
//! of each second in which a command took at least `latency-monitor-threshold` ms (0, the
//! default, turns it off, as in Redis). flockd's events are Redis's `command` and
//! `fast-command`. HISTOGRAM answers every command's calls by duration in Redis 7's shape (see
//! `services::stats::LatencyHistogram`); it is always on.

use bytes::Bytes;
use flockd_proto::Reply;

use super::args::Args;
use super::context::{CommandResult, Ctx, reply};
use super::error::CommandError;
use super::kinds::{CommandDef, LocalCommand};
use super::meta::{CommandFlags, Meta, SubMeta, find};
use crate::services::stats::{LATENCY_EVENTS, LatencySeries};
use flockd_proto::printable;

/// Events only Redis records: LATENCY HISTORY answers them, as Redis does an event that has no
/// samples, with an empty array, so tools that ask for them keep working.
const REDIS_ONLY_EVENTS: &[&str] = &[
    "active-defrag-cycle",
    "aof-fstat",
    "aof-fsync-always",
    "aof-rename",
    "aof-write",
    "aof-write-active-child",
    "aof-write-alone",
    "aof-write-pending-fsync",
    "command-unblocking",
    "eviction-cycle",
    "eviction-del",
    "eviction-lazyfree",
    "expire-cycle",
    "expire-del",
    "fork",
    "module-acquire-GIL",
    "rdb-unlink-temp-file",
    "while-blocked-cron",
];

#[derive(Debug)]
pub enum Latency {
    Latest,
    History(&'static str),
    Reset(Vec<Bytes>),
    Histogram(Vec<Bytes>),
    Doctor,
    Help,
}

const HELP: &[&str] = &[
    "LATENCY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "DOCTOR",
    "    Return a human readable latency analysis report.",
    "HISTORY <event>",
    "    Return time-latency samples for the <event> class.",
    "LATEST",
    "    Return the latest latency samples for all events.",
    "RESET [<event> ...]",
    "    Reset latency data of one or more <event> classes.",
    "    (default: reset all data for all event classes)",
    "HISTOGRAM [COMMAND ...]",
    "    Return a cumulative distribution of latencies in the format of a histogram for the specified command names.",
    "    If no commands are specified then all histograms are replied.",
    "HELP",
    "    Prints this help.",
];

impl CommandDef for Latency {
    const META: Meta = Meta {
        syntax: "LATENCY LATEST | HISTORY event | RESET [event ...] | HISTOGRAM [command ...] | DOCTOR | HELP",
        group: "server",
        subcommands: &[
            SubMeta {
                name: "latency|latest",
                arity: 2,
                summary: "Returns the latest latency samples for all events.",
            },
            SubMeta {
                name: "latency|history",
                arity: 3,
                summary: "Returns timestamp-latency samples for an event.",
            },
            SubMeta {
                name: "latency|reset",
                arity: -2,
                summary: "Resets the latency data for one or more events.",
            },
            SubMeta {
                name: "latency|histogram",
                arity: -2,
                summary: "Returns the cumulative distribution of latencies of a subset or all commands.",
            },
            SubMeta {
                name: "latency|doctor",
                arity: 2,
                summary: "Returns a human-readable latency analysis report.",
            },
            SubMeta {
                name: "latency|help",
                arity: 2,
                summary: "Returns helpful text about the different subcommands.",
            },
        ],
        ..Meta::new(
            "latency",
            -2,
            CommandFlags {
                admin: true,
                fast: false,
                ..CommandFlags::READ
            },
            "A container for latency diagnostics commands.",
        )
    };

    fn parse(args: &mut Args) -> Result<Self, CommandError> {
        let raw = args.next_bytes()?;
        let n = args.remaining();
        let none = |name: &'static str, cmd: Latency| {
            if n == 0 {
                Ok(cmd)
            } else {
                Err(CommandError::WrongArity(name.into()))
            }
        };
        let rest = |args: &mut Args| std::iter::from_fn(|| args.next_opt()).collect();
        match raw.to_ascii_uppercase().as_slice() {
            b"LATEST" => none("latency|latest", Latency::Latest),
            b"DOCTOR" => none("latency|doctor", Latency::Doctor),
            b"HELP" => none("latency|help", Latency::Help),
            b"HISTORY" if n != 1 => Err(CommandError::WrongArity("latency|history".into())),
            b"HISTORY" => {
                let event = args.next_bytes()?;
                LATENCY_EVENTS
                    .iter()
                    .chain(REDIS_ONLY_EVENTS)
                    .find(|e| e.as_bytes() == &event[..])
                    .map(|e| Latency::History(e))
                    .ok_or_else(|| CommandError::UnknownLatencyEvent(printable(&event, 128)))
            }
            b"RESET" => Ok(Latency::Reset(rest(args))),
            b"HISTOGRAM" => Ok(Latency::Histogram(rest(args))),
            _ => Err(CommandError::UnknownSubcommand {
                command: "LATENCY",
                sub: printable(&raw, 128),
            }),
        }
    }
}

impl LocalCommand for Latency {
    fn run(self, ctx: &mut Ctx<'_>) -> CommandResult {
        let stats = ctx.server.stats();
        let table = ctx.server.command_table();
        match self {
            Latency::Latest => reply(Reply::Array(
                stats
                    .latency
                    .events()
                    .into_iter()
                    .map(|s| {
                        let (time, latest) = s.samples.back().copied().unwrap_or_default();
                        Reply::Array(vec![
                            Reply::bulk(s.event),
                            Reply::Integer(time as i64),
                            Reply::Integer(latest as i64),
                            Reply::Integer(s.max_ms as i64),
                        ])
                    })
                    .collect(),
            )),
            Latency::History(event) => {
                let samples = stats
                    .latency
                    .events()
                    .into_iter()
                    .find(|s| s.event == event)
                    .map(|s| s.samples)
                    .unwrap_or_default();
                reply(Reply::Array(
                    samples
                        .into_iter()
                        .map(|(time, ms)| {
                            Reply::Array(vec![
                                Reply::Integer(time as i64),
                                Reply::Integer(ms as i64),
                            ])
                        })
                        .collect(),
                ))
            }
            Latency::Reset(events) => reply(Reply::Integer(stats.latency.reset(&events) as i64)),
            Latency::Histogram(names) => {
                // Every command that has calls, or the named ones that do (unknown names are
                // skipped, as Redis skips them), each once, in table order.
                let wanted: Option<Vec<usize>> = (!names.is_empty())
                    .then(|| names.iter().filter_map(|n| find(table, n)).collect());
                let mut map = Vec::new();
                for (index, (meta, stat)) in table.iter().zip(&stats.commands).enumerate() {
                    if wanted.as_ref().is_some_and(|w| !w.contains(&index)) {
                        continue;
                    }
                    let (calls, levels) = stat.histogram.cumulative();
                    if calls == 0 {
                        continue;
                    }
                    let buckets = levels
                        .into_iter()
                        .map(|(usec, count)| {
                            (Reply::Integer(usec as i64), Reply::Integer(count as i64))
                        })
                        .collect();
                    map.push((
                        Reply::bulk(meta.name),
                        Reply::Map(vec![
                            (Reply::bulk("calls"), Reply::Integer(calls as i64)),
                            (Reply::bulk("histogram_usec"), Reply::Map(buckets)),
                        ]),
                    ));
                }
                reply(Reply::Map(map))
            }
            Latency::Doctor => reply(Reply::Verbatim(Bytes::from(doctor(
                ctx.server.config().load().latency_monitor_threshold,
                &stats.latency.events(),
            )))),
            Latency::Help => reply(Reply::Array(
                HELP.iter().map(|l| Reply::Simple((*l).into())).collect(),
            )),
        }
    }
}

/// A human-readable report in the manner of Redis's (its sentences, flockd's advice).
fn doctor(threshold_ms: u64, events: &[LatencySeries]) -> String {
    if threshold_ms == 0 {
        return "I'm sorry, Dave, I can't do that. Latency monitoring is disabled in this flockd instance. Set latency-monitor-threshold (milliseconds: in the config file, FLOCKD_LATENCY_MONITOR_THRESHOLD or --latency-monitor-threshold) to enable it.\n".to_string();
    }
    if events.is_empty() {
        return "Dave, no latency spike was observed during the lifetime of this flockd instance, not in the slightest bit. I honestly think you ought to sit down calmly, take a stress pill, and think things over.\n".to_string();
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let mut report = String::from(
        "Dave, I have observed latency spikes in this flockd instance. You don't mind talking about it, do you Dave?\n\n",
    );
    for (i, series) in events.iter().enumerate() {
        let samples = series.samples.len().max(1) as u64;
        let sum: u64 = series.samples.iter().map(|(_, ms)| ms).sum();
        let avg = sum / samples;
        let mad = series
            .samples
            .iter()
            .map(|(_, ms)| ms.abs_diff(avg))
            .sum::<u64>()
            / samples;
        let oldest = series.samples.front().map_or(now, |(t, _)| *t);
        let period = now.saturating_sub(oldest).max(1);
        report.push_str(&format!(
            "{}. {}: {} latency spikes (average {avg}ms, mean deviation {mad}ms, period {:.2} sec). Worst all time event {}ms.\n",
            i + 1,
            series.event,
            series.samples.len(),
            period as f64 / samples as f64,
            series.max_ms,
        ));
    }
    report.push_str(
        "\nI have a few advices for you:\n\
         - SLOWLOG GET shows which commands were slow. A lock or fence change is timed from its admission to its result, so it includes the append-only file's write and, under appendfsync always, its fsync: a slow disk shows here (INFO persistence has aof_fsyncs and aof_acks_per_fsync).\n\
         - LATENCY HISTOGRAM shows every command's calls by duration.\n",
    );
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doctor_reports_in_redis_manner() {
        assert!(doctor(0, &[]).starts_with("I'm sorry, Dave, I can't do that."));
        assert!(doctor(5, &[]).starts_with("Dave, no latency spike was observed"));
        let series = LatencySeries {
            event: "command",
            samples: [(1, 10), (2, 30)].into_iter().collect(),
            max_ms: 30,
        };
        let report = doctor(5, &[series]);
        assert!(
            report.contains(
                "1. command: 2 latency spikes (average 20ms, mean deviation 10ms, period "
            ),
            "{report}"
        );
        assert!(report.contains("Worst all time event 30ms."), "{report}");
    }
}
