//! The console's query strings: `name=value` pairs split on `&`, percent-decoded into bytes
//! (a lock name is binary-safe, so it comes back as the bytes it is).

use std::ops::RangeInclusive;

use super::error::ConsoleError;

pub struct Query {
    pairs: Vec<(String, Vec<u8>)>,
}

impl Query {
    /// The pairs of `query` (the header limit of the port bounds its size).
    pub fn parse(query: &str) -> Query {
        let pairs = query
            .split('&')
            .filter(|pair| !pair.is_empty())
            .map(|pair| {
                let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
                (
                    String::from_utf8_lossy(&decode(key)).into_owned(),
                    decode(value),
                )
            })
            .collect();
        Query { pairs }
    }

    pub fn bytes(&self, key: &str) -> Option<Vec<u8>> {
        self.pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    }

    pub fn text(&self, key: &str) -> Option<String> {
        self.bytes(key)
            .map(|v| String::from_utf8_lossy(&v).into_owned())
    }

    /// An integer in `range`, `default` when absent.
    pub fn number(
        &self,
        key: &str,
        range: RangeInclusive<u64>,
        default: u64,
    ) -> Result<u64, ConsoleError> {
        let Some(text) = self.text(key) else {
            return Ok(default);
        };
        text.parse::<u64>()
            .ok()
            .filter(|n| range.contains(n))
            .ok_or_else(|| {
                ConsoleError::BadRequest(format!(
                    "{key} must be an integer from {} to {}",
                    range.start(),
                    range.end()
                ))
            })
    }
}

/// Percent-decoding, `+` as a space (as forms encode it); a `%` not followed by two hex digits
/// stays as it is.
fn decode(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |at: usize| {
            bytes
                .get(at)
                .and_then(|&b| (b as char).to_digit(16))
                .map(|d| d as u8)
        };
        match (bytes[i], hex(i + 1), hex(i + 2)) {
            (b'%', Some(high), Some(low)) => {
                out.push(high << 4 | low);
                i += 3;
            }
            (b'+', _, _) => {
                out.push(b' ');
                i += 1;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

/// Percent-encodes `bytes` for a query value: what the page sends back to name a lock exactly,
/// whatever bytes its name holds.
pub fn encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_decode_to_the_bytes_sent() {
        let q = Query::parse("name=a%20b%FF%00c&prefix=x+y&bad=%zz%4&empty=&flag");
        assert_eq!(q.bytes("name").unwrap(), b"a b\xff\x00c");
        assert_eq!(q.text("prefix").unwrap(), "x y");
        assert_eq!(q.bytes("bad").unwrap(), b"%zz%4");
        assert_eq!(q.bytes("empty").unwrap(), b"");
        assert_eq!(q.bytes("flag").unwrap(), b"");
        assert_eq!(q.bytes("missing"), None);
    }

    #[test]
    fn encoding_round_trips() {
        let name = b"orders:42/\xff \x00&=%";
        let q = Query::parse(&format!("name={}", encode(name)));
        assert_eq!(q.bytes("name").unwrap(), name);
    }

    #[test]
    fn numbers_are_checked() {
        let q = Query::parse("count=5&limit=0&x=abc");
        assert_eq!(q.number("count", 1..=10, 3), Ok(5));
        assert_eq!(q.number("absent", 1..=10, 3), Ok(3));
        assert!(q.number("limit", 1..=10, 3).is_err());
        assert!(q.number("x", 1..=10, 3).is_err());
    }
}
