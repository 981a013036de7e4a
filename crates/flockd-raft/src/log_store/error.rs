//! What can go wrong with the segment log. openraft takes `io::Error`s, so each converts into
//! one at that boundary, keeping its message.

use std::io;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("the Raft log's directory {dir} is in use by another process")]
    Locked { dir: PathBuf },
    #[error("the Raft log is closed")]
    Closed,
    #[error("the Raft log failed to write or sync earlier ({0}); nothing more is written")]
    Failed(String),
    #[error("entry {index} cannot be appended: the log holds {first} up to before {next}")]
    Misplaced { index: u64, first: u64, next: u64 },
    #[error("{path}: not a Raft log segment (its header is not FLOCKRL1)")]
    NotASegment { path: PathBuf },
    #[error("{path}: damaged record at byte {offset} ({reason}), and it is not the last segment")]
    Damaged {
        path: PathBuf,
        offset: u64,
        reason: String,
    },
    #[error("{dir}: the segments holding entries up to {index} are gone, and no purge covers them")]
    MissingSegments { dir: PathBuf, index: u64 },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(transparent)]
    Plain(#[from] io::Error),
}

impl From<LogError> for io::Error {
    fn from(e: LogError) -> io::Error {
        let kind = match &e {
            LogError::Locked { .. } => io::ErrorKind::WouldBlock,
            LogError::Closed => io::ErrorKind::NotConnected,
            LogError::Misplaced { .. }
            | LogError::NotASegment { .. }
            | LogError::Damaged { .. }
            | LogError::MissingSegments { .. } => io::ErrorKind::InvalidData,
            LogError::Io { source, .. } | LogError::Plain(source) => source.kind(),
            LogError::Failed(_) => io::ErrorKind::Other,
        };
        io::Error::new(kind, e.to_string())
    }
}

/// Names the file an I/O error was about.
pub fn at(path: &std::path::Path) -> impl FnOnce(io::Error) -> LogError + '_ {
    move |source| LogError::Io {
        path: path.to_owned(),
        source,
    }
}
