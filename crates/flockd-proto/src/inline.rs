//! Splitting of inline requests (`SET k v\r\n` typed into telnet) into arguments,
//! byte for byte as Redis's `sdssplitargs` does, so `redis-cli`-style quoting works the
//! same against flockd as against Redis.

use bytes::Bytes;

use crate::ProtocolError;

/// `isspace` in the C locale: what `sdssplitargs` skips between arguments and accepts
/// after a closing quote.
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Splits one inline line (without its line terminator) into arguments, pushing them
/// onto `args`. Stops with an error once `max_args` would be exceeded, so a 64 KiB line
/// of single characters cannot exceed a tight pre-AUTH argument limit.
///
/// `sdssplitargs` works on a C string, so a NUL byte ends the line there; we keep that
/// so the same bytes mean the same command as in Redis.
pub(crate) fn split_args(
    line: &[u8],
    max_args: usize,
    args: &mut Vec<Bytes>,
) -> Result<(), ProtocolError> {
    let line = match line.iter().position(|&b| b == 0) {
        Some(nul) => &line[..nul],
        None => line,
    };
    // `at(i)` reads like C's `p[i]`: past the end is the terminating NUL.
    let at = |i: usize| line.get(i).copied().unwrap_or(0);
    let mut p = 0;
    loop {
        while p < line.len() && is_c_space(line[p]) {
            p += 1;
        }
        if p >= line.len() {
            return Ok(());
        }
        let mut current = Vec::new();
        let (mut in_dq, mut in_sq) = (false, false);
        loop {
            let c = at(p);
            if in_dq {
                if c == b'\\'
                    && at(p + 1) == b'x'
                    && let (Some(hi), Some(lo)) = (hex_value(at(p + 2)), hex_value(at(p + 3)))
                {
                    current.push(hi * 16 + lo);
                    p += 4;
                    continue;
                }
                if c == b'\\' && at(p + 1) != 0 {
                    p += 1;
                    current.push(match at(p) {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 0x08,
                        b'a' => 0x07,
                        other => other,
                    });
                } else if c == b'"' {
                    // A closing quote must be followed by a space or the end.
                    if at(p + 1) != 0 && !is_c_space(at(p + 1)) {
                        return Err(ProtocolError::UnbalancedQuotes);
                    }
                    p += 1;
                    break;
                } else if c == 0 {
                    return Err(ProtocolError::UnbalancedQuotes);
                } else {
                    current.push(c);
                }
            } else if in_sq {
                if c == b'\\' && at(p + 1) == b'\'' {
                    p += 1;
                    current.push(b'\'');
                } else if c == b'\'' {
                    if at(p + 1) != 0 && !is_c_space(at(p + 1)) {
                        return Err(ProtocolError::UnbalancedQuotes);
                    }
                    p += 1;
                    break;
                } else if c == 0 {
                    return Err(ProtocolError::UnbalancedQuotes);
                } else {
                    current.push(c);
                }
            } else {
                match c {
                    // Only these end an unquoted argument (not \v or \f), as in Redis.
                    b' ' | b'\n' | b'\r' | b'\t' => {
                        p += 1;
                        break;
                    }
                    0 => break,
                    b'"' => in_dq = true,
                    b'\'' => in_sq = true,
                    other => current.push(other),
                }
            }
            p += 1;
        }
        if args.len() >= max_args {
            return Err(ProtocolError::InvalidMultibulkLength);
        }
        args.push(Bytes::from(current));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(line: &[u8]) -> Result<Vec<Vec<u8>>, ProtocolError> {
        let mut args = Vec::new();
        split_args(line, usize::MAX, &mut args)?;
        Ok(args.into_iter().map(|b| b.to_vec()).collect())
    }

    fn ok(line: &str, expected: &[&[u8]]) {
        let got = split(line.as_bytes()).unwrap();
        let expected: Vec<Vec<u8>> = expected.iter().map(|a| a.to_vec()).collect();
        assert_eq!(got, expected, "line {line:?}");
    }

    #[test]
    fn whitespace_separated() {
        ok("SET k v", &[b"SET", b"k", b"v"]);
        ok("  PING  ", &[b"PING"]);
        ok("\t a\tb \r", &[b"a", b"b"]);
        ok("", &[]);
        ok("   ", &[]);
        // \v and \f are skipped between arguments but do not end an unquoted one.
        ok("\x0ba\x0bb", &[b"a\x0bb"]);
    }

    #[test]
    fn double_quotes_and_escapes() {
        ok(r#"SET "a b" "c""#, &[b"SET", b"a b", b"c"]);
        ok(r#""\n\r\t\b\a\\\"\q""#, &[b"\n\r\t\x08\x07\\\"q"]);
        ok(r#""\x41\x4a\x4B\x00z""#, &[b"AJK\x00z"]);
        // Not a valid \x escape: the backslash escapes the 'x'.
        ok(r#""\xZZ""#, &[b"xZZ"]);
        ok(r#""\x4""#, &[b"x4"]);
        ok(r#""""#, &[b""]);
        // A quote may open mid-argument; the closing one must still end it.
        ok(r#"a"b c" d"#, &[b"ab c", b"d"]);
        ok("\"a\"\x0bb", &[b"a", b"b"]);
    }

    #[test]
    fn single_quotes() {
        ok(r#"'a b' 'it\'s' '\n'"#, &[b"a b", b"it's", b"\\n"]);
        ok("''", &[b""]);
    }

    #[test]
    fn unbalanced_quotes() {
        for line in [
            r#""abc"#,
            r#"'abc"#,
            r#""abc"x"#,
            r#"a"b c"d"#,
            r#"'abc'x"#,
            r#""\"#,
            r#"a "b"#,
            "\"",
        ] {
            assert_eq!(
                split(line.as_bytes()),
                Err(ProtocolError::UnbalancedQuotes),
                "{line:?}"
            );
        }
    }

    #[test]
    fn nul_ends_the_line_like_a_c_string() {
        assert_eq!(
            split(b"GET a\0b c").unwrap(),
            vec![b"GET".to_vec(), b"a".to_vec()]
        );
        assert_eq!(split(b"\"a\0\""), Err(ProtocolError::UnbalancedQuotes));
    }

    #[test]
    fn argument_cap() {
        let mut args = Vec::new();
        assert_eq!(
            split_args(b"a b c", 2, &mut args),
            Err(ProtocolError::InvalidMultibulkLength)
        );
        let mut args = Vec::new();
        split_args(b"a b", 2, &mut args).unwrap();
        assert_eq!(args.len(), 2);
    }
}
