//! A cursor over a command's arguments: take the next one as bytes, a name, or an integer in a
//! range, and refuse leftovers. Every error is one the client can read and act on.

use std::ops::RangeInclusive;

use bytes::Bytes;
use flockd_proto::parse_int;

use super::error::CommandError;

/// The configured bounds that argument parsing checks against.
#[derive(Clone, Copy, Debug)]
pub struct ArgLimits {
    pub max_name_bytes: usize,
    pub max_lease_ms: u64,
    pub max_wait_ms: u64,
}

impl ArgLimits {
    /// The limits a configuration sets.
    pub fn of(config: &crate::config::Config) -> ArgLimits {
        ArgLimits {
            max_name_bytes: config.max_name_bytes,
            max_lease_ms: config.max_lease_ms,
            max_wait_ms: config.max_wait_ms,
        }
    }
}

/// Borrows the request's arguments (the slow log keeps the request itself, uncopied); an
/// argument a command keeps is cloned out (a reference count) or copied.
pub struct Args<'a> {
    command: &'static str,
    items: std::slice::Iter<'a, Bytes>,
    pub limits: ArgLimits,
    /// The next keyword names a subcommand, not an option (a container command's first word).
    subcommand_next: bool,
    /// A keyword option was read: a value missing after it is `ERR syntax error`, as Redis
    /// answers `SET k v EX`, not an arity error.
    in_options: bool,
}

impl<'a> Args<'a> {
    /// `argv` includes the command name, which is skipped.
    pub fn new(command: &'static str, argv: &'a [Bytes], limits: ArgLimits) -> Args<'a> {
        let mut items = argv.iter();
        items.next();
        Args {
            command,
            items,
            limits,
            subcommand_next: false,
            in_options: false,
        }
    }

    /// Arguments of a command with subcommands: its first keyword is the subcommand's name.
    pub fn with_subcommand(mut self) -> Args<'a> {
        self.subcommand_next = true;
        self
    }

    /// A lock name (fence key, owner id: see [`Args::next_name`]) within the configured size.
    /// Copied out of the read buffer: a name kept in the table must not pin a whole read.
    pub fn next_lock_name(&mut self, what: &'static str) -> Result<Bytes, CommandError> {
        self.next_name_ref(what, self.limits.max_name_bytes)
            .map(|name| Bytes::copy_from_slice(name))
    }

    /// A value to keep (FENCE.SET), copied out of the read buffer for the same reason.
    pub fn next_owned_bytes(&mut self) -> Result<Bytes, CommandError> {
        self.next_ref().map(|value| Bytes::copy_from_slice(value))
    }

    pub fn next_lease(&mut self) -> Result<u64, CommandError> {
        self.next_int("lease-ms", 1..=self.limits.max_lease_ms)
    }

    pub fn next_token(&mut self) -> Result<u64, CommandError> {
        self.next_int("token", 1..=flockd_core::MAX_TOKEN)
    }

    pub fn remaining(&self) -> usize {
        self.items.len()
    }

    pub fn next_opt(&mut self) -> Option<Bytes> {
        self.items.next().cloned()
    }

    /// The next argument; a missing one is an arity error (the table's arity could not say).
    pub fn next_bytes(&mut self) -> Result<Bytes, CommandError> {
        self.next_ref().cloned()
    }

    fn next_ref(&mut self) -> Result<&'a Bytes, CommandError> {
        match self.items.next() {
            Some(item) => Ok(item),
            None if self.in_options => Err(CommandError::Syntax),
            None => Err(CommandError::WrongArity(self.command.into())),
        }
    }

    /// A lock name, fence key or owner id: non-empty and at most `max` bytes.
    pub fn next_name(&mut self, what: &'static str, max: usize) -> Result<Bytes, CommandError> {
        self.next_name_ref(what, max).cloned()
    }

    fn next_name_ref(&mut self, what: &'static str, max: usize) -> Result<&'a Bytes, CommandError> {
        let name = self.next_ref()?;
        if name.is_empty() || name.len() > max {
            return Err(CommandError::BadName { what, max });
        }
        Ok(name)
    }

    /// An integer argument that must lie in `range`; `what` names it in the error.
    pub fn next_int(
        &mut self,
        what: &'static str,
        range: RangeInclusive<u64>,
    ) -> Result<u64, CommandError> {
        let raw = self.next_ref()?;
        int_in_range(raw, what, range)
    }

    /// A SCAN-style cursor: a decimal 0..=2^64-1, anything else `-ERR invalid cursor` as Redis.
    pub fn next_cursor(&mut self) -> Result<u64, CommandError> {
        let raw = self.next_ref()?;
        std::str::from_utf8(raw)
            .ok()
            .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|s| s.parse::<u64>().ok())
            .ok_or(CommandError::InvalidCursor)
    }

    /// The next argument, upper-cased, to match an option or subcommand keyword.
    pub fn next_keyword(&mut self) -> Option<String> {
        let keyword = self.items.next()?;
        if std::mem::take(&mut self.subcommand_next) {
            // The subcommand's own arguments follow; options, if any, come after them.
        } else {
            self.in_options = true;
        }
        Some(String::from_utf8_lossy(keyword).to_ascii_uppercase())
    }

    /// Errors if arguments are left over.
    pub fn finish(&mut self) -> Result<(), CommandError> {
        match self.items.len() {
            0 => Ok(()),
            _ => Err(CommandError::Syntax),
        }
    }
}

/// Parses a Redis-style integer (strict: optional '-', no '+', no leading zeros or spaces) and
/// checks the range. Non-integers get Redis's text; integers out of range name the argument.
pub fn int_in_range(
    raw: &[u8],
    what: &'static str,
    range: RangeInclusive<u64>,
) -> Result<u64, CommandError> {
    let Some(value) = parse_int(raw) else {
        // An integer too big for 64 bits is still an integer: out of range, named.
        return Err(if is_overflowing_integer(raw) {
            CommandError::OutOfRange {
                what,
                min: *range.start(),
                max: *range.end(),
            }
        } else {
            CommandError::NotInteger
        });
    };
    match u64::try_from(value) {
        Ok(v) if range.contains(&v) => Ok(v),
        _ => Err(CommandError::OutOfRange {
            what,
            min: *range.start(),
            max: *range.end(),
        }),
    }
}

/// A well-formed decimal integer (optional '-', no leading zeros) with more than 18 digits: one
/// that `parse_int` refused only for its size.
fn is_overflowing_integer(raw: &[u8]) -> bool {
    let digits = raw.strip_prefix(b"-").unwrap_or(raw);
    digits.len() > 18 && digits[0] != b'0' && digits.iter().all(u8::is_ascii_digit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_are_strict_like_redis() {
        assert_eq!(parse_int(b"0"), Some(0));
        assert_eq!(parse_int(b"-5"), Some(-5));
        assert_eq!(parse_int(b"9223372036854775807"), Some(i64::MAX));
        for bad in [
            &b""[..],
            b"+1",
            b" 1",
            b"1 ",
            b"01",
            b"-0",
            b"1.5",
            b"abc",
            b"9223372036854775808",
            b"-",
        ] {
            assert_eq!(parse_int(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn range_errors_name_the_argument() {
        let err = int_in_range(b"0", "lease-ms", 1..=10).unwrap_err();
        assert_eq!(
            err.to_string(),
            "ERR invalid lease-ms: must be an integer from 1 to 10"
        );
        assert_eq!(
            int_in_range(b"x", "lease-ms", 1..=10).unwrap_err(),
            CommandError::NotInteger
        );
        for huge in [
            &b"9223372036854775808"[..],
            b"-9223372036854775809",
            b"99999999999999999999999",
        ] {
            assert!(matches!(
                int_in_range(huge, "token", 1..=10).unwrap_err(),
                CommandError::OutOfRange { what: "token", .. }
            ));
        }
        assert_eq!(
            int_in_range(b"0099999999999999999999", "token", 1..=10).unwrap_err(),
            CommandError::NotInteger
        );
    }
}
