//! Why a file of records could not be read, repaired or written.

use std::path::PathBuf;

#[derive(thiserror::Error, Debug)]
pub enum FileError {
    /// A file operation failed (open, read, truncate, sync, rename...).
    #[error("I/O error on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file is damaged somewhere other than its tail (or is not a file of records at all):
    /// replaying or repairing it would lose records that were acknowledged, so it is refused.
    #[error("Bad record in {path} at byte offset {offset}: {reason}")]
    Corrupt {
        path: PathBuf,
        offset: u64,
        reason: String,
    },
    /// A snapshot file could not be written.
    #[error("cannot write the snapshot {path}: {reason}")]
    Snapshot { path: PathBuf, reason: String },
}

impl FileError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        FileError::Io {
            path: path.into(),
            source,
        }
    }
}
