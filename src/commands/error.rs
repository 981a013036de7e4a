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
    #[error("ERR unknown option '{option}' for '{command}' (expected {expected})")]
    UnknownOption {
        command: &'static str,
        option: String,
        expected: &'static str,
    },
    #[error("ERR unknown subcommand '{sub}'. Try {command} HELP.")]
    UnknownSubcommand { command: &'static str, sub: String },
    #[error("{0}")]
    NotOwner(#[from] flockd_core::LockError),
    #[error("MISCONF {0}")]
    Misconf(String),
    #[error("NOAUTH Authentication required.")]
    NoAuth,
    /// Any other complete error text (with its code), e.g. Redis's fixed texts.
    #[error("{0}")]
    Other(Cow<'static, str>),
}
