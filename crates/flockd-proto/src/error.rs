//! Protocol errors: what the parser reports when a client's bytes are not a valid
//! request. Their texts are Redis's own, so clients and tools that match on them
//! behave as they do against Redis.

/// A malformed request. The caller replies with [`ProtocolError::to_reply_text`] and
/// closes the connection; the parser is not meant to be used again afterwards.
///
/// `Display` gives the text after `"Protocol error: "`, as Redis words it.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
pub enum ProtocolError {
    /// `*<n>` that is not a number, or more arguments than [`crate::Limits::max_args`].
    #[error("invalid multibulk length")]
    InvalidMultibulkLength,
    /// `$<len>` that is not a number, negative, or above [`crate::Limits::max_bulk_len`].
    #[error("invalid bulk length")]
    InvalidBulkLength,
    /// Something other than `$` where a bulk string header must start.
    #[error("expected '$', got '{}'", printable(*.0))]
    ExpectedDollar(u8),
    /// A bulk payload not followed by `\r\n` (Redis silently skips two bytes there;
    /// we refuse, because a wrong length means we are no longer in sync with the client).
    #[error("expected CRLF after bulk string data")]
    MissingBulkCrlf,
    /// An inline request line longer than [`crate::Limits::max_inline_len`].
    #[error("too big inline request")]
    TooBigInlineRequest,
    /// A `*<n>` header line longer than [`crate::Limits::max_inline_len`].
    #[error("too big mbulk count string")]
    TooBigMbulkCountString,
    /// A `$<len>` header line longer than [`crate::Limits::max_inline_len`].
    #[error("too big bulk count string")]
    TooBigBulkCountString,
    /// An inline request with an unterminated quote, or a closing quote followed by
    /// something other than whitespace.
    #[error("unbalanced quotes in request")]
    UnbalancedQuotes,
}

impl ProtocolError {
    /// The full error reply text, `"ERR Protocol error: ..."` (without the leading `-`).
    pub fn to_reply_text(&self) -> String {
        format!("ERR Protocol error: {self}")
    }

    /// The error as a ready-to-encode [`crate::Reply::Error`].
    pub fn to_reply(&self) -> crate::Reply {
        crate::Reply::error(self.to_reply_text())
    }
}

/// Redis prints the offending byte with `%c` and then turns `\r`/`\n` into spaces so
/// the reply stays one line. We do the same, and show non-ASCII bytes as `?` because a
/// reply text is a `str`.
fn printable(b: u8) -> char {
    match b {
        b'\r' | b'\n' => ' ',
        0..=0x7f => b as char,
        _ => '?',
    }
}
