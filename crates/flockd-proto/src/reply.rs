//! Replies and their encoding in RESP2 or RESP3.
//!
//! Handlers build a [`Reply`]; [`encode`] appends its wire form to the connection's
//! output buffer in the connection's [`ProtocolVersion`]. Leaf values that need care
//! (errors, doubles, booleans, verbatim strings) go through the `redis-protocol`
//! crate's borrowed-frame encoders, so nothing is copied into an intermediate frame.
//! The hot leaves (simple strings, integers, nulls, bulk strings) have hand-written fast
//! paths, tested to be byte-identical to the crate's output. Aggregate headers are
//! written here: the crate's RESP3 map and set types are hash-based, which would
//! reorder (and deduplicate) our entries and cost a hash per element.
//!
//! Encoding walks the reply with an explicit stack, so even a deeply nested reply
//! cannot overflow the stack.

use std::borrow::Cow;

use bytes::{BufMut, Bytes, BytesMut};
use redis_protocol::{resp2, resp3};

/// The protocol a connection speaks: RESP2 until `HELLO 3`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ProtocolVersion {
    #[default]
    Resp2,
    Resp3,
}

/// A reply to a client, independent of the protocol version.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    /// `+OK`. Any `\r` or `\n` in the text is sent as a space.
    Simple(Cow<'static, str>),
    /// The full error text including its code, e.g. `"ERR unknown command 'x'"`;
    /// encoded as `-ERR ...\r\n`, with any `\r` or `\n` in it sent as a space.
    Error(Cow<'static, str>),
    Integer(i64),
    Bulk(Bytes),
    /// A missing value: RESP2 `$-1`, RESP3 `_`.
    Null,
    /// A missing array: RESP2 `*-1`, RESP3 `_`.
    NullArray,
    Array(Vec<Reply>),
    /// RESP3 map `%N`; in RESP2 a flat array of `2N` elements.
    Map(Vec<(Reply, Reply)>),
    /// RESP3 set `~N`; in RESP2 an array.
    Set(Vec<Reply>),
    /// RESP3 double `,`; in RESP2 a bulk string with the same text.
    Double(f64),
    /// RESP3 boolean `#t`/`#f`; in RESP2 the integer 1 or 0.
    Boolean(bool),
    /// RESP3 verbatim text `=N\r\ntxt:...`; in RESP2 a bulk string (as Redis does for
    /// `INFO` and `CLIENT INFO`).
    Verbatim(Bytes),
    /// RESP3 push `>N`; in RESP2 an array.
    Push(Vec<Reply>),
}

impl Reply {
    /// `+OK`.
    pub fn ok() -> Reply {
        Reply::Simple(Cow::Borrowed("OK"))
    }

    /// An error reply; `text` includes the code, e.g. `"ERR syntax error"`.
    pub fn error(text: impl Into<Cow<'static, str>>) -> Reply {
        Reply::Error(text.into())
    }

    /// A simple string reply.
    pub fn simple(text: impl Into<Cow<'static, str>>) -> Reply {
        Reply::Simple(text.into())
    }

    /// A bulk string reply.
    pub fn bulk(b: impl Into<Bytes>) -> Reply {
        Reply::Bulk(b.into())
    }

    /// An integer reply.
    pub fn integer(i: i64) -> Reply {
        Reply::Integer(i)
    }

    /// An array of bulk strings.
    pub fn bulk_array<I, B>(items: I) -> Reply
    where
        I: IntoIterator<Item = B>,
        B: Into<Bytes>,
    {
        Reply::Array(items.into_iter().map(Reply::bulk).collect())
    }

    /// Encodes this reply into a fresh buffer (handy in tests and for one-off writes).
    pub fn to_bytes(&self, version: ProtocolVersion) -> BytesMut {
        let mut out = BytesMut::new();
        encode(self, version, &mut out);
        out
    }
}

/// Appends the encoding of `reply` to `out`.
pub fn encode(reply: &Reply, version: ProtocolVersion, out: &mut BytesMut) {
    // Most replies are leaves: no stack needed (and `Vec::new` does not allocate).
    let mut stack: Vec<&Reply> = Vec::new();
    let mut next = Some(reply);
    while let Some(reply) = next {
        match reply {
            Reply::Array(items) => {
                header(out, b'*', items.len());
                stack.extend(items.iter().rev());
            }
            Reply::Set(items) => {
                let kind = if version == ProtocolVersion::Resp3 {
                    b'~'
                } else {
                    b'*'
                };
                header(out, kind, items.len());
                stack.extend(items.iter().rev());
            }
            Reply::Push(items) => {
                let kind = if version == ProtocolVersion::Resp3 {
                    b'>'
                } else {
                    b'*'
                };
                header(out, kind, items.len());
                stack.extend(items.iter().rev());
            }
            Reply::Map(pairs) => {
                if version == ProtocolVersion::Resp3 {
                    header(out, b'%', pairs.len());
                } else {
                    header(out, b'*', pairs.len().saturating_mul(2));
                }
                stack.reserve(pairs.len().saturating_mul(2));
                for (key, value) in pairs.iter().rev() {
                    stack.push(value);
                    stack.push(key);
                }
            }
            leaf => encode_leaf(leaf, version, out),
        }
        next = stack.pop();
    }
}

/// `<kind><n>\r\n`: an aggregate header (or a bulk length line).
fn header(out: &mut BytesMut, kind: u8, n: usize) {
    let mut digits = itoa_buf();
    let text = format_u64(&mut digits, n as u64);
    out.reserve(text.len() + 3);
    out.put_u8(kind);
    out.put_slice(text);
    out.put_slice(b"\r\n");
}

fn encode_leaf(reply: &Reply, version: ProtocolVersion, out: &mut BytesMut) {
    let resp3 = version == ProtocolVersion::Resp3;
    match reply {
        Reply::Simple(text) => {
            let text = one_line(text);
            out.reserve(text.len() + 3);
            out.put_u8(b'+');
            out.put_slice(text.as_bytes());
            out.put_slice(b"\r\n");
        }
        Reply::Integer(i) => {
            let mut digits = itoa_buf();
            let text = format_i64(&mut digits, *i);
            out.reserve(text.len() + 3);
            out.put_u8(b':');
            out.put_slice(text);
            out.put_slice(b"\r\n");
        }
        Reply::Bulk(data) => bulk(out, data),
        Reply::Null if resp3 => out.put_slice(b"_\r\n"),
        Reply::Null => out.put_slice(b"$-1\r\n"),
        Reply::NullArray if resp3 => out.put_slice(b"_\r\n"),
        Reply::NullArray => out.put_slice(b"*-1\r\n"),
        Reply::Error(text) => {
            let text = one_line(text);
            if resp3 {
                let frame = resp3::types::BorrowedFrame::SimpleError {
                    data: &text,
                    attributes: None,
                };
                crate_resp3(out, &frame);
            } else {
                crate_resp2(out, &resp2::types::BorrowedFrame::Error(&text));
            }
        }
        Reply::Double(d) if resp3 => crate_resp3(
            out,
            &resp3::types::BorrowedFrame::Double {
                data: *d,
                attributes: None,
            },
        ),
        Reply::Double(d) => bulk(out, double_text(*d).as_bytes()),
        Reply::Boolean(b) if resp3 => crate_resp3(
            out,
            &resp3::types::BorrowedFrame::Boolean {
                data: *b,
                attributes: None,
            },
        ),
        Reply::Boolean(b) => out.put_slice(if *b { b":1\r\n" } else { b":0\r\n" }),
        Reply::Verbatim(data) if resp3 => crate_resp3(
            out,
            &resp3::types::BorrowedFrame::VerbatimString {
                data,
                format: resp3::types::VerbatimStringFormat::Text,
                attributes: None,
            },
        ),
        Reply::Verbatim(data) => bulk(out, data),
        Reply::Array(_) | Reply::Map(_) | Reply::Set(_) | Reply::Push(_) => {
            unreachable!("aggregates are handled by encode")
        }
    }
}

fn bulk(out: &mut BytesMut, data: &[u8]) {
    let mut digits = itoa_buf();
    let len = format_u64(&mut digits, data.len() as u64);
    out.reserve(len.len() + data.len() + 5);
    out.put_u8(b'$');
    out.put_slice(len);
    out.put_slice(b"\r\n");
    out.put_slice(data);
    out.put_slice(b"\r\n");
}

/// The text of a double, as the `redis-protocol` crate writes RESP3 doubles
/// (`inf`, `-inf`, `nan`, else Rust's shortest round-trip form); RESP2 sends the same
/// text as a bulk string.
fn double_text(d: f64) -> Cow<'static, str> {
    if d.is_nan() {
        Cow::Borrowed("nan")
    } else if d.is_infinite() {
        Cow::Borrowed(if d < 0.0 { "-inf" } else { "inf" })
    } else {
        Cow::Owned(d.to_string())
    }
}

/// Simple strings and errors are one line on the wire: a `\r` or `\n` inside would end
/// the frame early and let the rest be read as another reply. Redis turns them into
/// spaces; so do we (copying only when there is one).
fn one_line(text: &str) -> Cow<'_, str> {
    if text.bytes().any(|b| b == b'\r' || b == b'\n') {
        Cow::Owned(text.replace(['\r', '\n'], " "))
    } else {
        Cow::Borrowed(text)
    }
}

/// The crate encodes into a buffer it has sized itself, so it cannot fail; if it ever
/// did, send a well-formed error rather than a torn frame (and never panic).
fn crate_resp3(out: &mut BytesMut, frame: &resp3::types::BorrowedFrame<'_>) {
    let start = out.len();
    if resp3::encode::complete::extend_encode_borrowed(out, frame, false).is_err() {
        out.truncate(start);
        out.put_slice(b"-ERR internal error encoding reply\r\n");
    }
}

fn crate_resp2(out: &mut BytesMut, frame: &resp2::types::BorrowedFrame<'_>) {
    let start = out.len();
    if resp2::encode::extend_encode_borrowed(out, frame, false).is_err() {
        out.truncate(start);
        out.put_slice(b"-ERR internal error encoding reply\r\n");
    }
}

/// Room for any `i64` in decimal, sign included.
type DigitBuf = [u8; 20];

fn itoa_buf() -> DigitBuf {
    [0; 20]
}

fn format_u64(buf: &mut DigitBuf, mut n: u64) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &buf[i..]
}

fn format_i64(buf: &mut DigitBuf, n: i64) -> &[u8] {
    let start = {
        let len = format_u64(buf, n.unsigned_abs()).len();
        buf.len() - len
    };
    if n < 0 {
        buf[start - 1] = b'-';
        &buf[start - 1..]
    } else {
        &buf[start..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ProtocolVersion::{Resp2, Resp3};

    fn enc(reply: &Reply, version: ProtocolVersion) -> Vec<u8> {
        reply.to_bytes(version).to_vec()
    }

    fn both(reply: Reply, resp2: &[u8], resp3: &[u8]) {
        assert_eq!(
            enc(&reply, Resp2),
            resp2,
            "RESP2 {reply:?}: {:?}",
            String::from_utf8_lossy(&enc(&reply, Resp2))
        );
        assert_eq!(
            enc(&reply, Resp3),
            resp3,
            "RESP3 {reply:?}: {:?}",
            String::from_utf8_lossy(&enc(&reply, Resp3))
        );
    }

    #[test]
    fn every_variant_byte_exact() {
        both(Reply::ok(), b"+OK\r\n", b"+OK\r\n");
        both(Reply::simple("PONG"), b"+PONG\r\n", b"+PONG\r\n");
        both(
            Reply::error("ERR unknown command 'x'"),
            b"-ERR unknown command 'x'\r\n",
            b"-ERR unknown command 'x'\r\n",
        );
        both(Reply::Integer(0), b":0\r\n", b":0\r\n");
        both(Reply::Integer(42), b":42\r\n", b":42\r\n");
        both(
            Reply::Integer(i64::MIN),
            b":-9223372036854775808\r\n",
            b":-9223372036854775808\r\n",
        );
        both(
            Reply::Integer(i64::MAX),
            b":9223372036854775807\r\n",
            b":9223372036854775807\r\n",
        );
        both(Reply::bulk("hello"), b"$5\r\nhello\r\n", b"$5\r\nhello\r\n");
        both(Reply::bulk(""), b"$0\r\n\r\n", b"$0\r\n\r\n");
        both(
            Reply::bulk(&b"a\r\nb\0"[..]),
            b"$5\r\na\r\nb\0\r\n",
            b"$5\r\na\r\nb\0\r\n",
        );
        both(Reply::Null, b"$-1\r\n", b"_\r\n");
        both(Reply::NullArray, b"*-1\r\n", b"_\r\n");
        both(Reply::Array(vec![]), b"*0\r\n", b"*0\r\n");
        both(
            Reply::Array(vec![Reply::bulk("a"), Reply::Integer(1), Reply::Null]),
            b"*3\r\n$1\r\na\r\n:1\r\n$-1\r\n",
            b"*3\r\n$1\r\na\r\n:1\r\n_\r\n",
        );
        both(
            Reply::Map(vec![
                (Reply::bulk("token"), Reply::Integer(7)),
                (Reply::simple("ttl"), Reply::Boolean(true)),
            ]),
            b"*4\r\n$5\r\ntoken\r\n:7\r\n+ttl\r\n:1\r\n",
            b"%2\r\n$5\r\ntoken\r\n:7\r\n+ttl\r\n#t\r\n",
        );
        both(Reply::Map(vec![]), b"*0\r\n", b"%0\r\n");
        both(
            Reply::Set(vec![Reply::bulk("x"), Reply::bulk("x")]),
            b"*2\r\n$1\r\nx\r\n$1\r\nx\r\n",
            b"~2\r\n$1\r\nx\r\n$1\r\nx\r\n",
        );
        both(Reply::Double(1.5), b"$3\r\n1.5\r\n", b",1.5\r\n");
        both(Reply::Double(-2.0), b"$2\r\n-2\r\n", b",-2\r\n");
        both(Reply::Double(f64::INFINITY), b"$3\r\ninf\r\n", b",inf\r\n");
        both(
            Reply::Double(f64::NEG_INFINITY),
            b"$4\r\n-inf\r\n",
            b",-inf\r\n",
        );
        both(Reply::Double(f64::NAN), b"$3\r\nnan\r\n", b",nan\r\n");
        both(Reply::Boolean(true), b":1\r\n", b"#t\r\n");
        both(Reply::Boolean(false), b":0\r\n", b"#f\r\n");
        both(
            Reply::Verbatim(Bytes::from_static(b"# Server\r\nx:1\r\n")),
            b"$15\r\n# Server\r\nx:1\r\n\r\n",
            b"=19\r\ntxt:# Server\r\nx:1\r\n\r\n",
        );
        both(
            Reply::Push(vec![Reply::bulk("message"), Reply::Integer(1)]),
            b"*2\r\n$7\r\nmessage\r\n:1\r\n",
            b">2\r\n$7\r\nmessage\r\n:1\r\n",
        );
        both(
            Reply::Array(vec![
                Reply::Array(vec![Reply::Map(vec![(Reply::bulk("k"), Reply::NullArray)])]),
                Reply::Set(vec![]),
                Reply::Integer(-1),
            ]),
            b"*3\r\n*1\r\n*2\r\n$1\r\nk\r\n*-1\r\n*0\r\n:-1\r\n",
            b"*3\r\n*1\r\n%1\r\n$1\r\nk\r\n_\r\n~0\r\n:-1\r\n",
        );
    }

    #[test]
    fn newlines_never_reach_the_wire_in_one_line_replies() {
        both(
            Reply::error("ERR bad\r\nthing\n+OK\r"),
            b"-ERR bad  thing +OK \r\n",
            b"-ERR bad  thing +OK \r\n",
        );
        both(Reply::simple("a\nb"), b"+a b\r\n", b"+a b\r\n");
        assert_eq!(
            enc(
                &crate::ProtocolError::ExpectedDollar(b'\n').to_reply(),
                Resp2
            ),
            b"-ERR Protocol error: expected '$', got ' '\r\n"
        );
    }

    #[test]
    fn appends_to_existing_output() {
        let mut out = BytesMut::from(&b"+first\r\n"[..]);
        encode(&Reply::Integer(5), Resp2, &mut out);
        encode(&Reply::Null, Resp3, &mut out);
        assert_eq!(&out[..], b"+first\r\n:5\r\n_\r\n");
    }

    #[test]
    fn deep_nesting_does_not_recurse() {
        let mut reply = Reply::Integer(1);
        for _ in 0..100_000 {
            reply = Reply::Array(vec![reply]);
        }
        let out = reply.to_bytes(Resp3);
        assert_eq!(out.len(), 100_000 * 4 + 4);
        // Dropping a deeply nested Reply recurses in the compiler's drop glue; unwind it
        // by hand so the test itself does not overflow.
        let mut cur = reply;
        while let Reply::Array(mut items) = cur {
            cur = items.pop().unwrap();
        }
    }

    /// The fast paths must produce exactly what the crate would.
    #[test]
    fn fast_paths_match_the_crate() {
        use redis_protocol::resp2::types::BytesFrame as F2;
        use redis_protocol::resp3::types::BytesFrame as F3;
        let crate2 = |f: F2| {
            let mut b = BytesMut::new();
            redis_protocol::resp2::encode::extend_encode(&mut b, &f, false).unwrap();
            b
        };
        let crate3 = |f: F3| {
            let mut b = BytesMut::new();
            redis_protocol::resp3::encode::complete::extend_encode(&mut b, &f, false).unwrap();
            b
        };
        let ints = [
            0,
            1,
            -1,
            9,
            10,
            -10,
            12345,
            i64::MIN,
            i64::MAX,
            i64::MIN + 1,
        ];
        for i in ints {
            assert_eq!(Reply::Integer(i).to_bytes(Resp2), crate2(F2::Integer(i)));
            assert_eq!(
                Reply::Integer(i).to_bytes(Resp3),
                crate3(F3::Number {
                    data: i,
                    attributes: None
                })
            );
        }
        for s in ["", "OK", "QUEUED", "a longer simple string with spaces"] {
            assert_eq!(
                Reply::simple(s).to_bytes(Resp2),
                crate2(F2::SimpleString(s.into()))
            );
            assert_eq!(
                Reply::simple(s).to_bytes(Resp3),
                crate3(F3::SimpleString {
                    data: s.into(),
                    attributes: None
                })
            );
        }
        for len in [0usize, 1, 9, 10, 99, 100, 1000, 70_000] {
            let data = Bytes::from(vec![b'x'; len]);
            assert_eq!(
                Reply::Bulk(data.clone()).to_bytes(Resp2),
                crate2(F2::BulkString(data.clone()))
            );
            assert_eq!(
                Reply::Bulk(data.clone()).to_bytes(Resp3),
                crate3(F3::BlobString {
                    data: data.clone(),
                    attributes: None
                })
            );
            // RESP2 doubles and verbatim strings are bulk strings too.
            assert_eq!(
                Reply::Verbatim(data.clone()).to_bytes(Resp2),
                crate2(F2::BulkString(data))
            );
        }
        assert_eq!(Reply::Null.to_bytes(Resp2), crate2(F2::Null));
        assert_eq!(Reply::Null.to_bytes(Resp3), crate3(F3::Null));
        for d in [
            0.0,
            -0.0,
            1.0,
            1.5,
            -3.25,
            1e300,
            1e-300,
            f64::MAX,
            f64::MIN_POSITIVE,
        ] {
            let resp3 = crate3(F3::Double {
                data: d,
                attributes: None,
            });
            let text = &resp3[1..resp3.len() - 2];
            assert_eq!(
                Reply::Double(d).to_bytes(Resp2),
                crate2(F2::BulkString(Bytes::copy_from_slice(text))),
                "{d}"
            );
            assert_eq!(Reply::Double(d).to_bytes(Resp3), resp3);
        }
        // Aggregate headers, against the crate's own arrays.
        let items = vec![Reply::bulk("a"), Reply::Integer(2), Reply::Null];
        assert_eq!(
            Reply::Array(items.clone()).to_bytes(Resp2),
            crate2(F2::Array(vec![
                F2::BulkString("a".into()),
                F2::Integer(2),
                F2::Null
            ]))
        );
        let f3 = vec![
            F3::BlobString {
                data: "a".into(),
                attributes: None,
            },
            F3::Number {
                data: 2,
                attributes: None,
            },
            F3::Null,
        ];
        assert_eq!(
            Reply::Array(items.clone()).to_bytes(Resp3),
            crate3(F3::Array {
                data: f3.clone(),
                attributes: None
            })
        );
        assert_eq!(
            Reply::Push(items).to_bytes(Resp3),
            crate3(F3::Push {
                data: f3,
                attributes: None
            })
        );
        let mut map = redis_protocol::resp3::types::FrameMap::default();
        map.insert(
            F3::BlobString {
                data: "k".into(),
                attributes: None,
            },
            F3::Number {
                data: 1,
                attributes: None,
            },
        );
        assert_eq!(
            Reply::Map(vec![(Reply::bulk("k"), Reply::Integer(1))]).to_bytes(Resp3),
            crate3(F3::Map {
                data: map,
                attributes: None
            })
        );
    }
}
