//! Command errors, each rendering to the text of a RESP error reply (code first, as Redis).

use std::borrow::Cow;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CommandError {
    #[error("ERR wrong number of arguments for '{0}' command")]
    WrongArity(Cow<'static, str>),
    #[error("ERR value is not an integer or out of range")]
    NotInteger,
    #[error("ERR invalid {what}: must be an integer from {min} to {max}")]
    OutOfRange {
        what: &'static str,
        min: u64,
        max: u64,
    },
    #[error("ERR invalid {what}: must be 1 to {max} bytes")]
    BadName { what: &'static str, max: usize },
    #[error("ERR syntax error")]
    Syntax,
    #[error("ERR SHARED and LIMIT cannot be combined, and each may be given once")]
    SharedWithLimit,
    #[error(
        "ERR cannot upgrade a shared holding to exclusive: release it first, or acquire exclusively from the start"
    )]
    CannotUpgrade,
    #[error("ERR Unknown client type '{0}'")]
    UnknownClientType(String),
    #[error("ERR invalid cursor")]
    InvalidCursor,
    #[error("ERR numnames is {0} but fewer than {0} names and a lease-ms follow")]
    NumNamesMismatch(u64),
    #[error("ERR lock name '{0}' is given twice: FLOCK.ACQUIREALL names must be distinct")]
    DuplicateName(String),
    #[error("ERR unknown option '{option}' for '{command}' (expected {expected})")]
    UnknownOption {
        command: &'static str,
        option: String,
        expected: &'static str,
    },
    #[error("ERR unknown subcommand '{sub}'. Try {command} HELP.")]
    UnknownSubcommand { command: &'static str, sub: String },
    #[error("NOTOWNER {0}")]
    NotOwner(#[from] flockd_core::LockError),
    /// A cluster command that cannot run (a bad node id, a single node).
    #[error("ERR {0}")]
    Cluster(String),
    /// Names (shard channels) of one command in different slots, on a cluster node: Redis
    /// Cluster's error and text.
    #[error("CROSSSLOT Keys in request don't hash to the same slot")]
    CrossSlot,
    /// A cluster node could not get the command committed (Redis Cluster's error code).
    #[error("CLUSTERDOWN {0}")]
    ClusterDown(String),
    #[error("MISCONF {0}")]
    Misconf(String),
    #[error("NOAUTH Authentication required.")]
    NoAuth,
    #[error("NOPERM User {user} has no permissions to run the '{command}' command")]
    NoPermCommand { user: String, command: String },
    #[error("NOPERM No permissions to access a key")]
    NoPermKey,
    #[error("NOPERM No permissions to access a channel")]
    NoPermChannel,
    /// The connection's user was deleted (ACL DELUSER, ACL LOAD): the connection is closed.
    #[error("ERR the user of this connection was deleted")]
    UserDeleted,
    #[error("ERR {0}")]
    Acl(#[from] flockd_acl::AclError),
    #[error(
        "ERR {0}. WARNING: ACL errors detected, no change to the previously active ACL rules was performed"
    )]
    AclLoad(flockd_acl::AclError),
    #[error(
        "ERR This flockd is not configured to use an ACL file. You may want to specify users via the ACL SETUSER command and then issue a CONFIG REWRITE (assuming you have a config file set) in order to store users in the config file."
    )]
    NoAclFile,
    #[error("ERR Unknown category '{0}'")]
    UnknownCategory(String),
    #[error("ERR {0}")]
    AclFileIo(String),
    /// The state machine answered an op with a result of another op: a bug, reported rather
    /// than panicking.
    #[error("ERR internal error: unexpected result {0}")]
    UnexpectedResult(String),
    #[error(
        "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?"
    )]
    NoPasswordConfigured,
    #[error("WRONGPASS invalid username-password pair or user is disabled.")]
    WrongPass,
    #[error("NOPROTO unsupported protocol version")]
    NoProto,
    #[error("ERR Protocol version is not an integer or out of range")]
    BadProtocolVersion,
    #[error("ERR Syntax error in HELLO option '{0}'")]
    HelloSyntax(String),
    #[error(
        "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time"
    )]
    HelloNoAuth,
    #[error("ERR Unrecognized option '{0}'")]
    UnrecognizedOption(String),
    #[error("ERR Invalid client ID")]
    InvalidClientId,
    #[error("ERR client-id should be greater than 0")]
    ClientIdNotPositive,
    #[error("ERR No such client")]
    NoSuchClient,
    #[error("ERR Client names cannot contain spaces, newlines or special characters.")]
    BadClientName,
    #[error("ERR DB index is out of range")]
    DbIndexOutOfRange,
    #[error("ERR No shutdown in progress.")]
    NoShutdownInProgress,
    #[error("ERR MULTI calls can not be nested")]
    NestedMulti,
    #[error("ERR EXEC without MULTI")]
    ExecWithoutMulti,
    #[error("ERR DISCARD without MULTI")]
    DiscardWithoutMulti,
    #[error("EXECABORT Transaction discarded because of previous errors.")]
    ExecAbort,
    #[error("ERR Command not allowed inside a transaction")]
    NotInMulti,
    #[error("ERR WATCH inside MULTI is not allowed")]
    WatchInsideMulti,
    #[error(
        "ERR WATCH is not supported by flockd: make a change conditional with a lock's token (FENCE.SET) or put it in one MULTI/EXEC, which applies atomically"
    )]
    WatchUnsupported,
    /// BGREWRITEAOF refused (one runs already, or the AOF is stopping).
    #[error("ERR {0}")]
    Rewrite(String),
    #[error("ERR {0}")]
    ConfigSet(#[from] crate::services::live_config::ReconfigureError),
    #[error("ERR {0}")]
    ConfigRewrite(#[from] crate::config::rewrite::RewriteError),
    /// A known subcommand with arguments it does not take (Redis's
    /// `addReplySubcommandSyntaxError`).
    #[error("ERR unknown subcommand or wrong number of arguments for '{sub}'. Try {command} HELP.")]
    SubcommandSyntax { command: &'static str, sub: String },
    #[error("ERR count should be greater than or equal to -1")]
    SlowlogCount,
    #[error(
        "ERR unknown latency event '{0}': flockd records 'command' and 'fast-command' (see LATENCY LATEST)"
    )]
    UnknownLatencyEvent(String),
    #[error(
        "ERR CLIENT TRACKING is not supported by flockd: it sends no invalidations, so a client-side cache would serve stale lock state"
    )]
    TrackingUnsupported,
    #[error(
        "ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled"
    )]
    CachingWithoutTracking,
}

impl From<crate::log::ProposeError> for CommandError {
    fn from(e: crate::log::ProposeError) -> Self {
        // The log refused it and nothing was applied: Redis's MISCONF. Otherwise this node
        // cannot tell the outcome: Redis Cluster's CLUSTERDOWN.
        if e == crate::log::ProposeError::CrossSlot {
            return CommandError::CrossSlot;
        }
        match e.is_refusal() {
            true => CommandError::Misconf(e.to_string()),
            false => CommandError::ClusterDown(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::ProposeError;

    #[test]
    fn a_refused_proposal_is_misconf_and_an_unknown_outcome_is_clusterdown() {
        let reply = |e: ProposeError| CommandError::from(e).to_string();
        assert_eq!(
            reply(ProposeError::Stopped),
            "MISCONF the AOF is shutting down"
        );
        assert_eq!(
            reply(ProposeError::WriteFailed("No space left on device".into())),
            "MISCONF Errors writing to the AOF file: No space left on device"
        );
        // A cluster node that stops has no AOF to name: its client cannot know the outcome.
        assert_eq!(
            reply(ProposeError::ShuttingDown),
            "CLUSTERDOWN the node is shutting down"
        );
        assert!(reply(ProposeError::OutcomeUnknown).starts_with("CLUSTERDOWN "));
        assert!(reply(ProposeError::NotServing("removed".into())).starts_with("CLUSTERDOWN "));
    }
}
