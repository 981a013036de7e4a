//! The configuration a daemon runs with: every key's value after the layers are merged and
//! checked (`Settings::validate` builds it; `parameters.rs` says how each is read and shown).

use std::net::IpAddr;
use std::path::PathBuf;

use clap::ValueEnum;
use flockd_aof::FsyncPolicy;
use flockd_tls::{AuthClients, Protocol, TlsSettings};
use serde::Deserialize;

/// Everything the daemon runs with, after layering and validation.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub bind: IpAddr,
    pub port: u16,
    pub dir: PathBuf,
    pub appendfilename: String,
    pub appendfsync: FsyncPolicy,
    pub requirepass: Option<String>,
    pub maxclients: usize,
    pub log_format: LogFormat,
    pub log_level: String,
    pub max_name_bytes: usize,
    pub max_lease_ms: u64,
    pub max_wait_ms: u64,
    pub proto_max_bulk_len: usize,
    pub client_query_buffer_limit: usize,
    pub max_args: usize,
    pub max_inline_len: usize,
    pub auto_aof_rewrite_min_size: u64,
    pub auto_aof_rewrite_percentage: u64,
    pub shutdown_timeout_ms: u64,
    pub worker_threads: usize,
    pub max_idle_names: usize,
    /// Commands that take at least this many microseconds go to the slow log; -1: none, 0: all.
    pub slowlog_log_slower_than: i64,
    /// Entries the slow log keeps (the oldest are dropped).
    pub slowlog_max_len: usize,
    /// Commands that take at least this many milliseconds are latency events; 0: off.
    pub latency_monitor_threshold: u64,
    /// The file given with `--config` / FLOCKD_CONFIG, which CONFIG REWRITE writes.
    pub config_file: Option<PathBuf>,
    /// The HTTP port of /metrics, /livez and /readyz; `None`: off, 0: a free port.
    pub metrics_port: Option<u16>,
    /// The address of the metrics port (default: `bind`).
    pub metrics_bind: IpAddr,
    /// The console page on the metrics port (`GET /` and `/console/api/...`).
    pub console: bool,
    /// A cluster node answers a command for a name it does not lead with `-MOVED` (Redis
    /// Cluster's redirection) rather than forwarding it.
    pub cluster_redirect: bool,
    /// Lock names FLOCK.HOT tracks per ten seconds (its memory bound).
    pub hot_locks_capacity: usize,
    /// Lock events published on `__flock__:<name>` and `__flockevent__:<event>`.
    pub notify_flock_events: bool,
    /// A subscriber with more than this many bytes of messages waiting is disconnected.
    pub client_output_buffer_limit_pubsub: usize,
    /// The TLS port beside `port`; `None`: no TLS, 0: a free port.
    pub tls_port: Option<u16>,
    /// Only the TLS port listens (Redis says `port 0`; in flockd 0 picks a free port).
    pub tls_only: bool,
    pub tls_cert_file: Option<PathBuf>,
    pub tls_key_file: Option<PathBuf>,
    pub tls_ca_cert_file: Option<PathBuf>,
    /// Resolved: `yes` when a CA is given and nothing was said, `no` without a CA.
    pub tls_auth_clients: AuthClients,
    pub tls_protocols: Vec<Protocol>,
    /// The users file (Redis's format) read at start and by ACL LOAD, written by ACL SAVE.
    pub aclfile: Option<PathBuf>,
    /// Cluster mode (`node-id` and `cluster-peers` given); `None`: the single node.
    pub cluster: Option<ClusterConfig>,
    /// The master name SENTINEL commands answer for (Sentinel-aware clients ask by it).
    pub sentinel_master_name: String,
    /// A port where this node is a Sentinel (ROLE says `sentinel`); `None`: none, 0: a free one.
    pub sentinel_port: Option<u16>,
}

/// The cluster keys of `cluster.md`.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterConfig {
    pub node_id: u64,
    pub peers: Vec<flockd_raft::Peer>,
    pub heartbeat_ms: u64,
    pub election_timeout_ms: u64,
    pub wait_leader_ms: u64,
    /// `cluster-groups`: the Raft groups the slots are spread over.
    pub groups: u16,
    /// `tls-cluster`: the cluster port speaks TLS both ways, with the tls-* files.
    pub tls: bool,
}

impl ClusterConfig {
    /// `cluster-peers` as written (`id=host:port@cport,...`).
    pub fn peers_text(&self) -> String {
        self.peers
            .iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join(",")
    }
}

impl Config {
    /// The TLS port's settings, when there is one.
    /// The cluster port's TLS files, with `tls-cluster yes` (checked to be there at load).
    pub fn cluster_tls_settings(&self) -> Option<TlsSettings> {
        if !self.cluster.as_ref()?.tls {
            return None;
        }
        Some(TlsSettings {
            cert_file: self.tls_cert_file.clone()?,
            key_file: self.tls_key_file.clone()?,
            ca_cert_file: self.tls_ca_cert_file.clone(),
            auth_clients: AuthClients::Yes,
            protocols: self.tls_protocols.clone(),
        })
    }

    pub fn tls_settings(&self) -> Option<TlsSettings> {
        self.tls_port?;
        Some(TlsSettings {
            cert_file: self.tls_cert_file.clone()?,
            key_file: self.tls_key_file.clone()?,
            ca_cert_file: self.tls_ca_cert_file.clone(),
            auth_clients: self.tls_auth_clients,
            protocols: self.tls_protocols.clone(),
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

impl LogFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        }
    }
}
