//! The registry of connected clients, for CLIENT LIST/INFO/KILL, INFO clients and maxclients.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use bytes::Bytes;
use dashmap::DashMap;
use flockd_proto::ProtocolVersion;
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

/// Names a client set for itself (CLIENT SETNAME / SETINFO, HELLO SETNAME).
#[derive(Default, Clone)]
pub struct ClientNames {
    pub name: Option<Bytes>,
    pub lib_name: Option<Bytes>,
    pub lib_ver: Option<Bytes>,
    /// The user it authenticated as (`default` when `None`).
    pub user: Option<Bytes>,
}

pub struct ClientHandle {
    pub id: u64,
    pub addr: SocketAddr,
    pub laddr: SocketAddr,
    pub created: Instant,
    pub names: Mutex<ClientNames>,
    /// Milliseconds since `created` of the last command, for `idle=`.
    pub last_command_ms: AtomicU64,
    /// Table index + 1 of the last command (0: none yet), for `cmd=`.
    pub last_command: AtomicUsize,
    /// 2 or 3: the connection's protocol, kept here alone (the connection reads it through
    /// [`ClientHandle::protocol`], CLIENT LIST as `resp=`).
    resp: AtomicUsize,
    /// Cancelled by CLIENT KILL.
    pub kill: CancellationToken,
    pub blocked: std::sync::atomic::AtomicBool,
}

impl ClientHandle {
    pub fn protocol(&self) -> ProtocolVersion {
        if self.resp.load(Ordering::Relaxed) == 3 {
            ProtocolVersion::Resp3
        } else {
            ProtocolVersion::Resp2
        }
    }

    pub fn set_protocol(&self, protocol: ProtocolVersion) {
        let resp = match protocol {
            ProtocolVersion::Resp3 => 3,
            ProtocolVersion::Resp2 => 2,
        };
        self.resp.store(resp, Ordering::Relaxed);
    }

    /// The connection ran the command at `command_index` at `now` (the caller's clock reading,
    /// so a command costs one read of the clock, not one per bookkeeper).
    pub fn touch(&self, command_index: usize, now: std::time::Instant) {
        let age = now.saturating_duration_since(self.created);
        self.last_command_ms
            .store(age.as_millis() as u64, Ordering::Relaxed);
        self.last_command
            .store(command_index + 1, Ordering::Relaxed);
    }

    /// One line of CLIENT LIST, in Redis's field order (fields flockd has no notion of are 0).
    /// `command_name` names a command by its table index (the table lives with the commands).
    pub fn describe(&self, command_name: impl Fn(usize) -> &'static str) -> String {
        let names = self.names.lock().clone();
        let text = |b: &Option<Bytes>| {
            b.as_ref()
                .map(|b| flockd_proto::printable(b, 256))
                .unwrap_or_default()
        };
        let age = self.created.elapsed().as_secs();
        let idle = self.created.elapsed().as_millis() as u64
            - self
                .last_command_ms
                .load(Ordering::Relaxed)
                .min(age * 1000 + 999);
        let cmd = match self.last_command.load(Ordering::Relaxed) {
            0 => "NULL".to_string(),
            n => command_name(n - 1).to_string(),
        };
        let flags = if self.blocked.load(Ordering::Relaxed) {
            "b"
        } else {
            "N"
        };
        format!(
            "id={} addr={} laddr={} fd=0 name={} age={} idle={} flags={} db=0 sub=0 psub=0 ssub=0 multi=-1 watch=0 qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 events=r cmd={} user={} redir=-1 resp={} lib-name={} lib-ver={}",
            self.id,
            self.addr,
            self.laddr,
            text(&names.name),
            age,
            idle / 1000,
            flags,
            cmd,
            names
                .user
                .as_ref()
                .map_or("default".into(), |u| String::from_utf8_lossy(u)
                    .into_owned()),
            self.resp.load(Ordering::Relaxed),
            text(&names.lib_name),
            text(&names.lib_ver),
        )
    }
}

#[derive(Default)]
pub struct ClientRegistry {
    clients: DashMap<u64, Arc<ClientHandle>>,
    next_id: AtomicU64,
    connected: AtomicUsize,
    blocked: AtomicUsize,
}

impl ClientRegistry {
    /// Registers a client unless `max` are connected already.
    pub fn register(
        &self,
        addr: SocketAddr,
        laddr: SocketAddr,
        max: usize,
    ) -> Option<Arc<ClientHandle>> {
        let before = self.connected.fetch_add(1, Ordering::AcqRel);
        if before >= max {
            self.connected.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let handle = Arc::new(ClientHandle {
            id,
            addr,
            laddr,
            created: Instant::now(),
            names: Mutex::new(ClientNames::default()),
            last_command_ms: AtomicU64::new(0),
            last_command: AtomicUsize::new(0),
            resp: AtomicUsize::new(2),
            kill: CancellationToken::new(),
            blocked: Default::default(),
        });
        self.clients.insert(id, handle.clone());
        Some(handle)
    }

    pub fn unregister(&self, id: u64) {
        if self.clients.remove(&id).is_some() {
            self.connected.fetch_sub(1, Ordering::AcqRel);
        }
    }

    pub fn connected(&self) -> usize {
        self.connected.load(Ordering::Relaxed)
    }

    pub fn set_blocked(&self, handle: &ClientHandle, blocked: bool) {
        handle.blocked.store(blocked, Ordering::Relaxed);
        if blocked {
            self.blocked.fetch_add(1, Ordering::Relaxed);
        } else {
            self.blocked.fetch_sub(1, Ordering::Relaxed);
        }
    }

    pub fn blocked(&self) -> usize {
        self.blocked.load(Ordering::Relaxed)
    }

    /// Every client, oldest first.
    pub fn all(&self) -> Vec<Arc<ClientHandle>> {
        let mut all: Vec<_> = self.clients.iter().map(|e| e.value().clone()).collect();
        all.sort_by_key(|c| c.id);
        all
    }
}
