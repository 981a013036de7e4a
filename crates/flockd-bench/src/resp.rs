//! A deliberately small RESP2 client: requests are encoded by hand into one write buffer
//! (so a pipeline of N requests is one `write`), replies are parsed just far enough to tell an
//! integer, a null, a status, a bulk string, an error and an array apart.

use std::fmt;
use std::io;
use std::net::SocketAddr;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::pki_types::ServerName;

/// A byte stream a connection runs on: plain TCP, or TLS over it.
trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<S: AsyncRead + AsyncWrite + Unpin + Send> Stream for S {}

/// One request argument: raw bytes or an unsigned integer (formatted without allocating).
#[derive(Clone, Copy)]
pub enum Arg<'a> {
    B(&'a [u8]),
    I(u64),
}

/// A parsed reply. Bulk payloads are kept (they are tiny here: a script SHA, `PONG`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Int(i64),
    Nil,
    Status(String),
    Bulk(Vec<u8>),
    Error(String),
    Array(Vec<Reply>),
}

impl fmt::Display for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reply::Int(n) => write!(f, "(integer) {n}"),
            Reply::Nil => write!(f, "(nil)"),
            Reply::Status(s) => write!(f, "+{s}"),
            Reply::Bulk(b) => write!(f, "\"{}\"", String::from_utf8_lossy(b)),
            Reply::Error(e) => write!(f, "-{e}"),
            Reply::Array(items) => {
                write!(f, "[")?;
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        write!(f, ", ")?;
                    }
                    write!(f, "{item}")?;
                }
                write!(f, "]")
            }
        }
    }
}

#[derive(Debug)]
pub enum ClientError {
    Io(io::Error),
    Closed,
    Protocol(String),
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Io(e) => write!(f, "I/O error: {e}"),
            ClientError::Closed => write!(f, "server closed the connection"),
            ClientError::Protocol(e) => write!(f, "unparsable reply: {e}"),
        }
    }
}

impl From<io::Error> for ClientError {
    fn from(e: io::Error) -> Self {
        ClientError::Io(e)
    }
}

fn push_uint(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

fn uint_len(mut n: u64) -> u64 {
    let mut len = 1;
    while n >= 10 {
        n /= 10;
        len += 1;
    }
    len
}

/// Appends one request, in RESP multi-bulk form, to `out`.
pub fn encode(out: &mut Vec<u8>, args: &[Arg<'_>]) {
    out.push(b'*');
    push_uint(out, args.len() as u64);
    out.extend_from_slice(b"\r\n");
    for arg in args {
        out.push(b'$');
        match *arg {
            Arg::B(bytes) => {
                push_uint(out, bytes.len() as u64);
                out.extend_from_slice(b"\r\n");
                out.extend_from_slice(bytes);
            }
            Arg::I(n) => {
                push_uint(out, uint_len(n));
                out.extend_from_slice(b"\r\n");
                push_uint(out, n);
            }
        }
        out.extend_from_slice(b"\r\n");
    }
}

fn find_crlf(buf: &[u8], from: usize) -> Option<usize> {
    buf.get(from..)?
        .windows(2)
        .position(|w| w == b"\r\n")
        .map(|p| p + from)
}

fn parse_int(line: &[u8]) -> Result<i64, ClientError> {
    std::str::from_utf8(line)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            ClientError::Protocol(format!("bad integer {:?}", String::from_utf8_lossy(line)))
        })
}

/// Parses one reply at `buf[at..]`. `Ok(None)`: not complete yet.
fn parse_at(buf: &[u8], at: usize) -> Result<Option<(Reply, usize)>, ClientError> {
    let Some(&kind) = buf.get(at) else {
        return Ok(None);
    };
    let Some(eol) = find_crlf(buf, at + 1) else {
        return Ok(None);
    };
    let line = &buf[at + 1..eol];
    let next = eol + 2;
    let text = || String::from_utf8_lossy(line).into_owned();
    match kind {
        b'+' => Ok(Some((Reply::Status(text()), next))),
        b'-' => Ok(Some((Reply::Error(text()), next))),
        b':' => Ok(Some((Reply::Int(parse_int(line)?), next))),
        b'_' => Ok(Some((Reply::Nil, next))),
        b'$' => {
            let len = parse_int(line)?;
            if len < 0 {
                return Ok(Some((Reply::Nil, next)));
            }
            let end = next + len as usize;
            if buf.len() < end + 2 {
                return Ok(None);
            }
            Ok(Some((Reply::Bulk(buf[next..end].to_vec()), end + 2)))
        }
        b'*' => {
            let n = parse_int(line)?;
            if n < 0 {
                return Ok(Some((Reply::Nil, next)));
            }
            let mut items = Vec::with_capacity(n.min(64) as usize);
            let mut pos = next;
            for _ in 0..n {
                match parse_at(buf, pos)? {
                    Some((item, p)) => {
                        items.push(item);
                        pos = p;
                    }
                    None => return Ok(None),
                }
            }
            Ok(Some((Reply::Array(items), pos)))
        }
        other => Err(ClientError::Protocol(format!(
            "unexpected reply type byte 0x{other:02x}"
        ))),
    }
}

/// One connection: a socket, a read buffer and a write buffer that requests are queued into.
pub struct Conn {
    stream: Box<dyn Stream>,
    rbuf: BytesMut,
    wbuf: Vec<u8>,
}

impl Conn {
    pub async fn connect(addr: SocketAddr) -> io::Result<Conn> {
        Conn::connect_maybe_tls(addr, None).await
    }

    /// Over TLS when `tls` is given (the server's name checked is `localhost`).
    pub async fn connect_maybe_tls(
        addr: SocketAddr,
        tls: Option<&TlsConnector>,
    ) -> io::Result<Conn> {
        let tcp = TcpStream::connect(addr).await?;
        tcp.set_nodelay(true)?;
        let stream: Box<dyn Stream> = match tls {
            None => Box::new(tcp),
            Some(connector) => Box::new(
                connector
                    .connect(ServerName::try_from("localhost").expect("a DNS name"), tcp)
                    .await?,
            ),
        };
        Ok(Conn {
            stream,
            rbuf: BytesMut::with_capacity(16 * 1024),
            wbuf: Vec::with_capacity(4 * 1024),
        })
    }

    /// Queues one request (sent by the next `flush`).
    pub fn push(&mut self, args: &[Arg<'_>]) {
        encode(&mut self.wbuf, args);
    }

    /// Sends everything queued, in one write.
    pub async fn flush(&mut self) -> Result<(), ClientError> {
        if !self.wbuf.is_empty() {
            self.stream.write_all(&self.wbuf).await?;
            self.wbuf.clear();
        }
        Ok(())
    }

    /// Reads the next reply.
    pub async fn read(&mut self) -> Result<Reply, ClientError> {
        loop {
            if let Some((reply, used)) = parse_at(&self.rbuf, 0)? {
                self.rbuf.advance(used);
                return Ok(reply);
            }
            if self.stream.read_buf(&mut self.rbuf).await? == 0 {
                return Err(ClientError::Closed);
            }
        }
    }

    /// One request, one reply.
    pub async fn call(&mut self, args: &[Arg<'_>]) -> Result<Reply, ClientError> {
        self.push(args);
        self.flush().await?;
        self.read().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_multibulk() {
        let mut out = Vec::new();
        encode(
            &mut out,
            &[Arg::B(b"FLOCK.ACQUIRE"), Arg::B(b"a"), Arg::I(5000)],
        );
        assert_eq!(
            out,
            b"*3\r\n$13\r\nFLOCK.ACQUIRE\r\n$1\r\na\r\n$4\r\n5000\r\n"
        );
        out.clear();
        encode(&mut out, &[Arg::I(0), Arg::I(9), Arg::I(10)]);
        assert_eq!(out, b"*3\r\n$1\r\n0\r\n$1\r\n9\r\n$2\r\n10\r\n");
    }

    #[test]
    fn parses_replies() {
        let buf = b":42\r\n$-1\r\n_\r\n+PONG\r\n-NOTOWNER x\r\n$3\r\nabc\r\n*2\r\n:1\r\n$-1\r\n";
        let mut at = 0;
        let mut got = Vec::new();
        while let Some((r, next)) = parse_at(buf, at).unwrap() {
            got.push(r);
            at = next;
        }
        assert_eq!(
            got,
            vec![
                Reply::Int(42),
                Reply::Nil,
                Reply::Nil,
                Reply::Status("PONG".into()),
                Reply::Error("NOTOWNER x".into()),
                Reply::Bulk(b"abc".to_vec()),
                Reply::Array(vec![Reply::Int(1), Reply::Nil]),
            ]
        );
        assert_eq!(at, buf.len());
    }

    #[test]
    fn incomplete_replies_wait_for_more() {
        assert!(parse_at(b"$3\r\nab", 0).unwrap().is_none());
        assert!(parse_at(b":4", 0).unwrap().is_none());
        assert!(parse_at(b"*2\r\n:1\r\n", 0).unwrap().is_none());
        assert!(parse_at(b"", 0).unwrap().is_none());
    }
}
