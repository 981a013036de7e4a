//! The request parser: RESP multibulk frames (`*<n>\r\n` followed by `n` bulk strings)
//! and inline lines, read incrementally from a connection's input buffer.
//!
//! It faces untrusted network input, so:
//! - it is a flat state machine: no recursion, whatever the input;
//! - it allocates only for bytes that actually arrived: argument vectors start at
//!   `min(n, 1024)` entries and grow with real arguments, and a declared bulk length is
//!   never reserved (the caller's buffer grows only with data received);
//! - it never rescans: finished arguments are split out of the buffer (zero-copy) and
//!   kept in the parser, a pending bulk is checked by length alone, and a line search
//!   resumes where the previous call stopped. A 512 MiB bulk arriving in 16 KiB reads
//!   or a million-argument request costs linear time in total.

use bytes::{Buf, Bytes, BytesMut};

use crate::{ProtocolError, inline};

/// Input limits. The caller may use tighter ones before AUTH, as Redis does.
/// `Copy`: three numbers, picked per request (tighter before AUTH).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest accepted bulk string (Redis's `proto-max-bulk-len`).
    pub max_bulk_len: usize,
    /// Most arguments in one request, command name included. Redis has no such cap
    /// (beyond `INT_MAX`); we need one so a request's argument vector stays bounded.
    pub max_args: usize,
    /// Longest inline request line, and longest `*<n>` / `$<len>` header line
    /// (Redis's `PROTO_INLINE_MAX_SIZE` serves both).
    pub max_inline_len: usize,
}

impl Default for Limits {
    /// Redis's defaults: 512 MiB bulk strings, 64 KiB inline lines; and 1 Mi arguments.
    fn default() -> Self {
        Limits {
            max_bulk_len: 512 * 1024 * 1024,
            max_args: 1024 * 1024,
            max_inline_len: 64 * 1024,
        }
    }
}

/// One client request: the command name and its arguments, as sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// `args[0]` is the command name; never empty.
    pub args: Vec<Bytes>,
}

impl Request {
    /// The command name as sent (not case-folded).
    pub fn name(&self) -> &[u8] {
        &self.args[0]
    }
}

/// Upper bound on the argument vector reserved from a declared count: more is only
/// allocated as arguments actually arrive.
const MAX_PREALLOC_ARGS: usize = 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Between requests: the next byte decides multibulk (`*`) or inline.
    Start,
    /// Inside a multibulk request, expecting a `$<len>\r\n` header.
    BulkHeader,
    /// Expecting `len` payload bytes and `\r\n`.
    BulkPayload(usize),
}

/// Incremental request parser for one connection.
///
/// Feed it the connection's input buffer: between calls the caller may only append to
/// the buffer (the parser remembers how far it has looked into it).
#[derive(Debug)]
pub struct RequestParser {
    state: State,
    /// Arguments of the current multibulk request already taken out of the buffer.
    args: Vec<Bytes>,
    /// Arguments still expected in the current multibulk request.
    remaining: usize,
    /// Wire bytes consumed so far by the current, unfinished request.
    pending: usize,
    /// Bytes at the front of the buffer already known to hold no `\n`, so a line
    /// trickling in byte by byte is scanned once, not once per call.
    scanned: usize,
}

impl Default for RequestParser {
    fn default() -> Self {
        Self::new()
    }
}

impl RequestParser {
    /// A parser waiting for the first request.
    pub fn new() -> Self {
        RequestParser {
            state: State::Start,
            args: Vec::new(),
            remaining: 0,
            pending: 0,
            scanned: 0,
        }
    }

    /// Parses the next complete request from the front of `buf`, consuming the bytes it
    /// used (bulk payloads are split off zero-copy). `Ok(None)`: more bytes are needed
    /// (whatever was consumed so far is kept in the parser). Empty requests (`*0`, `*-1`,
    /// blank inline lines) are skipped, as Redis does.
    ///
    /// After an error the connection must be closed; the parser is not reusable.
    pub fn parse(
        &mut self,
        buf: &mut BytesMut,
        limits: &Limits,
    ) -> Result<Option<Request>, ProtocolError> {
        loop {
            match self.state {
                State::Start => {
                    let Some(&first) = buf.first() else {
                        return Ok(None);
                    };
                    if first != b'*' {
                        match self.parse_inline(buf, limits)? {
                            InlineOutcome::NeedMore => return Ok(None),
                            InlineOutcome::Blank => continue,
                            InlineOutcome::Request(request) => return Ok(Some(request)),
                        }
                    }
                    let Some(nl) = self.find_newline(
                        buf,
                        limits.max_inline_len,
                        ProtocolError::TooBigMbulkCountString,
                    )?
                    else {
                        return Ok(None);
                    };
                    let count = parse_header_number(&buf[..nl])
                        .ok_or(ProtocolError::InvalidMultibulkLength)?;
                    buf.advance(nl + 1);
                    if count <= 0 {
                        // `*0` and `*-1`: nothing to run; go on with what follows.
                        continue;
                    }
                    let count = usize::try_from(count)
                        .ok()
                        .filter(|&n| n <= limits.max_args)
                        .ok_or(ProtocolError::InvalidMultibulkLength)?;
                    self.args = Vec::with_capacity(count.min(MAX_PREALLOC_ARGS));
                    self.remaining = count;
                    self.pending = nl + 1;
                    self.state = State::BulkHeader;
                }
                State::BulkHeader => {
                    let Some(&first) = buf.first() else {
                        return Ok(None);
                    };
                    if first != b'$' {
                        return Err(ProtocolError::ExpectedDollar(first));
                    }
                    let Some(nl) = self.find_newline(
                        buf,
                        limits.max_inline_len,
                        ProtocolError::TooBigBulkCountString,
                    )?
                    else {
                        return Ok(None);
                    };
                    let len = parse_header_number(&buf[..nl])
                        .and_then(|len| usize::try_from(len).ok())
                        .filter(|&len| len <= limits.max_bulk_len)
                        .ok_or(ProtocolError::InvalidBulkLength)?;
                    buf.advance(nl + 1);
                    self.pending += nl + 1;
                    self.state = State::BulkPayload(len);
                }
                State::BulkPayload(len) => {
                    // Only the length is checked until the payload is complete: no
                    // rescanning, and nothing reserved for bytes not yet received.
                    let Some(needed) = len.checked_add(2) else {
                        return Err(ProtocolError::InvalidBulkLength);
                    };
                    if buf.len() < needed {
                        return Ok(None);
                    }
                    if &buf[len..needed] != b"\r\n" {
                        return Err(ProtocolError::MissingBulkCrlf);
                    }
                    let arg = buf.split_to(len).freeze();
                    buf.advance(2);
                    self.pending += needed;
                    self.args.push(arg);
                    self.remaining -= 1;
                    if self.remaining == 0 {
                        self.state = State::Start;
                        self.pending = 0;
                        let args = std::mem::take(&mut self.args);
                        return Ok(Some(Request { args }));
                    }
                    self.state = State::BulkHeader;
                }
            }
        }
    }

    /// Wire bytes of the current, unfinished request that have already been taken out
    /// of the buffer (headers and finished arguments). The caller enforces its
    /// query-buffer limit on `buf.len() + pending_bytes()`, which is what Redis's query
    /// buffer would hold at this point.
    pub fn pending_bytes(&self) -> usize {
        self.pending
    }

    /// Index of the first `\n` in `buf`, resuming the search where the previous call
    /// stopped. A line longer than `max_len` (or that many bytes with no `\n` yet) is
    /// `too_big`: the error does not depend on how the bytes were chunked.
    fn find_newline(
        &mut self,
        buf: &BytesMut,
        max_len: usize,
        too_big: ProtocolError,
    ) -> Result<Option<usize>, ProtocolError> {
        let from = self.scanned.min(buf.len());
        match buf[from..].iter().position(|&b| b == b'\n') {
            Some(i) => {
                self.scanned = 0;
                let nl = from + i;
                if nl > max_len {
                    return Err(too_big);
                }
                Ok(Some(nl))
            }
            None => {
                self.scanned = buf.len();
                if buf.len() > max_len {
                    return Err(too_big);
                }
                Ok(None)
            }
        }
    }

    fn parse_inline(
        &mut self,
        buf: &mut BytesMut,
        limits: &Limits,
    ) -> Result<InlineOutcome, ProtocolError> {
        let Some(nl) = self.find_newline(
            buf,
            limits.max_inline_len,
            ProtocolError::TooBigInlineRequest,
        )?
        else {
            return Ok(InlineOutcome::NeedMore);
        };
        let line = buf.split_to(nl + 1);
        let mut text = &line[..nl];
        if let [rest @ .., b'\r'] = text {
            text = rest;
        }
        let mut args = Vec::new();
        inline::split_args(text, limits.max_args, &mut args)?;
        if args.is_empty() {
            return Ok(InlineOutcome::Blank);
        }
        Ok(InlineOutcome::Request(Request { args }))
    }
}

enum InlineOutcome {
    NeedMore,
    Blank,
    Request(Request),
}

/// Parses a `*<n>\r` or `$<len>\r` header line (the `\n` already cut off) as [`parse_int`]
/// does. `None` for anything else, including a missing `\r`.
fn parse_header_number(line: &[u8]) -> Option<i64> {
    let [_, digits @ .., b'\r'] = line else {
        return None;
    };
    parse_int(digits)
}

/// Parses an integer the way Redis's `string2ll` does: optional `-`, no `+`, no leading zeros,
/// no spaces, within `i64`. Request headers and command arguments (leases, tokens, indexes)
/// follow the same rule.
pub fn parse_int(text: &[u8]) -> Option<i64> {
    let (negative, digits) = match text {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, text),
    };
    match digits {
        [] => return None,
        [b'0'] => return (!negative).then_some(0),
        [b'0', ..] => return None,
        _ => {}
    }
    let mut value: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        let digit = i64::from(d - b'0');
        // Accumulate negatively so i64::MIN parses too.
        value = value.checked_mul(10)?.checked_sub(digit)?;
    }
    if negative {
        Some(value)
    } else {
        value.checked_neg()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_numbers_follow_string2ll() {
        let p = |s: &str| parse_header_number(s.as_bytes());
        assert_eq!(p("*3\r"), Some(3));
        assert_eq!(p("$0\r"), Some(0));
        assert_eq!(p("*-1\r"), Some(-1));
        assert_eq!(p("$9223372036854775807\r"), Some(i64::MAX));
        assert_eq!(p("$-9223372036854775808\r"), Some(i64::MIN));
        for bad in [
            "*\r",
            "*-\r",
            "*-0\r",
            "*01\r",
            "*+1\r",
            "* 1\r",
            "*1 \r",
            "*1x\r",
            "*3",
            "$9223372036854775808\r",
            "$99999999999999999999999\r",
        ] {
            assert_eq!(p(bad), None, "{bad:?}");
        }
    }
}
