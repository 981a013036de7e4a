//! MONITOR: every command the server receives, as a line like Redis prints it
//! (`+1700000000.123456 [0 127.0.0.1:50000] "flock.acquire" "a" "1000"`), sent to every client in
//! monitor mode. Lines go through a bounded broadcast: a monitor that falls more than
//! [`BACKLOG`] lines behind is disconnected rather than buffering without bound. Nothing is
//! formatted while nobody monitors. Passwords never appear: AUTH's arguments and HELLO's AUTH
//! pair are shown as `(redacted)`.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use tokio::sync::broadcast;

/// Lines a monitor may be behind before it is disconnected.
pub const BACKLOG: usize = 4096;

pub struct Monitors {
    lines: broadcast::Sender<Bytes>,
    /// Clients in monitor mode. Every command reads it: a plain load of a line no command
    /// writes, where the channel's own count takes the channel's lock.
    watching: Arc<AtomicUsize>,
}

impl Default for Monitors {
    fn default() -> Self {
        Monitors {
            lines: broadcast::channel(BACKLOG).0,
            watching: Arc::default(),
        }
    }
}

/// One client's feed of lines; it stops counting as a monitor when dropped.
pub struct Watch {
    pub lines: broadcast::Receiver<Bytes>,
    watching: Arc<AtomicUsize>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.watching.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Monitors {
    pub fn subscribe(&self) -> Watch {
        self.watching.fetch_add(1, Ordering::Relaxed);
        Watch {
            lines: self.lines.subscribe(),
            watching: self.watching.clone(),
        }
    }

    /// Feeds one received command to the monitors, if there are any.
    pub fn feed(&self, addr: SocketAddr, args: &[Bytes]) {
        if self.watching.load(Ordering::Relaxed) == 0 {
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
    fn commands_reach_monitors_only_while_one_watches() {
        let monitors = Monitors::default();
        let addr: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        let ping = [Bytes::from_static(b"PING")];
        let mut first = monitors.subscribe();
        let second = monitors.subscribe();
        monitors.feed(addr, &ping);
        assert!(first.lines.try_recv().unwrap().ends_with(b"\"PING\"\r\n"));
        drop(second);
        monitors.feed(addr, &ping);
        assert!(first.lines.try_recv().is_ok(), "one monitor still watches");
        drop(first);
        assert_eq!(monitors.watching.load(Ordering::Relaxed), 0);
        // Nobody watches: nothing is formatted or sent.
        let late = monitors.lines.subscribe();
        monitors.feed(addr, &ping);
        assert_eq!(late.len(), 0);
    }

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
