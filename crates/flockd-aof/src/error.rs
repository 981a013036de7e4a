//! The crate's typed errors.

use std::path::PathBuf;

#[derive(thiserror::Error, Debug)]
pub enum AofError {
    /// A file operation failed (open, read, truncate, sync, rename...).
    #[error("I/O error on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Reading, checking or writing the file's records failed (a damaged middle, or the
    /// snapshot of a rewrite).
    #[error(transparent)]
    File(#[from] flockd_log::FileError),
    /// The writer is in the failed state: the last write or fsync failed and a rewrite has not
    /// recovered yet. The server answers state changes with `-MISCONF` meanwhile; the message
    /// reads like Redis's (`MISCONF Errors writing to the AOF file: ...`).
    #[error("Errors writing to the AOF file: {0}")]
    WriteFailed(String),
    /// The AOF was shut down: the record will never be written.
    #[error("the AOF is shutting down")]
    ShuttingDown,
    /// A file of an older format could not be rewritten in the current one at start.
    #[error("cannot upgrade {path} to the current AOF format: {reason}")]
    Upgrade { path: PathBuf, reason: String },
    /// BGREWRITEAOF while a rewrite runs.
    #[error("Background append only file rewriting already in progress")]
    RewriteInProgress,
}

impl AofError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        AofError::Io {
            path: path.into(),
            source,
        }
    }
}

/// An `appendfsync` value other than `always`, `everysec` or `no`.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
#[error("invalid appendfsync value '{0}': expected always, everysec or no")]
pub struct ParseFsyncPolicyError(pub String);
