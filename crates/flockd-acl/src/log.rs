//! ACL LOG: the refusals, newest first, as Redis keeps them: the same refusal (reason, context,
//! object, user) within a minute counts up one entry instead of adding another, and at most
//! `max_len` entries are kept. Times are passed in (Unix ms), never read here.

use std::collections::VecDeque;

/// What was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Denial {
    Command,
    Key,
    Channel,
    Auth,
}

impl Denial {
    pub fn as_str(self) -> &'static str {
        match self {
            Denial::Command => "command",
            Denial::Key => "key",
            Denial::Channel => "channel",
            Denial::Auth => "auth",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogEntry {
    pub count: u64,
    pub reason: Denial,
    /// `toplevel` or `multi`.
    pub context: &'static str,
    /// The command, key or channel refused; for `auth`, `AUTH`.
    pub object: String,
    pub username: String,
    pub client_info: String,
    pub entry_id: u64,
    pub created_ms: u64,
    pub updated_ms: u64,
}

/// Refusals repeat into one entry for this long.
const GROUP_MS: u64 = 60_000;

#[derive(Debug)]
pub struct AclLog {
    entries: VecDeque<LogEntry>,
    next_id: u64,
    pub max_len: usize,
}

impl Default for AclLog {
    fn default() -> Self {
        AclLog {
            entries: VecDeque::new(),
            next_id: 0,
            max_len: 128,
        }
    }
}

impl AclLog {
    pub fn record(
        &mut self,
        reason: Denial,
        context: &'static str,
        object: &str,
        username: &str,
        client_info: String,
        now_ms: u64,
    ) {
        if let Some(e) = self.entries.iter_mut().find(|e| {
            e.reason == reason
                && e.context == context
                && e.object == object
                && e.username == username
                && now_ms.saturating_sub(e.updated_ms) < GROUP_MS
        }) {
            e.count += 1;
            e.updated_ms = now_ms;
            e.client_info = client_info;
            return;
        }
        self.entries.push_front(LogEntry {
            count: 1,
            reason,
            context,
            object: object.to_string(),
            username: username.to_string(),
            client_info,
            entry_id: self.next_id,
            created_ms: now_ms,
            updated_ms: now_ms,
        });
        self.next_id += 1;
        self.entries.truncate(self.max_len);
    }

    /// The newest `count` entries (all with `None`).
    pub fn newest(&self, count: Option<usize>) -> Vec<LogEntry> {
        self.entries
            .iter()
            .take(count.unwrap_or(usize::MAX))
            .cloned()
            .collect()
    }

    pub fn reset(&mut self) {
        self.entries.clear();
    }
}
