//! Users as the server runs them: the [`Acl`] behind a lock that only ACL commands, AUTH and
//! CONFIG SET requirepass take; a generation number that tells connections to pick up their
//! user again after a change (their permission checks read their own copy, no lock); and the
//! ACL LOG. What each command needs of a user is the command table's business
//! (`crate::commands::permissions`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use flockd_acl::{Acl, AclLog, Denial, User};
use parking_lot::{Mutex, RwLock};

pub struct AclState {
    acl: RwLock<Acl>,
    /// Bumped by every change; a connection whose copy is older fetches its user again.
    generation: AtomicU64,
    /// ACL LOG: the refusals, newest first.
    pub denials: Mutex<AclLog>,
}

impl AclState {
    pub fn new(acl: Acl) -> AclState {
        AclState {
            acl: RwLock::new(acl),
            generation: AtomicU64::new(1),
            denials: Mutex::new(AclLog::default()),
        }
    }

    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    pub fn read(&self) -> parking_lot::RwLockReadGuard<'_, Acl> {
        self.acl.read()
    }

    /// Changes the users; every connection sees the change before its next command.
    pub fn change<T>(&self, f: impl FnOnce(&mut Acl) -> T) -> T {
        let mut acl = self.acl.write();
        let out = f(&mut acl);
        self.generation.fetch_add(1, Ordering::AcqRel);
        out
    }

    pub fn user(&self, name: &str) -> Option<Arc<User>> {
        self.acl.read().user(name)
    }

    /// An ACL LOG entry for `username` (the one tried, for a failed AUTH), refused in
    /// `context` (`toplevel` or `multi`), by the client `client` describes.
    pub fn record(
        &self,
        username: &str,
        reason: Denial,
        object: &str,
        context: &'static str,
        client: String,
    ) {
        self.denials
            .lock()
            .record(reason, context, object, username, client, unix_ms());
    }
}

/// Wall-clock time for ACL LOG, in Unix milliseconds.
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
