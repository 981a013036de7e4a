//! `flockd ping`: connects to the configured server (same file, variables and flags as the
//! daemon), authenticates if a password is set, and expects +PONG. The container HEALTHCHECK
//! uses it, so the image needs no redis-cli. Any other reply is shown in full (its whole line,
//! up to 512 bytes, escaped), so a failing check says why: `-WRONGPASS ...`, `-LOADING ...`.
//! A cluster node (`node-id` configured) is ready only while it knows a leader: the check then
//! also reads `INFO replication` and fails while `raft_leader_id` is 0. A TLS-only server
//! (`tls-only yes`) is asked on its TLS port, with the `tls-*` files as the client's.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::process::ExitCode;
use std::time::Duration;

use crate::config::Config;

/// A connection to the server, plain or TLS.
trait Stream: Read + Write {}
impl<T: Read + Write> Stream for T {}

pub fn run(config: &Config) -> ExitCode {
    // A server bound to every address is reached over loopback.
    let host = if config.bind.is_unspecified() {
        if config.bind.is_ipv4() {
            IpAddr::from([127, 0, 0, 1])
        } else {
            IpAddr::from([0u16, 0, 0, 0, 0, 0, 0, 1])
        }
    } else {
        config.bind
    };
    let tls = config.tls_settings().filter(|_| config.tls_only);
    let port = match (&tls, config.tls_port) {
        (Some(_), Some(tls_port)) => tls_port,
        _ => config.port,
    };
    let addr = SocketAddr::new(host, port);
    let checked = connect(addr, tls.as_ref())
        .and_then(|stream| ping(stream, addr, config.requirepass.as_deref()))
        .and_then(|stream| {
            if config.cluster.is_some() {
                leader_known(stream, addr)
            } else {
                Ok(())
            }
        });
    match checked {
        Ok(()) => {
            println!("PONG");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("flockd ping: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Reads `INFO replication` on the connection: `Ok` if it names a leader.
fn leader_known(mut stream: Box<dyn Stream>, addr: SocketAddr) -> Result<(), String> {
    stream
        .write_all(b"*2\r\n$4\r\nINFO\r\n$11\r\nreplication\r\n")
        .map_err(|e| e.to_string())?;
    let mut got = Vec::new();
    let mut chunk = [0u8; 1024];
    // A bulk (RESP2) or verbatim (RESP3) string: its header line, then that many bytes.
    let body = loop {
        if let Some(header_end) = got.windows(2).position(|w| w == b"\r\n") {
            let header = String::from_utf8_lossy(&got[..header_end]).into_owned();
            let len: usize = header
                .get(1..)
                .and_then(|n| n.parse().ok())
                .filter(|_| header.starts_with('$') || header.starts_with('='))
                .ok_or_else(|| {
                    format!(
                        "unexpected reply to INFO from {addr}: \"{}\"",
                        shown(header.as_bytes())
                    )
                })?;
            if len > 1 << 20 {
                return Err(format!("INFO reply of {len} bytes from {addr}"));
            }
            let start = header_end + 2;
            if got.len() >= start + len {
                break String::from_utf8_lossy(&got[start..start + len]).into_owned();
            }
        }
        match stream.read(&mut chunk) {
            Ok(0) => return Err(format!("{addr} closed the connection during INFO")),
            Ok(n) => got.extend_from_slice(&chunk[..n]),
            Err(e) => return Err(format!("no INFO reply from {addr}: {e}")),
        }
    };
    match body
        .lines()
        .find_map(|l| l.trim().strip_prefix("raft_leader_id:"))
    {
        Some("0") => Err(format!(
            "{addr} answers, but no cluster leader is known (raft_leader_id:0)"
        )),
        Some(_) => Ok(()),
        None => Err(format!(
            "{addr} is configured as a cluster node but INFO replication has no raft_leader_id"
        )),
    }
}

fn connect(
    addr: SocketAddr,
    tls: Option<&flockd_tls::TlsSettings>,
) -> Result<Box<dyn Stream>, String> {
    let timeout = Duration::from_secs(3);
    let stream = TcpStream::connect_timeout(&addr, timeout)
        .map_err(|e| format!("cannot connect to {addr}: {e}"))?;
    stream
        .set_read_timeout(Some(timeout))
        .and_then(|()| stream.set_write_timeout(Some(timeout)))
        .map_err(|e| e.to_string())?;
    match tls {
        None => Ok(Box::new(stream)),
        Some(settings) => flockd_tls::connect_blocking(settings, stream)
            .map(|stream| Box::new(stream) as Box<dyn Stream>)
            .map_err(|e| e.to_string()),
    }
}

fn ping(
    mut stream: Box<dyn Stream>,
    addr: SocketAddr,
    password: Option<&str>,
) -> Result<Box<dyn Stream>, String> {
    let mut request = Vec::new();
    if let Some(password) = password {
        request.extend_from_slice(
            format!("*2\r\n$4\r\nAUTH\r\n${}\r\n{password}\r\n", password.len()).as_bytes(),
        );
    }
    request.extend_from_slice(b"*1\r\n$4\r\nPING\r\n");
    stream.write_all(&request).map_err(|e| e.to_string())?;
    let expected: &[u8] = if password.is_some() {
        b"+OK\r\n+PONG\r\n"
    } else {
        b"+PONG\r\n"
    };
    let requests: &[&str] = if password.is_some() {
        &["AUTH", "PING"]
    } else {
        &["PING"]
    };
    let mut got = Vec::new();
    let mut chunk = [0u8; 256];
    loop {
        if got.starts_with(expected) {
            return Ok(stream);
        }
        if let Some(line) = unexpected_line(&got, expected) {
            let request = requests[line.index.min(requests.len() - 1)];
            return Err(format!(
                "unexpected reply to {request} from {addr}: \"{}\"",
                shown(line.text)
            ));
        }
        match stream.read(&mut chunk) {
            Ok(0) => {
                return Err(format!(
                    "{addr} closed the connection after \"{}\"",
                    shown(&got)
                ));
            }
            Ok(n) => got.extend_from_slice(&chunk[..n]),
            Err(e) if got.is_empty() => return Err(format!("no reply from {addr}: {e}")),
            Err(e) => {
                return Err(format!(
                    "incomplete reply from {addr} ({e}): \"{}\"",
                    shown(&got)
                ));
            }
        }
    }
}

/// The most of one reply line shown in an error.
const MAX_LINE: usize = 512;

struct Line<'a> {
    /// Which reply (0: the first).
    index: usize,
    text: &'a [u8],
}

/// The reply line in `got` that differs from `expected`, once it is complete (or
/// [`MAX_LINE`] long): the whole line, not just as many bytes as the expected reply has.
fn unexpected_line<'a>(got: &'a [u8], expected: &[u8]) -> Option<Line<'a>> {
    let differs = got.iter().zip(expected).position(|(a, b)| a != b)?;
    let start = got[..differs]
        .windows(2)
        .rposition(|w| w == b"\r\n")
        .map_or(0, |p| p + 2);
    let index = got[..start].windows(2).filter(|w| *w == b"\r\n").count();
    let rest = &got[start..];
    let end = match rest.windows(2).position(|w| w == b"\r\n") {
        Some(end) => end,
        None if rest.len() >= MAX_LINE => MAX_LINE,
        None => return None,
    };
    Some(Line {
        index,
        text: &rest[..end.min(MAX_LINE)],
    })
}

/// Bytes as printable text: control characters and invalid UTF-8 escaped, at most
/// [`MAX_LINE`] bytes.
fn shown(bytes: &[u8]) -> String {
    let cut = &bytes[..bytes.len().min(MAX_LINE)];
    let text: String = String::from_utf8_lossy(cut).escape_debug().collect();
    if cut.len() < bytes.len() {
        format!("{text}...")
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_whole_unexpected_line_is_shown() {
        let expected = b"+OK\r\n+PONG\r\n";
        assert!(unexpected_line(b"+OK\r\n+PO", expected).is_none());
        assert!(unexpected_line(b"-WRONGPASS invalid", expected).is_none());
        let line = unexpected_line(
            b"-WRONGPASS invalid username-password pair or user is disabled.\r\n-NOAUTH",
            expected,
        )
        .unwrap();
        assert_eq!(line.index, 0);
        assert_eq!(
            line.text,
            b"-WRONGPASS invalid username-password pair or user is disabled."
        );
        let line = unexpected_line(b"+OK\r\n-LOADING busy\r\n", expected).unwrap();
        assert_eq!((line.index, line.text), (1, &b"-LOADING busy"[..]));
        let long = [b'-', b'x'].repeat(400);
        let line = unexpected_line(&long, b"+PONG\r\n").unwrap();
        assert_eq!(line.text.len(), MAX_LINE);
        assert_eq!(shown(b"a\x01\r\n"), "a\\u{1}\\r\\n");
    }
}
