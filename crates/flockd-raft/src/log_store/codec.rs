//! An entry's payload in its stored bytes (postcard), encoded once on append and decoded when
//! read (replication, apply).

use std::io;

use crate::types::{EntryPayload, LogId, RaftEntry};

pub fn encode_payload(payload: &EntryPayload) -> io::Result<Vec<u8>> {
    postcard::to_allocvec(payload).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

pub fn decode_entry(log_id: LogId, payload: &[u8]) -> io::Result<RaftEntry> {
    let payload: EntryPayload = postcard::from_bytes(payload).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("log entry {}: {e}", log_id.index),
        )
    })?;
    Ok(RaftEntry { log_id, payload })
}
