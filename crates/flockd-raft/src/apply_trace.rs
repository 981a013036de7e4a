//! Test-only: a line for every entry a group applies (its log id, who proposed it, its ops and
//! their results) and for every snapshot it loads, installs or builds, in `applied.trace` in
//! the group's dir. When a fault run finds the replicas' states different at one applied index,
//! the fault harness compares these files and shows the first index where the nodes applied
//! different entries or got different results: the digest only says that they differ.
//!
//! Off unless the test-only `FLOCKD_TEST_APPLY_TRACE` is set. A line is one write, made at
//! once: a node killed with SIGKILL keeps every line it wrote.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

use parking_lot::Mutex;

use crate::types::LogId;

/// The file, in a group's dir.
pub const TRACE_FILE: &str = "applied.trace";

pub struct ApplyTrace {
    file: Mutex<File>,
}

impl ApplyTrace {
    /// Opens (appends to) the trace of the group whose dir is `dir`.
    pub fn open(dir: &Path) -> io::Result<ApplyTrace> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(TRACE_FILE))?;
        Ok(ApplyTrace {
            file: Mutex::new(file),
        })
    }

    /// Writes one line; a failed write is dropped (a test aid must not stop the node).
    pub fn line(&self, line: fmt::Arguments<'_>) {
        let mut text = line.to_string();
        text.push('\n');
        let _ = self.file.lock().write_all(text.as_bytes());
    }
}

/// A log id as the trace shows it: `index term.node`.
pub struct Position<'a>(pub &'a LogId);

impl fmt::Display for Position<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let id = self.0;
        write!(
            f,
            "{} {}.{}",
            id.index, id.leader_id.term, id.leader_id.node_id
        )
    }
}

/// An optional log id's index, `-` for none.
pub struct Index(pub Option<LogId>);

impl fmt::Display for Index {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(id) => write!(f, "{}", id.index),
            None => f.write_str("-"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::LeaderId;

    #[test]
    fn lines_go_to_the_groups_file_one_each() {
        let dir = std::env::temp_dir().join(format!("flockd-trace-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let id = LogId {
            leader_id: LeaderId {
                term: 3,
                node_id: 2,
            },
            index: 3049,
        };
        let trace = ApplyTrace::open(&dir).unwrap();
        trace.line(format_args!("APPLY {} blank", Position(&id)));
        trace.line(format_args!("START {}", Index(None)));
        drop(trace);
        let again = ApplyTrace::open(&dir).unwrap();
        again.line(format_args!("BUILD {}", Index(Some(id))));
        let text = std::fs::read_to_string(dir.join(TRACE_FILE)).unwrap();
        assert_eq!(text, "APPLY 3049 3.2 blank\nSTART -\nBUILD 3049\n");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
