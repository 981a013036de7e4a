//! Server-wide counters for INFO stats and commandstats.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::commands::TABLE;

#[derive(Default)]
pub struct CommandStat {
    pub calls: AtomicU64,
    pub usec: AtomicU64,
    pub rejected: AtomicU64,
    pub failed: AtomicU64,
}

pub struct ServerStats {
    pub connections_received: AtomicU64,
    pub rejected_connections: AtomicU64,
    pub commands_processed: AtomicU64,
    pub protocol_errors: AtomicU64,
    pub net_input_bytes: AtomicU64,
    pub net_output_bytes: AtomicU64,
    pub unknown_commands: AtomicU64,
    /// Idle lock names forgotten to stay within `max-idle-names`.
    pub names_forgotten: AtomicU64,
    pub commands: Vec<CommandStat>,
}

impl Default for ServerStats {
    fn default() -> Self {
        ServerStats {
            connections_received: AtomicU64::new(0),
            rejected_connections: AtomicU64::new(0),
            commands_processed: AtomicU64::new(0),
            protocol_errors: AtomicU64::new(0),
            net_input_bytes: AtomicU64::new(0),
            net_output_bytes: AtomicU64::new(0),
            unknown_commands: AtomicU64::new(0),
            names_forgotten: AtomicU64::new(0),
            commands: TABLE.iter().map(|_| CommandStat::default()).collect(),
        }
    }
}

pub fn bump(counter: &AtomicU64, by: u64) {
    counter.fetch_add(by, Ordering::Relaxed);
}

pub fn read(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}
