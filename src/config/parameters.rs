//! The one table of configuration keys. Each key is declared here once: its name (the TOML key,
//! `--flag` and CONFIG GET/SET's name), the type its flag and file value are read as, its
//! `FLOCKD_*` variable, its default, whether CONFIG SET may change it, one line of help (the
//! flag's `--help` text) and how CONFIG GET shows it. From the table come the [`Settings`]
//! struct (clap flags, variables and serde file keys), its merge ([`Settings::or`]), the
//! defaults ([`Settings::defaults`], and so `Config::default()`), the CONFIG GET list
//! (`Config::entries`) and CONFIG SET's mutability check ([`Parameter::change`]). The tests at the
//! bottom check the rest against it: `config/flockd.toml` and the README's configuration table.
//!
//! Adding a key: one entry below, its check in `Settings::checked` (mod.rs) and its field in
//! `Config`; then `cargo test -p flockd --bins config` says what else still lacks it (the
//! shipped file, the README table).
//!
//! The table runs in CONFIG GET's order, which is also the order CONFIG REWRITE appends keys in.

use std::path::PathBuf;
use std::str::FromStr;

use clap::Args;
use serde::Deserialize;

use super::running::{ClusterConfig, Config};

/// Whether CONFIG SET may change a key while the server runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// CONFIG SET changes it; the change takes effect at once.
    Runtime,
    /// Only a restart changes it (CONFIG SET: "can't set immutable config").
    Restart,
}

/// One configuration key, as the table declares it.
#[derive(Clone, Copy)]
pub struct Parameter {
    /// The TOML key, `--flag` and CONFIG GET/SET name.
    pub name: &'static str,
    /// The type the flag, variable and file value are read as; `None` for the Redis keys
    /// flockd answers CONFIG GET with a fixed value (no flag, variable or file key).
    pub rust_type: Option<&'static str>,
    /// The environment variable. (The flag's `env` and `--help` are generated from the same
    /// literals as `env` and `help`; at run time only the tests read these two fields.)
    #[cfg_attr(not(test), allow(dead_code))]
    pub env: Option<&'static str>,
    /// The default as CONFIG GET and the config file spell it; `None`: unset, or derived from
    /// other keys (`metrics-bind`, `tls-auth-clients`).
    pub default: Option<&'static str>,
    pub change: Change,
    /// One line of help: the flag's `--help` text.
    #[cfg_attr(not(test), allow(dead_code))]
    pub help: &'static str,
    /// The value CONFIG GET shows.
    pub show: fn(&Config) -> String,
}

impl Parameter {
    /// Whether the config file (and so a flag, a variable and CONFIG REWRITE) knows the key.
    pub fn in_file(&self) -> bool {
        self.rust_type.is_some()
    }
}

/// The key called `name` (case-sensitive; CONFIG SET lowercases first).
pub fn parameter(name: &str) -> Option<&'static Parameter> {
    PARAMETERS.iter().find(|k| k.name == name)
}

fn yes_no(on: bool) -> String {
    if on { "yes" } else { "no" }.to_string()
}

fn path_text(path: &Option<PathBuf>) -> String {
    path.as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_default()
}

fn port_text(port: Option<u16>) -> String {
    port.map(|p| p.to_string()).unwrap_or_default()
}

/// A cluster key's value, or its default when this is a single node.
fn cluster_text(config: &Config, name: &str, value: impl Fn(&ClusterConfig) -> String) -> String {
    match &config.cluster {
        Some(cluster) => value(cluster),
        None => parameter(name)
            .and_then(|k| k.default)
            .unwrap_or("")
            .to_string(),
    }
}

/// A default's text as the setting's type; `None` when there is none (or the table's text does
/// not parse, which `Settings::validate` then reports and the tests catch).
fn parse_default<T: FromStr>(text: Option<&str>) -> Option<T> {
    text.and_then(|t| t.parse().ok())
}

macro_rules! config_keys {
    (@opt) => { None };
    (@opt $e:expr) => { Some($e) };
    ($(
        $name:literal {
            $(setting: $field:ident: $ty:ident, env: $env:literal, value: $value_name:literal,
              $(clap: ($($clap:tt)*),)?)?
            default: $default:expr,
            change: $change:ident,
            help: $help:literal,
            show: $show:expr $(,)?
        }
    )*) => {
        /// One optional value per key, from a flag or a FLOCKD_* variable, or the config file;
        /// `None` lets the next layer (the file, then the default) decide.
        #[derive(Debug, Default, Args, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct Settings {
            /// TOML config file (every key: config/flockd.toml).
            #[arg(long, env = "FLOCKD_CONFIG", value_name = "FILE")]
            #[serde(skip)]
            pub config: Option<PathBuf>,
            $($(
                #[doc = $help]
                #[arg(long = $name, env = $env, value_name = $value_name, $($($clap)*)?)]
                #[serde(rename = $name)]
                pub $field: Option<$ty>,
            )?)*
        }

        impl Settings {
            /// Fills every key this one lacks from `lower` (the config file, or the defaults).
            pub fn or(self, lower: Settings) -> Settings {
                Settings {
                    config: self.config.or(lower.config),
                    $($($field: self.$field.or(lower.$field),)?)*
                }
            }

            /// Every key's default from the table (`None` where it has none).
            pub fn defaults() -> Settings {
                Settings {
                    config: None,
                    $($($field: parse_default::<$ty>($default),)?)*
                }
            }
        }

        /// Every key, in CONFIG GET's order.
        pub const PARAMETERS: &[Parameter] = &[$(
            Parameter {
                name: $name,
                rust_type: config_keys!(@opt $(stringify!($ty))?),
                env: config_keys!(@opt $($env)?),
                default: $default,
                change: Change::$change,
                help: $help,
                show: $show,
            },
        )*];
    };
}

config_keys! {
    "bind" {
        setting: bind: String, env: "FLOCKD_BIND", value: "ADDR",
        default: Some("127.0.0.1"), change: Restart,
        help: "Address to listen on.",
        show: |c| c.bind.to_string(),
    }
    "port" {
        setting: port: u32, env: "FLOCKD_PORT", value: "N",
        default: Some("6390"), change: Restart,
        help: "Port to listen on; 0 picks a free one (the ready line names it).",
        show: |c| c.port.to_string(),
    }
    "dir" {
        setting: dir: PathBuf, env: "FLOCKD_DIR", value: "DIR",
        default: Some("./data"), change: Restart,
        help: "Directory of the append-only file.",
        show: |c| c.dir.display().to_string(),
    }
    "appendonly" {
        default: Some("yes"), change: Restart,
        help: "Redis's key, always yes: flockd's state lives in its append-only file.",
        show: |_| "yes".to_string(),
    }
    "save" {
        default: Some(""), change: Restart,
        help: "Redis's key, always empty: no RDB snapshots (tools such as redis-benchmark ask).",
        show: |_| String::new(),
    }
    "appendfilename" {
        setting: appendfilename: String, env: "FLOCKD_APPENDFILENAME", value: "NAME",
        default: Some("flockd.aof"), change: Restart,
        help: "File name of the append-only file inside `dir`.",
        show: |c| c.appendfilename.clone(),
    }
    "appendfsync" {
        setting: appendfsync: String, env: "FLOCKD_APPENDFSYNC", value: "always|everysec|no",
        default: Some("always"), change: Runtime,
        help: "When to fsync the append-only file: always (before each reply), everysec, no.",
        show: |c| c.appendfsync.to_string(),
    }
    "requirepass" {
        setting: requirepass: String, env: "FLOCKD_REQUIREPASS", value: "SECRET",
        clap: (hide_env_values = true),
        default: None, change: Runtime,
        help: "Password clients must send with AUTH (or HELLO ... AUTH) first.",
        show: |c| c.requirepass.clone().unwrap_or_default(),
    }
    "maxclients" {
        setting: maxclients: u64, env: "FLOCKD_MAXCLIENTS", value: "N",
        default: Some("10000"), change: Runtime,
        help: "Maximum number of connected clients.",
        show: |c| c.maxclients.to_string(),
    }
    "log-format" {
        setting: log_format: String, env: "FLOCKD_LOG_FORMAT", value: "text|json",
        default: Some("text"), change: Restart,
        help: "Log format: text or json.",
        show: |c| c.log_format.as_str().to_string(),
    }
    "log-level" {
        setting: log_level: String, env: "FLOCKD_LOG_LEVEL", value: "FILTER",
        default: Some("info"), change: Runtime,
        help: "Log filter, RUST_LOG style (RUST_LOG itself wins when set).",
        show: |c| c.log_level.clone(),
    }
    "max-name-bytes" {
        setting: max_name_bytes: u64, env: "FLOCKD_MAX_NAME_BYTES", value: "N",
        default: Some("1024"), change: Runtime,
        help: "Longest lock name, fence key or owner id, in bytes.",
        show: |c| c.max_name_bytes.to_string(),
    }
    "max-lease-ms" {
        setting: max_lease_ms: u64, env: "FLOCKD_MAX_LEASE_MS", value: "MS",
        default: Some("86400000"), change: Runtime,
        help: "Longest lease a client may ask for, in ms.",
        show: |c| c.max_lease_ms.to_string(),
    }
    "max-wait-ms" {
        setting: max_wait_ms: u64, env: "FLOCKD_MAX_WAIT_MS", value: "MS",
        default: Some("3600000"), change: Runtime,
        help: "Longest WAIT a client may ask for, in ms.",
        show: |c| c.max_wait_ms.to_string(),
    }
    "proto-max-bulk-len" {
        setting: proto_max_bulk_len: u64, env: "FLOCKD_PROTO_MAX_BULK_LEN", value: "BYTES",
        default: Some("536870912"), change: Runtime,
        help: "Largest bulk string in a request, in bytes.",
        show: |c| c.proto_max_bulk_len.to_string(),
    }
    "client-query-buffer-limit" {
        setting: client_query_buffer_limit: u64, env: "FLOCKD_CLIENT_QUERY_BUFFER_LIMIT",
        value: "BYTES",
        default: Some("1073741824"), change: Runtime,
        help: "Most bytes buffered for one client's unparsed input.",
        show: |c| c.client_query_buffer_limit.to_string(),
    }
    "max-args" {
        setting: max_args: u64, env: "FLOCKD_MAX_ARGS", value: "N",
        default: Some("1048576"), change: Runtime,
        help: "Most arguments in one command.",
        show: |c| c.max_args.to_string(),
    }
    "max-inline-len" {
        setting: max_inline_len: u64, env: "FLOCKD_MAX_INLINE_LEN", value: "BYTES",
        default: Some("65536"), change: Runtime,
        help: "Longest inline command line, in bytes.",
        show: |c| c.max_inline_len.to_string(),
    }
    "auto-aof-rewrite-min-size" {
        setting: auto_aof_rewrite_min_size: u64, env: "FLOCKD_AUTO_AOF_REWRITE_MIN_SIZE",
        value: "BYTES",
        default: Some("67108864"), change: Runtime,
        help: "Rewrite the AOF automatically only once it is at least this big.",
        show: |c| c.auto_aof_rewrite_min_size.to_string(),
    }
    "auto-aof-rewrite-percentage" {
        setting: auto_aof_rewrite_percentage: u64, env: "FLOCKD_AUTO_AOF_REWRITE_PERCENTAGE",
        value: "PCT",
        default: Some("100"), change: Runtime,
        help: "Rewrite the AOF when it grew by this percentage since the last rewrite; 0 disables.",
        show: |c| c.auto_aof_rewrite_percentage.to_string(),
    }
    "shutdown-timeout-ms" {
        setting: shutdown_timeout_ms: u64, env: "FLOCKD_SHUTDOWN_TIMEOUT_MS", value: "MS",
        default: Some("10000"), change: Runtime,
        help: "How long a shutdown waits for connections to finish their command in flight.",
        show: |c| c.shutdown_timeout_ms.to_string(),
    }
    "worker-threads" {
        setting: worker_threads: u64, env: "FLOCKD_WORKER_THREADS", value: "N",
        default: Some("0"), change: Restart,
        help: "Tokio worker threads; 0 means one per core.",
        show: |c| c.worker_threads.to_string(),
    }
    "max-idle-names" {
        setting: max_idle_names: u64, env: "FLOCKD_MAX_IDLE_NAMES", value: "N",
        default: Some("1000000"), change: Runtime,
        help: "Most free lock names whose counters are kept individually; beyond it the least \
               recently used are forgotten and a global token floor keeps their next tokens \
               higher. 0: no bound.",
        show: |c| c.max_idle_names.to_string(),
    }
    "slowlog-log-slower-than" {
        setting: slowlog_log_slower_than: i64, env: "FLOCKD_SLOWLOG_LOG_SLOWER_THAN",
        value: "USEC", clap: (allow_negative_numbers = true),
        default: Some("10000"), change: Runtime,
        help: "Log commands that take at least this many microseconds in the slow log; -1: \
               none, 0: all.",
        show: |c| c.slowlog_log_slower_than.to_string(),
    }
    "slowlog-max-len" {
        setting: slowlog_max_len: u64, env: "FLOCKD_SLOWLOG_MAX_LEN", value: "N",
        default: Some("128"), change: Runtime,
        help: "Entries the slow log keeps.",
        show: |c| c.slowlog_max_len.to_string(),
    }
    "latency-monitor-threshold" {
        setting: latency_monitor_threshold: u64, env: "FLOCKD_LATENCY_MONITOR_THRESHOLD",
        value: "MS",
        default: Some("0"), change: Runtime,
        help: "Record commands that take at least this many ms as latency events (LATENCY); 0: \
               off.",
        show: |c| c.latency_monitor_threshold.to_string(),
    }
    "metrics-port" {
        setting: metrics_port: u32, env: "FLOCKD_METRICS_PORT", value: "N",
        default: None, change: Restart,
        help: "HTTP port for /metrics (Prometheus), /livez and /readyz; unset: off; 0 picks a \
               free one (the \"metrics on\" log line names it).",
        show: |c| port_text(c.metrics_port),
    }
    "metrics-bind" {
        setting: metrics_bind: String, env: "FLOCKD_METRICS_BIND", value: "ADDR",
        default: None, change: Restart,
        help: "Address of the metrics port [default: bind].",
        show: |c| c.metrics_bind.to_string(),
    }
    "console" {
        setting: console: String, env: "FLOCKD_CONSOLE", value: "yes|no",
        default: Some("yes"), change: Runtime,
        help: "yes: the metrics port serves the console page at / (and its /console/api/...); \
               no.",
        show: |c| yes_no(c.console),
    }
    "hot-locks-capacity" {
        setting: hot_locks_capacity: u64, env: "FLOCKD_HOT_LOCKS_CAPACITY", value: "N",
        default: Some("1024"), change: Restart,
        help: "Lock names FLOCK.HOT tracks (per ten seconds; bounds its memory).",
        show: |c| c.hot_locks_capacity.to_string(),
    }
    "notify-flock-events" {
        setting: notify_flock_events: String, env: "FLOCKD_NOTIFY_FLOCK_EVENTS",
        value: "on|off",
        default: Some("on"), change: Runtime,
        help: "on: publish lock events on `__flock__:<name>` and `__flockevent__:<event>`; off.",
        show: |c| if c.notify_flock_events { "on" } else { "off" }.to_string(),
    }
    "client-output-buffer-limit-pubsub" {
        setting: client_output_buffer_limit_pubsub: u64,
        env: "FLOCKD_CLIENT_OUTPUT_BUFFER_LIMIT_PUBSUB", value: "BYTES",
        default: Some("33554432"), change: Runtime,
        help: "Bytes of messages a subscriber may have waiting before it is disconnected.",
        show: |c| c.client_output_buffer_limit_pubsub.to_string(),
    }
    "aclfile" {
        setting: aclfile: PathBuf, env: "FLOCKD_ACLFILE", value: "FILE",
        default: None, change: Restart,
        help: "Users file in Redis's ACL format (`user alice on >secret ~orders:* +@flock`), \
               read at start and by ACL LOAD, written by ACL SAVE.",
        show: |c| path_text(&c.aclfile),
    }
    "node-id" {
        setting: node_id: u64, env: "FLOCKD_NODE_ID", value: "ID",
        default: None, change: Restart,
        help: "This node's id in a cluster (1..=2^63-1); with cluster-peers, turns cluster mode \
               on.",
        show: |c| cluster_text(c, "node-id", |c| c.node_id.to_string()),
    }
    "cluster-peers" {
        setting: cluster_peers: String, env: "FLOCKD_CLUSTER_PEERS", value: "PEERS",
        default: None, change: Restart,
        help: "The cluster's members: id=host:port@cport,... (@cport defaults to port + 10000).",
        show: |c| cluster_text(c, "cluster-peers", ClusterConfig::peers_text),
    }
    "cluster-heartbeat-ms" {
        setting: cluster_heartbeat_ms: u64, env: "FLOCKD_CLUSTER_HEARTBEAT_MS", value: "MS",
        default: Some("100"), change: Restart,
        help: "Milliseconds between the leader's heartbeats.",
        show: |c| cluster_text(c, "cluster-heartbeat-ms", |c| c.heartbeat_ms.to_string()),
    }
    "cluster-election-timeout-ms" {
        setting: cluster_election_timeout_ms: u64, env: "FLOCKD_CLUSTER_ELECTION_TIMEOUT_MS",
        value: "MS",
        default: Some("500"), change: Restart,
        help: "A follower that hears no leader for a random time between this and twice this \
               calls an election.",
        show: |c| {
            cluster_text(c, "cluster-election-timeout-ms", |c| {
                c.election_timeout_ms.to_string()
            })
        },
    }
    "cluster-wait-leader-ms" {
        setting: cluster_wait_leader_ms: u64, env: "FLOCKD_CLUSTER_WAIT_LEADER_MS", value: "MS",
        default: Some("3000"), change: Restart,
        help: "How long a command waits for a leader to commit it before -CLUSTERDOWN.",
        show: |c| cluster_text(c, "cluster-wait-leader-ms", |c| c.wait_leader_ms.to_string()),
    }
    "cluster-groups" {
        setting: cluster_groups: u64, env: "FLOCKD_CLUSTER_GROUPS", value: "G",
        default: Some("1"), change: Restart,
        help: "Raft groups the 16384 slots are spread over (1..=64), fixed when the cluster is \
               created: each group has its own leader, so G groups take writes on up to G nodes \
               at once. 1 (the default) is one group.",
        show: |c| cluster_text(c, "cluster-groups", |c| c.groups.to_string()),
    }
    "cluster-redirect" {
        setting: cluster_redirect: String, env: "FLOCKD_CLUSTER_REDIRECT", value: "yes|no",
        default: Some("no"), change: Runtime,
        help: "yes: a command for a name this node does not lead is answered -MOVED slot \
               host:port (the leader's), as Redis Cluster; no (the default): it is forwarded.",
        show: |c| yes_no(c.cluster_redirect),
    }
    "tls-cluster" {
        setting: tls_cluster: String, env: "FLOCKD_TLS_CLUSTER", value: "yes|no",
        default: Some("no"), change: Restart,
        help: "yes: the cluster port speaks TLS both ways (mutual), with tls-cert-file, \
               tls-key-file and tls-ca-cert-file; no (the default).",
        show: |c| yes_no(c.cluster.as_ref().is_some_and(|c| c.tls)),
    }
    "sentinel-master-name" {
        setting: sentinel_master_name: String, env: "FLOCKD_SENTINEL_MASTER_NAME",
        value: "NAME",
        default: Some("flockd"), change: Restart,
        help: "The master name SENTINEL get-master-addr-by-name and the others answer for.",
        show: |c| c.sentinel_master_name.clone(),
    }
    "sentinel-port" {
        setting: sentinel_port: u32, env: "FLOCKD_SENTINEL_PORT", value: "N",
        default: None, change: Restart,
        help: "A port where this node answers as a Sentinel, for clients that check ROLE on \
               their sentinels (redis-rs); unset: none; 0 picks a free one (the \"sentinel \
               port\" line names it).",
        show: |c| port_text(c.sentinel_port),
    }
    "tls-port" {
        setting: tls_port: u32, env: "FLOCKD_TLS_PORT", value: "N",
        default: None, change: Restart,
        help: "TLS port beside `port` (unset: no TLS; 0 picks a free one, the ready line names \
               it).",
        show: |c| port_text(c.tls_port),
    }
    "tls-only" {
        setting: tls_only: String, env: "FLOCKD_TLS_ONLY", value: "yes|no",
        default: Some("no"), change: Restart,
        help: "yes: only the TLS port listens.",
        show: |c| yes_no(c.tls_only),
    }
    "tls-cert-file" {
        setting: tls_cert_file: PathBuf, env: "FLOCKD_TLS_CERT_FILE", value: "FILE",
        default: None, change: Runtime,
        help: "The server's certificate chain (PEM).",
        show: |c| path_text(&c.tls_cert_file),
    }
    "tls-key-file" {
        setting: tls_key_file: PathBuf, env: "FLOCKD_TLS_KEY_FILE", value: "FILE",
        default: None, change: Runtime,
        help: "The server's private key (PEM).",
        show: |c| path_text(&c.tls_key_file),
    }
    "tls-ca-cert-file" {
        setting: tls_ca_cert_file: PathBuf, env: "FLOCKD_TLS_CA_CERT_FILE", value: "FILE",
        default: None, change: Runtime,
        help: "CA certificates that sign client certificates (PEM).",
        show: |c| path_text(&c.tls_ca_cert_file),
    }
    "tls-auth-clients" {
        setting: tls_auth_clients: String, env: "FLOCKD_TLS_AUTH_CLIENTS",
        value: "yes|no|optional",
        default: None, change: Runtime,
        help: "yes: clients must present a certificate signed by the CA (the default with a \
               CA); no; optional.",
        show: |c| c.tls_auth_clients.as_str().to_string(),
    }
    "tls-protocols" {
        setting: tls_protocols: String, env: "FLOCKD_TLS_PROTOCOLS", value: "VERSIONS",
        default: Some("TLSv1.2 TLSv1.3"), change: Runtime,
        help: "Protocol versions offered: \"TLSv1.2 TLSv1.3\" (default), or one of them.",
        show: |c| {
            c.tls_protocols
                .iter()
                .map(|p| p.as_str())
                .collect::<Vec<_>>()
                .join(" ")
        },
    }
    "databases" {
        default: Some("1"), change: Restart,
        help: "Redis's key, always 1: flockd has one keyspace.",
        show: |_| "1".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::Path;

    use clap::CommandFactory;

    use super::*;
    use crate::config::Cli;

    fn repo_file(name: &str) -> String {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(name);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    fn file_keys() -> impl Iterator<Item = &'static Parameter> {
        PARAMETERS.iter().filter(|k| k.in_file())
    }

    #[test]
    fn names_variables_and_flags_follow_one_rule() {
        let mut seen = Vec::new();
        for key in PARAMETERS {
            assert!(!seen.contains(&key.name), "{} declared twice", key.name);
            seen.push(key.name);
            assert!(!key.help.is_empty(), "{} has no help", key.name);
        }
        let cli = Cli::command();
        for key in file_keys() {
            let env = format!("FLOCKD_{}", key.name.to_ascii_uppercase().replace('-', "_"));
            assert_eq!(key.env, Some(env.as_str()), "{}", key.name);
            let flag = format!("--{}", key.name);
            let arg = cli
                .get_arguments()
                .find(|a| a.get_long().map(|l| format!("--{l}")) == Some(flag.clone()))
                .unwrap_or_else(|| panic!("no flag {flag}"));
            assert_eq!(
                arg.get_env().and_then(|e| e.to_str()),
                Some(env.as_str()),
                "{flag}"
            );
        }
    }

    #[test]
    fn config_get_shows_every_key_and_its_default() {
        let config = Config::default();
        let entries = config.entries();
        let names: Vec<_> = entries.iter().map(|(k, _)| *k).collect();
        let table: Vec<_> = PARAMETERS.iter().map(|k| k.name).collect();
        assert_eq!(names, table);
        for (key, (name, shown)) in PARAMETERS.iter().zip(&entries) {
            if let Some(default) = key.default {
                assert_eq!(shown, default, "{name}");
            }
        }
        assert_eq!(
            config.client_output_buffer_limit_pubsub,
            crate::services::pubsub::DEFAULT_OUTPUT_LIMIT
        );
    }

    /// `key = value` lines of the shipped file, commented out (`# key = value`) or not.
    fn shipped_file_lines() -> BTreeMap<String, String> {
        let text = repo_file("config/flockd.toml");
        let mut lines = BTreeMap::new();
        for line in text.lines() {
            let line = line.strip_prefix("# ").unwrap_or(line);
            let Some((key, value)) = line.split_once(" = ") else {
                continue;
            };
            if key.is_empty()
                || !key
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            {
                continue;
            }
            let value = match value.parse::<toml::Value>() {
                Ok(toml::Value::String(s)) => s,
                Ok(other) => other.to_string(),
                Err(e) => panic!("config/flockd.toml: {key} = {value}: {e}"),
            };
            lines.insert(key.to_string(), value);
        }
        lines
    }

    #[test]
    fn the_shipped_config_file_lists_every_key_with_its_default() {
        let lines = shipped_file_lines();
        for key in file_keys() {
            let value = lines
                .get(key.name)
                .unwrap_or_else(|| panic!("config/flockd.toml lacks {}", key.name));
            if let Some(default) = key.default {
                assert_eq!(value, default, "config/flockd.toml: {}", key.name);
            }
        }
        for name in lines.keys() {
            assert!(
                parameter(name).is_some_and(|k| k.in_file()),
                "config/flockd.toml names {name}, which is no key"
            );
        }
    }

    /// The README's configuration table: key -> (variable column, default column).
    fn readme_rows() -> BTreeMap<String, (String, String)> {
        let text = repo_file("README.md");
        let section = text
            .split("\n## Configuration\n")
            .nth(1)
            .expect("README.md has a Configuration section");
        let mut rows = BTreeMap::new();
        for line in section.lines().skip_while(|l| !l.starts_with('|')) {
            if !line.starts_with('|') {
                break;
            }
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            if cells.len() < 5 || !cells[1].starts_with('`') {
                continue;
            }
            for name in cells[1].split(", ") {
                rows.insert(
                    name.trim_matches('`').to_string(),
                    (cells[2].to_string(), cells[3].to_string()),
                );
            }
        }
        rows
    }

    #[test]
    fn the_readme_table_lists_every_key_with_its_variable_and_default() {
        let rows = readme_rows();
        for key in file_keys() {
            let (variable, default) = rows
                .get(key.name)
                .unwrap_or_else(|| panic!("README.md's configuration table lacks {}", key.name));
            let env = format!("`{}`", key.env.unwrap());
            assert!(
                variable.split(", ").any(|v| v == env),
                "README.md: {} has variable {variable}, not {env}",
                key.name
            );
            if let Some(text) = key.default.filter(|d| !d.is_empty()) {
                assert!(
                    default.contains(&format!("`{text}`")),
                    "README.md: {} has default {default}, not `{text}`",
                    key.name
                );
            }
        }
        for name in rows.keys() {
            assert!(
                parameter(name).is_some_and(|k| k.in_file()),
                "README.md's configuration table names {name}, which is no key"
            );
        }
    }
}
