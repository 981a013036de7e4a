//! Logging: a RUST_LOG-style filter (RUST_LOG wins over `log-level` at start), text or JSON
//! lines on stderr. The filter can change at run time (CONFIG SET log-level); the format cannot.
//!
//! The libraries the cluster runs on speak at INFO and WARN for what is routine to them:
//! openraft logs every vote and every failed heartbeat (ten a second to a dead peer, lines of
//! up to 1,500 characters), the WAL every new chunk file. Unless the filter names them or asks
//! for `debug` or `trace` everywhere, openraft is held to ERROR and the WAL (`raft_log`,
//! `chunked_wal`) to WARN; flockd says what an operator needs (a peer down, back, a leader
//! change) in its own short lines. And no text line at INFO or above is longer than
//! [`MAX_LINE_CHARS`]: a longer one is cut, with `...` at the end.

use std::io::{self, IsTerminal, Write};
use std::sync::OnceLock;

use tracing::{Level, Metadata};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Registry, fmt, reload};

use crate::config::{Config, LogFormat};

/// The longest text line written at INFO, WARN or ERROR, in characters (colour codes aside).
pub const MAX_LINE_CHARS: usize = 300;

/// Libraries whose INFO and WARN lines are their own routine, and the most they say unless the
/// filter names them or asks for debug everywhere.
const QUIET_LIBRARIES: [(&str, Level); 3] = [
    ("openraft", Level::ERROR),
    ("raft_log", Level::WARN),
    ("chunked_wal", Level::WARN),
];

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LoggingError {
    #[error(
        "bad value for 'log-level': {0} (allowed: a RUST_LOG filter such as info or flockd=debug)"
    )]
    Filter(String),
    #[error("cannot change the log filter: {0}")]
    Reload(String),
}

/// The running subscriber's filter, set once by [`init`].
static FILTER: OnceLock<reload::Handle<EnvFilter, Registry>> = OnceLock::new();

pub fn init(config: &Config) -> Result<(), LoggingError> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(from_env) if !from_env.is_empty() => from_env,
        _ => config.log_level.clone(),
    };
    let (filter, handle) = reload::Layer::new(parse_filter(&filter)?);
    let _ = FILTER.set(handle);
    let registry = tracing_subscriber::registry().with(filter);
    let ansi = std::io::stderr().is_terminal();
    match config.log_format {
        LogFormat::Text => registry
            .with(
                fmt::layer()
                    .with_ansi(ansi)
                    .with_writer(ShortLines(std::io::stderr)),
            )
            .init(),
        // A JSON line is for machines: cutting it would break it.
        LogFormat::Json => registry
            .with(
                fmt::layer()
                    .with_ansi(ansi)
                    .with_writer(std::io::stderr)
                    .json(),
            )
            .init(),
    }
    Ok(())
}

/// Checks a `log-level` value and builds the filter it stands for (without applying it).
pub fn parse_filter(filter: &str) -> Result<EnvFilter, LoggingError> {
    EnvFilter::try_new(with_quiet_libraries(filter))
        .map_err(|e| LoggingError::Filter(format!("{filter}: {e}")))
}

/// Replaces the running filter (CONFIG SET log-level): the operator's latest word wins, over
/// RUST_LOG too.
pub fn set_filter(filter: &str) -> Result<(), LoggingError> {
    let filter = parse_filter(filter)?;
    match FILTER.get() {
        Some(handle) => handle
            .reload(filter)
            .map_err(|e| LoggingError::Reload(e.to_string())),
        // No subscriber (a test that never called `init`): nothing to change.
        None => Ok(()),
    }
}

/// `filter` with a directive for each quiet library it does not name: held to its level, or
/// below it if the filter's own default is lower (`warn` keeps openraft at ERROR, `off` off).
/// A default of `debug` or `trace` (or none) leaves them as the filter says.
fn with_quiet_libraries(filter: &str) -> String {
    let directives: Vec<&str> = filter
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .collect();
    // The default level: a directive that is a level alone (EnvFilter takes the last one).
    let Some(default) = directives
        .iter()
        .rev()
        .find_map(|d| d.parse::<tracing::level_filters::LevelFilter>().ok())
    else {
        return filter.to_owned();
    };
    if default >= tracing::level_filters::LevelFilter::DEBUG {
        return filter.to_owned();
    }
    let mut out = directives.join(",");
    for (library, most) in QUIET_LIBRARIES {
        let named = directives.iter().any(|d| {
            let target = d.split(['=', '[']).next().unwrap_or("");
            target == library || target.starts_with(&format!("{library}::"))
        });
        if named {
            continue;
        }
        let level = default.min(tracing::level_filters::LevelFilter::from_level(most));
        if !out.is_empty() {
            out.push(',');
        }
        out.push_str(&format!("{library}={level}"));
    }
    out
}

/// Writes events at INFO and above with every line cut to [`MAX_LINE_CHARS`]; DEBUG and TRACE
/// (asked for on purpose) whole.
struct ShortLines<M>(M);

impl<'a, M: MakeWriter<'a>> MakeWriter<'a> for ShortLines<M> {
    type Writer = LineLimit<M::Writer>;

    fn make_writer(&'a self) -> Self::Writer {
        LineLimit {
            inner: self.0.make_writer(),
            limit: Some(MAX_LINE_CHARS),
        }
    }

    fn make_writer_for(&'a self, meta: &Metadata<'_>) -> Self::Writer {
        LineLimit {
            inner: self.0.make_writer_for(meta),
            limit: (*meta.level() <= Level::INFO).then_some(MAX_LINE_CHARS),
        }
    }
}

/// One event's writer: the formatter hands it the whole formatted event in one write.
struct LineLimit<W> {
    inner: W,
    limit: Option<usize>,
}

impl<W: Write> Write for LineLimit<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let Some(limit) = self.limit else {
            return self.inner.write(buf);
        };
        let text = String::from_utf8_lossy(buf);
        let mut out = String::with_capacity(buf.len().min(4 * limit));
        for line in text.split_inclusive('\n') {
            let (body, end) = match line.strip_suffix('\n') {
                Some(body) => (body, "\n"),
                None => (line, ""),
            };
            out.push_str(&cut_line(body, limit));
            out.push_str(end);
        }
        self.inner.write_all(out.as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// `line` if it shows at most `limit` characters, else its first `limit - 3` and `...`. ANSI
/// colour sequences count for nothing and are never split; a cut line ends with a colour reset.
fn cut_line(line: &str, limit: usize) -> std::borrow::Cow<'_, str> {
    let mut shown = 0;
    let mut cut_at = None;
    let mut chars = line.char_indices().peekable();
    let mut coloured = false;
    while let Some((at, c)) = chars.next() {
        if c == '\x1b' {
            coloured = true;
            // CSI: ESC [ parameters, ended by a byte in @..=~
            if chars.peek().is_some_and(|(_, n)| *n == '[') {
                chars.next();
                for (_, n) in chars.by_ref() {
                    if ('@'..='~').contains(&n) {
                        break;
                    }
                }
            }
            continue;
        }
        shown += 1;
        if shown == limit.saturating_sub(3) + 1 && cut_at.is_none() {
            cut_at = Some(at);
        }
        if shown > limit {
            let at = cut_at.unwrap_or(at);
            let mut cut = String::with_capacity(at + 8);
            cut.push_str(&line[..at]);
            cut.push_str("...");
            if coloured {
                cut.push_str("\x1b[0m");
            }
            return cut.into();
        }
    }
    line.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cluster_libraries_are_quiet_unless_asked() {
        assert_eq!(
            with_quiet_libraries("info"),
            "info,openraft=error,raft_log=warn,chunked_wal=warn"
        );
        assert_eq!(
            with_quiet_libraries("warn,flockd=debug"),
            "warn,flockd=debug,openraft=error,raft_log=warn,chunked_wal=warn"
        );
        assert_eq!(
            with_quiet_libraries("off"),
            "off,openraft=off,raft_log=off,chunked_wal=off"
        );
        assert_eq!(
            with_quiet_libraries("info,openraft=warn"),
            "info,openraft=warn,raft_log=warn,chunked_wal=warn"
        );
        assert_eq!(with_quiet_libraries("debug"), "debug");
        assert_eq!(with_quiet_libraries("flockd=debug"), "flockd=debug");
        assert!(parse_filter("info").is_ok());
        assert!(parse_filter("info,=x").is_err());
    }

    #[test]
    fn long_lines_are_cut_and_short_ones_kept() {
        assert_eq!(cut_line("short", 10), "short");
        assert_eq!(cut_line("0123456789", 10), "0123456789");
        assert_eq!(cut_line("0123456789a", 10), "0123456...");
        assert_eq!(cut_line("ééééééééééé", 10), "ééééééé...");
        let coloured = "\x1b[2m0123\x1b[0m456789ab";
        assert_eq!(cut_line(coloured, 10), "\x1b[2m0123\x1b[0m456...\x1b[0m");
        let mut sink = LineLimit {
            inner: Vec::new(),
            limit: Some(10),
        };
        let event = "0123456789abc\nok\n";
        assert_eq!(sink.write(event.as_bytes()).unwrap(), event.len());
        assert_eq!(String::from_utf8(sink.inner).unwrap(), "0123456...\nok\n");
    }
}
