//! CONFIG GET pattern [pattern ...]: the running configuration, matched Redis-style (glob);
//! CONFIG SET parameter value [parameter value ...]: changes keys that can change at run time;
//! CONFIG REWRITE: writes the running configuration to the `--config` file; CONFIG RESETSTAT.

use bytes::Bytes;
use flockd_proto::Reply;

use super::args::Args;
use super::error::CommandError;
use super::kinds::{CommandDef, LocalCommand};
use super::meta::{CommandFlags, Meta, SubMeta};
use crate::config::change::ChangeError;
use flockd_acl::glob_match;

use super::context::{CommandResult, Ctx, reply};
use crate::config::rewrite;
use crate::services::live_config::ReconfigureError;

/// A CONFIG SET pair as text. A key that is not UTF-8 is unknown anyway; a value that is not is
/// refused rather than changed by a lossy decoding (a password would silently differ).
fn text_pair(key: &[u8], value: &[u8]) -> Result<(String, String), CommandError> {
    let key = String::from_utf8_lossy(key).into_owned();
    match std::str::from_utf8(value) {
        Ok(value) => Ok((key, value.to_string())),
        Err(_) => Err(ReconfigureError::Change(ChangeError::Invalid {
            key,
            reason: "argument is not UTF-8 text".to_string(),
        })
        .into()),
    }
}

#[derive(Debug)]
pub enum RuntimeConfig {
    Get(Vec<Bytes>),
    Set(Vec<(String, String)>),
    Rewrite,
    ResetStat,
    Help,
}

impl CommandDef for RuntimeConfig {
    const META: Meta = Meta {
        syntax: "CONFIG GET parameter [parameter ...] | SET parameter value [parameter value ...] | \
                 RESETSTAT | REWRITE | HELP",
        group: "server",
        subcommands: &[
            SubMeta {
                name: "config|get",
                arity: -3,
                summary: "Returns the effective values of configuration parameters.",
            },
            SubMeta {
                name: "config|set",
                arity: -4,
                summary: "Sets configuration parameters in-flight.",
            },
            SubMeta {
                name: "config|resetstat",
                arity: 2,
                summary: "Resets the server's statistics.",
            },
            SubMeta {
                name: "config|rewrite",
                arity: 2,
                summary: "Persists the effective configuration to file.",
            },
            SubMeta {
                name: "config|help",
                arity: 2,
                summary: "Returns helpful text about the different subcommands.",
            },
        ],
        ..Meta::new(
            "config",
            -2,
            CommandFlags {
                admin: true,
                ..CommandFlags::READ
            },
            "A container for server configuration commands.",
        )
    };

    fn parse(args: &mut Args) -> Result<Self, CommandError> {
        let sub = args.next_keyword().unwrap_or_default();
        match sub.as_str() {
            "GET" if args.remaining() == 0 => Err(CommandError::WrongArity("config|get".into())),
            "GET" => Ok(RuntimeConfig::Get(
                std::iter::from_fn(|| args.next_opt()).collect(),
            )),
            "SET" if args.remaining() < 2 => Err(CommandError::WrongArity("config|set".into())),
            // Redis: an odd count of parameter-value words is a syntax error, not an arity one.
            "SET" if args.remaining() % 2 == 1 => Err(CommandError::Syntax),
            "SET" => {
                let mut pairs = Vec::with_capacity(args.remaining() / 2);
                while let (Some(key), Some(value)) = (args.next_opt(), args.next_opt()) {
                    pairs.push(text_pair(&key, &value)?);
                }
                Ok(RuntimeConfig::Set(pairs))
            }
            "RESETSTAT" if args.remaining() == 0 => Ok(RuntimeConfig::ResetStat),
            "REWRITE" if args.remaining() == 0 => Ok(RuntimeConfig::Rewrite),
            "HELP" if args.remaining() == 0 => Ok(RuntimeConfig::Help),
            "RESETSTAT" | "REWRITE" | "HELP" => Err(CommandError::WrongArity(
                format!("config|{}", sub.to_ascii_lowercase()).into(),
            )),
            other => Err(CommandError::UnknownSubcommand {
                command: "CONFIG",
                sub: flockd_proto::printable(other.as_bytes(), 64),
            }),
        }
    }
}

impl LocalCommand for RuntimeConfig {
    fn run(self, ctx: &mut Ctx<'_>) -> CommandResult {
        match self {
            RuntimeConfig::Get(patterns) => {
                let mut entries = ctx.server.config().load().entries();
                // `--port 0` picks a free port: report the one actually listened on.
                for (key, value) in entries.iter_mut() {
                    if *key == "port" {
                        *value = ctx.server.local_addr().port().to_string();
                    }
                    // The contract: passwords never appear in CONFIG GET (ACL LIST shows digests).
                    if *key == "requirepass" && !value.is_empty() {
                        *value = "(redacted)".to_string();
                    }
                    if *key == "tls-port"
                        && let Some(addr) = ctx.server.tls_addr()
                    {
                        *value = addr.port().to_string();
                    }
                }
                let pairs = entries
                    .into_iter()
                    .filter(|(key, _)| {
                        patterns
                            .iter()
                            .any(|p| glob_match(&p.to_ascii_lowercase(), key.as_bytes()))
                    })
                    .map(|(key, value)| (Reply::bulk(key), Reply::bulk(value)))
                    .collect();
                reply(Reply::Map(pairs))
            }
            RuntimeConfig::Set(changes) => {
                // Blocking at most for one fsync (a switch to `always` syncs what came before).
                tokio::task::block_in_place(|| ctx.server.reconfigure(&changes))?;
                reply(Reply::ok())
            }
            RuntimeConfig::Rewrite => {
                let config = std::sync::Arc::clone(&ctx.server.config().load());
                tokio::task::block_in_place(|| rewrite::rewrite(&config))?;
                tracing::info!("CONFIG REWRITE executed with success");
                reply(Reply::ok())
            }
            // What Redis resets: INFO stats, commandstats, latency histograms and the lock
            // table's event counters; not the slow log or the latency monitor.
            RuntimeConfig::ResetStat => {
                ctx.server.reset_stats();
                reply(Reply::ok())
            }
            RuntimeConfig::Help => reply(Reply::Array(vec![
                Reply::Simple(
                    "CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:".into(),
                ),
                Reply::Simple("GET <pattern>".into()),
                Reply::Simple(
                    "    Return parameters matching the glob-like <pattern> and their values."
                        .into(),
                ),
                Reply::Simple("SET <directive> <value>".into()),
                Reply::Simple("    Set the configuration <directive> to <value>.".into()),
                Reply::Simple("RESETSTAT".into()),
                Reply::Simple("    Reset statistics reported by the INFO command.".into()),
                Reply::Simple("REWRITE".into()),
                Reply::Simple("    Rewrite the configuration file.".into()),
                Reply::Simple("HELP".into()),
                Reply::Simple("    Prints this help.".into()),
            ])),
        }
    }
}
