//! Errors of lock operations, as results of applying an op (not failures of the machine).

use bytes::Bytes;

#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum LockError {
    /// The token does not belong to the current holding of the lock (never held, released,
    /// expired, or held by someone else). The reply layer puts the RESP code (`NOTOWNER`) in
    /// front of this text.
    #[error("lock '{}' is not held by token {token}", String::from_utf8_lossy(.name))]
    NotOwner { name: Bytes, token: u64 },
}
