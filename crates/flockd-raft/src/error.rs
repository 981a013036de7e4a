//! What can go wrong starting a node or changing its membership. A proposal's errors are
//! `flockd_log::ProposeError`, the same for both logs.

use std::path::PathBuf;

/// Why a node could not start or change the membership.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("bad cluster peer {peer:?}: {why}")]
    BadPeer { peer: String, why: String },
    #[error("cannot listen for peers on {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    #[error("the snapshot {path} cannot be loaded: {why}")]
    Snapshot { path: PathBuf, why: String },
    #[error("seeding: {0}")]
    Seed(String),
    #[error("raft: {0}")]
    Raft(String),
    /// The dir was made with another `cluster-groups`, or the setting is out of range.
    #[error("{0}")]
    Groups(String),
}
