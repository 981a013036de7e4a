//! MONITOR: every command the server receives, as a line like Redis prints it
//! (`+1700000000.123456 [0 127.0.0.1:50000] "flock.acquire" "a" "1000"`), sent to every client in
//! monitor mode. Lines go through a bounded broadcast: a monitor that falls more than
//! [`BACKLOG`] lines behind is disconnected rather than buffering without bound. Nothing is
//! formatted while nobody monitors. Passwords never appear: AUTH's arguments and HELLO's AUTH
//! pair are shown as `(redacted)`.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use tokio::sync::broadcast;

/// Lines a monitor may be behind before it is disconnected.
pub const BACKLOG: usize = 4096;

pub struct Monitors {
    lines: broadcast::Sender<Bytes>,
}

impl Default for Monitors {
    fn default() -> Self {
        Monitors {
            lines: broadcast::channel(BACKLOG).0,
        }
    }
}

impl Monitors {
    pub fn subscribe(&self) -> broadcast::Receiver<Bytes> {
        self.lines.subscribe()
    }

    /// Feeds one received command to the monitors, if there are any.
    pub fn feed(&self, addr: SocketAddr, args: &[Bytes]) {
        if self.lines.receiver_count() == 0 {
            return;
        }
        let _ = self.lines.send(Bytes::from(line(addr, args)));
    }
}

fn line(addr: SocketAddr, args: &[Bytes]) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let mut out = format!("+{}.{:06} [0 {addr}]", now.as_secs(), now.subsec_micros());
    let name = args
        .first()
        .map(|a| a.to_ascii_lowercase())
        .unwrap_or_default();
    for (i, arg) in args.iter().enumerate() {
        out.push(' ');
        if redacted(&name, args, i) {
            out.push_str("\"(redacted)\"");
        } else {
            quote(&mut out, arg);
        }
    }
    out.push_str("\r\n");
    out
}

/// AUTH's arguments, the two after HELLO's AUTH, and ACL SETUSER's rules (they carry
/// passwords).
fn redacted(name: &[u8], args: &[Bytes], i: usize) -> bool {
    match name {
        b"auth" => i > 0,
        b"acl" => {
            i >= 3
                && args
                    .get(1)
                    .is_some_and(|a| a.eq_ignore_ascii_case(b"setuser"))
        }
        b"hello" => args
            .iter()
            .position(|a| a.eq_ignore_ascii_case(b"auth"))
            .is_some_and(|at| i > at && i <= at + 2),
        _ => false,
    }
}

/// As Redis's `sdscatrepr`: printable bytes as they are, the rest escaped, in double quotes.
fn quote(out: &mut String, bytes: &[u8]) {
    out.push('"');
    for &b in bytes {
        match b {
            b'\\' => out.push_str("\\\\"),
            b'"' => out.push_str("\\\""),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            0x07 => out.push_str("\\a"),
            0x08 => out.push_str("\\b"),
            b if b.is_ascii_graphic() || b == b' ' => out.push(b as char),
            b => {
                let _ = write!(out, "\\x{b:02x}");
            }
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_quote_like_redis_and_hide_passwords() {
        let addr: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        let args = |a: &[&[u8]]| {
            a.iter()
                .map(|x| Bytes::copy_from_slice(x))
                .collect::<Vec<_>>()
        };
        let l = line(addr, &args(&[b"FLOCK.ACQUIRE", b"a \"b\"\n\x01", b"10"]));
        assert!(l.starts_with('+') && l.ends_with("\r\n"), "{l}");
        assert!(
            l.contains(r#"[0 127.0.0.1:5000] "FLOCK.ACQUIRE" "a \"b\"\n\x01" "10""#),
            "{l}"
        );
        let l = line(addr, &args(&[b"AUTH", b"alice", b"secret"]));
        assert!(l.contains(r#""AUTH" "(redacted)" "(redacted)""#), "{l}");
        assert!(!l.contains("secret"));
        let l = line(
            addr,
            &args(&[b"HELLO", b"3", b"AUTH", b"u", b"pw", b"SETNAME", b"n"]),
        );
        assert!(
            l.contains(r#""HELLO" "3" "AUTH" "(redacted)" "(redacted)" "SETNAME" "n""#),
            "{l}"
        );
    }
}
