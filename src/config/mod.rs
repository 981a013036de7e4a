//! Settings: built-in defaults, then the TOML file (`--config`), then `FLOCKD_*` environment
//! variables, then command-line flags, each overriding the one before. clap reads flags and the
//! environment together (a flag wins over its variable); the file fills in what neither gave.
//! At run time CONFIG SET changes the keys that can change ([`change`]) and CONFIG REWRITE
//! writes them back to the file ([`rewrite`]).
//!
//! Every key is declared once, in the table in [`keys`]: name, type, `FLOCKD_*` variable,
//! default, whether CONFIG SET may change it, its help line and how CONFIG GET shows it. The
//! flags, variables and file keys ([`Settings`]), their merge, the defaults, the CONFIG GET list
//! and CONFIG SET's mutability check are generated from it. A new key is one entry there, plus
//! its field in [`Config`] and its check in `Settings::checked` below (the compiler asks for
//! both); `cargo test -p flockd --bins config` then fails until `config/flockd.toml` and the
//! README's configuration table list it with its default and variable, and checks that CONFIG
//! GET, SET and REWRITE know it.

pub mod change;
pub mod env;
pub mod parameters;
pub mod rewrite;
mod running;

use std::path::{Path, PathBuf};

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use flockd_aof::FsyncPolicy;
use flockd_tls::{AuthClients, Protocol};

use parameters::PARAMETERS;
pub use parameters::Settings;
pub use running::{ClusterConfig, Config, LogFormat};

impl Default for Config {
    /// The parameter table's defaults ([`parameters::PARAMETERS`]), validated as any configuration is. The table's
    /// defaults are valid (`defaults_serve_out_of_the_box` checks it), so this cannot fail.
    fn default() -> Self {
        Settings::default()
            .validate()
            .expect("the parameter table's defaults are a valid configuration")
    }
}

impl Config {
    pub fn aof_path(&self) -> PathBuf {
        self.dir.join(&self.appendfilename)
    }

    /// Every key with its current value as CONFIG GET shows it (Redis-style names), in the
    /// parameter table's order.
    pub fn entries(&self) -> Vec<(&'static str, String)> {
        PARAMETERS
            .iter()
            .map(|key| (key.name, (key.show)(self)))
            .collect()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("bad config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("bad value for '{key}': {value} (allowed: {allowed})")]
    Invalid {
        key: &'static str,
        value: String,
        allowed: &'static str,
    },
    #[error("cluster mode: {0}")]
    Cluster(String),
    /// A key without a value and without a default in the parameter table (a bug in the table).
    #[error("no value for '{0}' and no default in the parameter table")]
    NoDefault(&'static str),
}

#[derive(Debug, Parser)]
#[command(
    name = "flockd",
    version,
    about = "A lock server that speaks the Redis protocol and hands out fencing tokens"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Tool>,
    /// After loading the AOF, raise every lock's token counter by N before serving: use it once
    /// when starting from a restored (older) AOF, with N above the grants per lock since the
    /// backup. Not a config-file key on purpose: it must not repeat on every restart.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=(i64::MAX as u64)))]
    pub bump_tokens: Option<u64>,
    #[command(flatten)]
    pub settings: Settings,
}

impl Cli {
    /// The flags, with each key's default in its `--help` text. The settings are `Option`s so
    /// that a flag's absence lets the file decide: clap's own `default_value` would override
    /// the file, so the default is only shown, from the parameter table.
    pub fn command_with_defaults() -> clap::Command {
        let show = |arg: clap::Arg| {
            let Some(key) = arg.get_long().and_then(parameters::parameter) else {
                return arg;
            };
            let default = match key.default {
                Some("") | None => return arg,
                Some(d) => d,
            };
            let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
            arg.help(format!("{help} [default: {default}]"))
        };
        Cli::command()
            .mut_args(show)
            .mut_subcommand("ping", |ping| ping.mut_args(show))
    }

    /// [`Cli::parse`], with the defaults in `--help`.
    pub fn parse_with_defaults() -> Cli {
        let mut matches = Cli::command_with_defaults().get_matches();
        Cli::from_arg_matches_mut(&mut matches).unwrap_or_else(|e| e.exit())
    }
}

#[derive(Debug, Subcommand)]
pub enum Tool {
    /// Check an append-only file, and with --fix cut off a damaged tail.
    CheckAof {
        /// Truncate the file at the first bad record when nothing valid follows it.
        #[arg(long)]
        fix: bool,
        file: PathBuf,
    },
    /// PING the server this configuration describes (a container health check); exit 0 on PONG.
    /// Takes the daemon's flags (after `ping` or before it), variables and config file; a
    /// TLS-only server is asked over TLS with the tls-* files.
    Ping {
        #[command(flatten)]
        settings: Box<Settings>,
    },
    /// Run CMD while holding a lock: `flockd lock NAME [options] -- CMD [ARGS...]`. CMD sees
    /// FLOCK_NAME and FLOCK_TOKEN; the lease is renewed while it runs, released when it exits,
    /// and CMD is terminated if the lock is lost. Exit code: CMD's; -E (default 1) when the
    /// lock was not acquired; --lost-exit-code (default 75) when it was lost.
    Lock(Box<crate::lock::LockArgs>),
}

impl Settings {
    /// Layers flags and environment over the config file over the defaults, and validates.
    pub fn resolve(self) -> Result<Config, ConfigError> {
        let from_file = match &self.config {
            Some(path) => read_file(path)?,
            None => Settings::default(),
        };
        self.or(from_file).validate()
    }

    /// These settings over the parameter table's defaults, checked and turned into a configuration.
    fn validate(self) -> Result<Config, ConfigError> {
        self.or(Settings::defaults()).checked()
    }

    /// Every value checked, in a fixed order (the first bad one is the error); keys without a
    /// default may be `None`.
    fn checked(self) -> Result<Config, ConfigError> {
        let tls = self.tls()?;
        let bind = match self.bind {
            None => return Err(ConfigError::NoDefault("bind")),
            Some(text) => text.parse().map_err(|_| ConfigError::Invalid {
                key: "bind",
                value: text,
                allowed: "an IPv4 or IPv6 address, e.g. 127.0.0.1 or ::1",
            })?,
        };
        let appendfsync = match self.appendfsync {
            None => return Err(ConfigError::NoDefault("appendfsync")),
            Some(text) => text.parse().map_err(|_| ConfigError::Invalid {
                key: "appendfsync",
                value: text,
                allowed: "always, everysec, no",
            })?,
        };
        let log_format = match self.log_format {
            None => return Err(ConfigError::NoDefault("log-format")),
            Some(text) => LogFormat::from_str(&text, true).map_err(|_| ConfigError::Invalid {
                key: "log-format",
                value: text,
                allowed: "text, json",
            })?,
        };
        let appendfilename = match self.appendfilename {
            None => return Err(ConfigError::NoDefault("appendfilename")),
            Some(name) if is_plain_file_name(&name) => name,
            Some(name) => {
                return Err(ConfigError::Invalid {
                    key: "appendfilename",
                    value: name,
                    allowed: "a file name without '/' (the file lives in `dir`)",
                });
            }
        };
        let metrics_bind = match self.metrics_bind {
            None => bind,
            Some(text) => text.parse().map_err(|_| ConfigError::Invalid {
                key: "metrics-bind",
                value: text,
                allowed: "an IPv4 or IPv6 address, e.g. 127.0.0.1 or ::1",
            })?,
        };
        let metrics_port = optional_port(
            "metrics-port",
            self.metrics_port,
            "0..=65535 (0: a free port; leave it out for no metrics port)",
        )?;
        let requirepass = match self.requirepass {
            Some(p) if p.is_empty() => None,
            other => other,
        };
        // CONFIG SET rebuilds every key from its CONFIG GET text: an empty list is no list.
        let cluster_peers = self.cluster_peers.filter(|p| !p.trim().is_empty());
        let cluster = match (self.node_id, cluster_peers) {
            (None, None) => None,
            (Some(node_id), Some(peers)) => {
                if !(1..=i64::MAX as u64).contains(&node_id) {
                    return Err(ConfigError::Invalid {
                        key: "node-id",
                        value: node_id.to_string(),
                        allowed: "1..=9223372036854775807",
                    });
                }
                let parsed = flockd_raft::parse_peers(&peers)
                    .map_err(|e| ConfigError::Cluster(e.to_string()))?;
                if appendfsync != FsyncPolicy::Always {
                    return Err(ConfigError::Cluster(format!(
                        "appendfsync {appendfsync} with cluster mode: a cluster node syncs its Raft \
                         log and vote before it acknowledges them (appendfsync always), or a \
                         majority could lose an acknowledged lock in a power cut; remove the key"
                    )));
                }
                let heartbeat_ms = ranged(
                    "cluster-heartbeat-ms",
                    self.cluster_heartbeat_ms,
                    10,
                    60_000,
                    "10..=60000",
                )?;
                let election_timeout_ms = ranged(
                    "cluster-election-timeout-ms",
                    self.cluster_election_timeout_ms,
                    50,
                    600_000,
                    "50..=600000",
                )?;
                if election_timeout_ms <= heartbeat_ms * 2 {
                    return Err(ConfigError::Cluster(format!(
                        "cluster-election-timeout-ms {election_timeout_ms} must be more than twice \
                         cluster-heartbeat-ms {heartbeat_ms}, or followers call elections while a \
                         leader is alive"
                    )));
                }
                let tls_on = match self.tls_cluster.as_deref() {
                    None | Some("no") => false,
                    Some("yes") => true,
                    Some(other) => {
                        return Err(ConfigError::Invalid {
                            key: "tls-cluster",
                            value: other.to_string(),
                            allowed: "yes or no",
                        });
                    }
                };
                if tls_on
                    && (tls.cert_file.is_none()
                        || tls.key_file.is_none()
                        || tls.ca_cert_file.is_none())
                {
                    return Err(ConfigError::Cluster(
                        "tls-cluster yes needs tls-cert-file, tls-key-file and tls-ca-cert-file: \
                         each node shows its certificate to the others and checks theirs \
                         against the CA"
                            .into(),
                    ));
                }
                Some(ClusterConfig {
                    node_id,
                    peers: parsed,
                    heartbeat_ms,
                    election_timeout_ms,
                    tls: tls_on,
                    groups: ranged(
                        "cluster-groups",
                        self.cluster_groups,
                        1,
                        u64::from(flockd_raft::MAX_GROUPS),
                        "1..=64",
                    )? as u16,
                    wait_leader_ms: ranged(
                        "cluster-wait-leader-ms",
                        self.cluster_wait_leader_ms,
                        0,
                        3_600_000,
                        "0..=3600000",
                    )?,
                })
            }
            (Some(_), None) => {
                return Err(ConfigError::Cluster(
                    "node-id without cluster-peers: give both for cluster mode, or neither".into(),
                ));
            }
            (None, Some(_)) => {
                return Err(ConfigError::Cluster(
                    "cluster-peers without node-id: give both for cluster mode, or neither".into(),
                ));
            }
        };
        let sentinel_master_name = match self.sentinel_master_name {
            None => return Err(ConfigError::NoDefault("sentinel-master-name")),
            Some(name)
                if !name.is_empty()
                    && name.len() <= 256
                    && name.bytes().all(|b| b.is_ascii_graphic()) =>
            {
                name
            }
            Some(name) => {
                return Err(ConfigError::Invalid {
                    key: "sentinel-master-name",
                    value: name,
                    allowed: "1 to 256 printable characters without spaces",
                });
            }
        };
        let sentinel_port = optional_port(
            "sentinel-port",
            self.sentinel_port,
            "0..=65535 (0: a free port; leave it out for no sentinel port)",
        )?;
        Ok(Config {
            cluster,
            sentinel_master_name,
            sentinel_port,
            aclfile: some_path(self.aclfile),
            tls_port: tls.port,
            tls_only: tls.only,
            tls_cert_file: tls.cert_file,
            tls_key_file: tls.key_file,
            tls_ca_cert_file: tls.ca_cert_file,
            tls_auth_clients: tls.auth_clients,
            tls_protocols: tls.protocols,
            hot_locks_capacity: ranged(
                "hot-locks-capacity",
                self.hot_locks_capacity,
                16,
                1_000_000,
                "16..=1000000",
            )? as usize,
            console: yes_or_no("console", self.console.as_deref())?,
            cluster_redirect: yes_or_no("cluster-redirect", self.cluster_redirect.as_deref())?,
            notify_flock_events: match self.notify_flock_events.as_deref() {
                None => return Err(ConfigError::NoDefault("notify-flock-events")),
                Some("on" | "yes") => true,
                Some("off" | "no") => false,
                Some(other) => {
                    return Err(ConfigError::Invalid {
                        key: "notify-flock-events",
                        value: other.to_string(),
                        allowed: "on, off",
                    });
                }
            },
            client_output_buffer_limit_pubsub: ranged(
                "client-output-buffer-limit-pubsub",
                self.client_output_buffer_limit_pubsub,
                1024,
                1 << 40,
                "1024..=1099511627776",
            )? as usize,
            config_file: self.config,
            metrics_port,
            metrics_bind,
            bind,
            port: ranged("port", self.port.map(u64::from), 0, 65_535, "0..=65535")? as u16,
            dir: self.dir.ok_or(ConfigError::NoDefault("dir"))?,
            appendfilename,
            appendfsync,
            requirepass,
            maxclients: ranged("maxclients", self.maxclients, 1, 1_000_000, "1..=1000000")?
                as usize,
            log_format,
            log_level: self.log_level.ok_or(ConfigError::NoDefault("log-level"))?,
            max_name_bytes: ranged(
                "max-name-bytes",
                self.max_name_bytes,
                1,
                1 << 20,
                "1..=1048576",
            )? as usize,
            max_lease_ms: ranged(
                "max-lease-ms",
                self.max_lease_ms,
                1,
                1 << 40,
                "1..=1099511627776",
            )?,
            max_wait_ms: ranged(
                "max-wait-ms",
                self.max_wait_ms,
                0,
                1 << 40,
                "0..=1099511627776",
            )?,
            proto_max_bulk_len: ranged(
                "proto-max-bulk-len",
                self.proto_max_bulk_len,
                1024,
                1 << 32,
                "1024..=4294967296",
            )? as usize,
            client_query_buffer_limit: ranged(
                "client-query-buffer-limit",
                self.client_query_buffer_limit,
                1024 * 1024,
                1 << 34,
                "1048576..=17179869184",
            )? as usize,
            max_args: ranged("max-args", self.max_args, 16, 1 << 27, "16..=134217728")? as usize,
            max_inline_len: ranged(
                "max-inline-len",
                self.max_inline_len,
                256,
                1 << 30,
                "256..=1073741824",
            )? as usize,
            auto_aof_rewrite_min_size: ranged(
                "auto-aof-rewrite-min-size",
                self.auto_aof_rewrite_min_size,
                0,
                u64::MAX,
                "any size in bytes",
            )?,
            auto_aof_rewrite_percentage: ranged(
                "auto-aof-rewrite-percentage",
                self.auto_aof_rewrite_percentage,
                0,
                1_000_000,
                "0..=1000000 (0 disables)",
            )?,
            shutdown_timeout_ms: ranged(
                "shutdown-timeout-ms",
                self.shutdown_timeout_ms,
                0,
                3_600_000,
                "0..=3600000",
            )?,
            worker_threads: ranged("worker-threads", self.worker_threads, 0, 1024, "0..=1024")?
                as usize,
            max_idle_names: ranged(
                "max-idle-names",
                self.max_idle_names,
                0,
                1 << 40,
                "0..=1099511627776 (0: no bound)",
            )? as usize,
            slowlog_log_slower_than: match self.slowlog_log_slower_than {
                None => return Err(ConfigError::NoDefault("slowlog-log-slower-than")),
                Some(v) if v >= -1 => v,
                Some(v) => {
                    return Err(ConfigError::Invalid {
                        key: "slowlog-log-slower-than",
                        value: v.to_string(),
                        allowed: "-1 (off), 0 (every command) or microseconds",
                    });
                }
            },
            slowlog_max_len: ranged(
                "slowlog-max-len",
                self.slowlog_max_len,
                0,
                1_000_000,
                "0..=1000000",
            )? as usize,
            latency_monitor_threshold: ranged(
                "latency-monitor-threshold",
                self.latency_monitor_threshold,
                0,
                i64::MAX as u64,
                "0 (off) or milliseconds",
            )?,
        })
    }
}

/// The TLS keys, checked together (the files themselves are read at start).
struct TlsKeys {
    port: Option<u16>,
    only: bool,
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
    ca_cert_file: Option<PathBuf>,
    auth_clients: AuthClients,
    protocols: Vec<Protocol>,
}

/// An empty path is no path (CONFIG GET shows an unset file as "").
fn some_path(path: Option<PathBuf>) -> Option<PathBuf> {
    path.filter(|p| !p.as_os_str().is_empty())
}

impl Settings {
    fn tls(&self) -> Result<TlsKeys, ConfigError> {
        let port = optional_port(
            "tls-port",
            self.tls_port,
            "0..=65535 (0: a free port; leave it out for no TLS)",
        )?;
        let only = match self
            .tls_only
            .as_deref()
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            None | Some("no") => false,
            Some("yes") => true,
            Some(_) => {
                return Err(ConfigError::Invalid {
                    key: "tls-only",
                    value: self.tls_only.clone().unwrap_or_default(),
                    allowed: "yes, no",
                });
            }
        };
        let cert_file = some_path(self.tls_cert_file.clone());
        let key_file = some_path(self.tls_key_file.clone());
        let ca_cert_file = some_path(self.tls_ca_cert_file.clone());
        let auth_clients = match &self.tls_auth_clients {
            None if ca_cert_file.is_some() => AuthClients::Yes,
            None => AuthClients::No,
            Some(text) => text.parse().map_err(|()| ConfigError::Invalid {
                key: "tls-auth-clients",
                value: text.clone(),
                allowed: "yes, no, optional",
            })?,
        };
        let protocols = match &self.tls_protocols {
            None => return Err(ConfigError::NoDefault("tls-protocols")),
            Some(text) => Protocol::parse_list(text).map_err(|_| ConfigError::Invalid {
                key: "tls-protocols",
                value: text.clone(),
                allowed: "TLSv1.2, TLSv1.3 or \"TLSv1.2 TLSv1.3\"",
            })?,
        };
        if only && port.is_none() {
            return Err(ConfigError::Invalid {
                key: "tls-only",
                value: "yes".into(),
                allowed: "yes only with tls-port set",
            });
        }
        if port.is_some() && (cert_file.is_none() || key_file.is_none()) {
            return Err(ConfigError::Invalid {
                key: "tls-port",
                value: port.map(|p| p.to_string()).unwrap_or_default(),
                allowed: "a port together with tls-cert-file and tls-key-file",
            });
        }
        if auth_clients != AuthClients::No && port.is_some() && ca_cert_file.is_none() {
            return Err(ConfigError::Invalid {
                key: "tls-auth-clients",
                value: auth_clients.as_str().into(),
                allowed: "no without tls-ca-cert-file (yes and optional verify clients against it)",
            });
        }
        Ok(TlsKeys {
            port,
            only,
            cert_file,
            key_file,
            ca_cert_file,
            auth_clients,
            protocols,
        })
    }
}

/// A `yes|no` key's value.
fn yes_or_no(key: &'static str, value: Option<&str>) -> Result<bool, ConfigError> {
    match value {
        None => Err(ConfigError::NoDefault(key)),
        Some("yes") => Ok(true),
        Some("no") => Ok(false),
        Some(other) => Err(ConfigError::Invalid {
            key,
            value: other.to_string(),
            allowed: "yes, no",
        }),
    }
}

fn is_plain_file_name(name: &str) -> bool {
    !name.is_empty() && !name.contains('/') && name != "." && name != ".."
}

/// An optional port key: unset is none, 0 a free port, at most 65535.
fn optional_port(
    key: &'static str,
    value: Option<u32>,
    allowed: &'static str,
) -> Result<Option<u16>, ConfigError> {
    value
        .map(|p| ranged(key, Some(u64::from(p)), 0, 65_535, allowed).map(|p| p as u16))
        .transpose()
}

fn ranged(
    key: &'static str,
    value: Option<u64>,
    min: u64,
    max: u64,
    allowed: &'static str,
) -> Result<u64, ConfigError> {
    match value {
        None => Err(ConfigError::NoDefault(key)),
        Some(v) if (min..=max).contains(&v) => Ok(v),
        Some(v) => Err(ConfigError::Invalid {
            key,
            value: v.to_string(),
            allowed,
        }),
    }
}

fn read_file(path: &Path) -> Result<Settings, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    toml::from_str(&text).map_err(|e| ConfigError::Parse {
        path: path.to_owned(),
        message: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(args: &[&str]) -> Settings {
        let mut argv = vec!["flockd"];
        argv.extend_from_slice(args);
        Cli::try_parse_from(argv).expect("flags parse").settings
    }

    #[test]
    fn defaults_serve_out_of_the_box() {
        let config = settings(&[]).validate().unwrap();
        assert_eq!(config, Config::default());
        assert_eq!(config.port, 6390);
        assert_eq!(config.aof_path(), PathBuf::from("./data/flockd.aof"));
    }

    #[test]
    fn flags_override_the_file() {
        let dir = std::env::temp_dir().join(format!("flockd-config-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("flockd.toml");
        std::fs::write(
            &file,
            "port = 7000\nappendfsync = \"everysec\"\nmaxclients = 5\n",
        )
        .unwrap();
        let config = settings(&["--config", file.to_str().unwrap(), "--port", "7001"])
            .resolve()
            .unwrap();
        assert_eq!(config.port, 7001);
        assert_eq!(config.appendfsync, FsyncPolicy::EverySec);
        assert_eq!(config.maxclients, 5);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_values_name_the_key_and_the_allowed_values() {
        let err = settings(&["--appendfsync", "sometimes"])
            .validate()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("'appendfsync'") && err.contains("always, everysec, no"),
            "{err}"
        );
        let err = settings(&["--port", "70000"])
            .validate()
            .unwrap_err()
            .to_string();
        assert!(err.contains("'port'") && err.contains("0..=65535"), "{err}");
        let err = settings(&["--maxclients", "0"])
            .validate()
            .unwrap_err()
            .to_string();
        assert!(err.contains("'maxclients'"), "{err}");
    }

    #[test]
    fn cluster_tls_and_sentinel_values_are_checked() {
        let in_cluster = |extra: &[&str]| {
            let mut args = vec!["--node-id", "1", "--cluster-peers", "1=127.0.0.1:7000"];
            args.extend_from_slice(extra);
            settings(&args).validate().map(|c| c.cluster.map(|c| c.tls))
        };
        assert_eq!(in_cluster(&[]).unwrap(), Some(false));
        let err = in_cluster(&["--tls-cluster", "maybe"])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("'tls-cluster'") && err.contains("yes or no"),
            "{err}"
        );
        let err = in_cluster(&["--tls-cluster", "yes"])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("tls-cert-file, tls-key-file and tls-ca-cert-file"),
            "{err}"
        );
        let long = "m".repeat(257);
        for bad in ["", "two words", "tab\there", long.as_str()] {
            let err = settings(&["--sentinel-master-name", bad])
                .validate()
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("'sentinel-master-name'") && err.contains("1 to 256 printable"),
                "{bad:?}: {err}"
            );
        }
        let name = settings(&["--sentinel-master-name", "locks-eu"])
            .validate()
            .unwrap()
            .sentinel_master_name;
        assert_eq!(name, "locks-eu");
    }

    #[test]
    fn unknown_and_mistyped_file_keys_are_refused() {
        let err = toml::from_str::<Settings>("prot = 1")
            .unwrap_err()
            .to_string();
        assert!(err.contains("prot"), "{err}");
        let err = toml::from_str::<Settings>("port = \"high\"")
            .unwrap_err()
            .to_string();
        assert!(err.contains("port"), "{err}");
    }

    #[test]
    fn the_shipped_config_file_matches_the_defaults() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/flockd.toml");
        let config = Settings {
            config: Some(path.clone()),
            ..Settings::default()
        }
        .resolve()
        .unwrap();
        assert_eq!(
            config,
            Config {
                config_file: Some(path),
                ..Config::default()
            }
        );
    }
}
