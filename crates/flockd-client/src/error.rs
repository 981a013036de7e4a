//! What can go wrong talking to flockd.

use crate::Lost;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The connection or the server failed the request (an error reply included).
    #[error("flockd: {0}")]
    Redis(#[from] redis::RedisError),
    /// A reply of a shape the command never gives: the peer is not flockd, or not this version.
    #[error("unexpected reply to {command}: {reply}")]
    UnexpectedReply {
        command: &'static str,
        reply: String,
    },
    /// The guard's lock is lost (or about to be): the request was not sent.
    #[error("the lock is lost: {0}")]
    Lost(Lost),
    /// Options that no server would take.
    #[error("bad lock options: {0}")]
    Options(&'static str),
}
