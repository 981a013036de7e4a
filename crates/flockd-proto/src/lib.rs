//! flockd-proto: flockd's wire layer.
//!
//! Bytes in, requests out: [`RequestParser`] turns what a client sends (RESP multibulk
//! frames or Redis "inline" lines) into [`Request`]s, incrementally and within the
//! bounds of [`Limits`]. It is written for untrusted input: it is flat (no recursion),
//! never allocates what a client merely declares, and never rescans bytes it has
//! already looked at, so a slow or hostile client cannot make it quadratic.
//!
//! Replies out: [`Reply`] is what command handlers produce, and [`encode`] writes it in
//! the connection's [`ProtocolVersion`] (RESP2, or RESP3 after `HELLO 3`), using the
//! `redis-protocol` crate's encoders with byte-identical fast paths for the common
//! leaf replies.
//!
//! The `redis-protocol` crate's *decoder* is deliberately not used: it recurses on
//! nested arrays, and a few kilobytes of `*1\r\n*1\r\n...` overflowed a worker stack.
//!
//! ```
//! use bytes::BytesMut;
//! use flockd_proto::{Limits, ProtocolVersion, Reply, RequestParser, encode};
//!
//! let limits = Limits::default();
//! let mut parser = RequestParser::new();
//! let mut input = BytesMut::from(&b"*1\r\n$4\r\nPING\r\nPING\r\n"[..]);
//! let mut output = BytesMut::new();
//! loop {
//!     match parser.parse(&mut input, &limits) {
//!         Ok(Some(request)) => {
//!             assert!(request.name().eq_ignore_ascii_case(b"ping"));
//!             encode(&Reply::simple("PONG"), ProtocolVersion::Resp2, &mut output);
//!         }
//!         Ok(None) => break, // read more from the socket, append to `input`, repeat
//!         Err(e) => {
//!             encode(&e.to_reply(), ProtocolVersion::Resp2, &mut output);
//!             break; // then close the connection
//!         }
//!     }
//! }
//! assert_eq!(&output[..], b"+PONG\r\n+PONG\r\n");
//! ```

mod error;
mod inline;
mod parser;
mod reply;

pub use error::ProtocolError;
pub use parser::{Limits, Request, RequestParser, parse_int};
pub use reply::{ProtocolVersion, Reply, encode};

/// A lossy, single-line, bounded rendering of client bytes for error texts and client lists.
pub fn printable(bytes: &[u8], max: usize) -> String {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(max)]);
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}
