//! `flockd ping`: connects to the configured server (same file, variables and flags as the
//! daemon), authenticates if a password is set, and expects +PONG. The container HEALTHCHECK
//! uses it, so the image needs no redis-cli. Any other reply is shown in full (its whole line,
//! up to 512 bytes, escaped), so a failing check says why: `-WRONGPASS ...`, `-LOADING ...`.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::process::ExitCode;
use std::time::Duration;

use crate::config::Config;

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
    match ping(
        SocketAddr::new(host, config.port),
        config.requirepass.as_deref(),
    ) {
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

fn ping(addr: SocketAddr, password: Option<&str>) -> Result<(), String> {
    let timeout = Duration::from_secs(3);
    let mut stream = TcpStream::connect_timeout(&addr, timeout)
        .map_err(|e| format!("cannot connect to {addr}: {e}"))?;
    stream
        .set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
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
            return Ok(());
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
