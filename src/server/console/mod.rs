//! The console on the metrics port: `GET /` serves one self-contained page (its HTML, CSS and
//! JS are in the binary; it loads nothing from anywhere else), which polls the JSON endpoints
//! under `/console/api/` and follows one lock's events over server-sent events.
//!
//! Lock names are data, so everything but the port's own endpoints asks for the credentials
//! the Redis port asks for: HTTP Basic against `requirepass` (user `default`, or no user name)
//! or an ACL user; with no password set it is as open as the Redis port. Each endpoint stands
//! for a command (INFO, FLOCK.HOT, FLOCK.SCAN and FLOCK.HOLDERS, SUBSCRIBE) that the user must
//! be allowed to run, and shows only the names its key patterns allow. `console no` (CONFIG SET
//! too) answers 404 everywhere here, as before the console existed.

mod api;
mod error;
mod feed;
mod history;
mod query;

use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, OnceLock};

use base64::Engine;
use bytes::Bytes;
use flockd_acl::{Denial, User};
use flockd_metrics::{PageRequest, PageResponse, Pages};

use error::JSON;
pub use error::{ConsoleError, MAX_FEEDS, MAX_PAGE};
use feed::FeedSlot;
pub use history::History;

use crate::server::shared::Shared;

/// The console as the metrics port's [`Pages`]; the server is set once it serves.
pub struct Console {
    shared: OnceLock<Arc<Shared>>,
    /// `console` at start, for the time before the server is set.
    enabled_at_start: bool,
    history: Arc<History>,
    feeds: Arc<AtomicUsize>,
}

impl Console {
    pub fn new(enabled_at_start: bool) -> Console {
        Console {
            shared: OnceLock::new(),
            enabled_at_start,
            history: Arc::new(History::default()),
            feeds: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// The server is up: the console serves it, and samples its stats for the charts.
    pub fn serving(&self, shared: Arc<Shared>) {
        if self.shared.set(shared.clone()).is_ok() {
            tokio::spawn(history::sample(shared, self.history.clone()));
        }
    }

    fn enabled(&self) -> bool {
        match self.shared.get() {
            Some(shared) => shared.config.load().console,
            None => self.enabled_at_start,
        }
    }

    fn answer(&self, request: &PageRequest<'_>) -> Result<PageResponse, ConsoleError> {
        if !matches!(request.method, "GET" | "HEAD") {
            return Err(ConsoleError::Method);
        }
        let shared = self.shared.get().ok_or(ConsoleError::Loading)?;
        let user = authenticate(shared, request)?;
        let query = query::Query::parse(request.query);
        match request.path {
            "/" | "/console" | "/console/" => Ok(page()),
            "/console/api/overview" => {
                allowed(&user, "info")?;
                Ok(json(api::overview(shared, &self.history)))
            }
            "/console/api/hot" => {
                allowed(&user, "flock.hot")?;
                let count = query.number("count", 1..=100, 10)?;
                Ok(json(api::hot(shared, &user, count)))
            }
            "/console/api/locks" => {
                allowed(&user, "flock.scan")?;
                allowed(&user, "flock.holders")?;
                let limit = query.number("limit", 1..=MAX_PAGE as u64, 50)? as usize;
                let prefix = query.bytes("prefix").unwrap_or_default();
                let cursor = api::SearchCursor::parse(&query.text("cursor").unwrap_or_default())?;
                Ok(json(api::locks(shared, &user, &prefix, cursor, limit)))
            }
            "/console/api/events" => {
                allowed(&user, "subscribe")?;
                let name = query
                    .bytes("name")
                    .filter(|n| !n.is_empty())
                    .ok_or_else(|| ConsoleError::BadRequest("name: the lock to follow".into()))?;
                let slot = FeedSlot::take(&self.feeds)?;
                feed::open(shared, user, Bytes::from(name), request, slot)
            }
            _ => Err(ConsoleError::NotFound),
        }
    }
}

impl Pages for Console {
    fn respond(&self, request: &PageRequest<'_>) -> Option<PageResponse> {
        let ours =
            matches!(request.path, "/" | "/console") || request.path.starts_with("/console/");
        if !ours || !self.enabled() {
            return None;
        }
        Some(self.answer(request).unwrap_or_else(|e| e.response()))
    }
}

/// The user the request's credentials name; without credentials, `default` if it needs no
/// password (as a new connection on the Redis port is logged in). A refusal is logged in
/// ACL LOG as a failed AUTH is.
fn authenticate(shared: &Shared, request: &PageRequest<'_>) -> Result<Arc<User>, ConsoleError> {
    let Some(header) = request.authorization else {
        return shared
            .acl
            .user("default")
            .filter(|u| u.enabled && u.nopass)
            .ok_or(ConsoleError::Unauthorized);
    };
    let (name, password) = basic_credentials(header).ok_or(ConsoleError::Unauthorized)?;
    let name = if name.is_empty() { "default" } else { &name };
    match shared.acl.read().authenticate(name, &password) {
        Some(user) => Ok(user),
        None => {
            tracing::warn!(
                user = name,
                addr = %request.peer,
                "console: authentication failed"
            );
            shared.acl.denials.lock().record(
                Denial::Auth,
                "toplevel",
                "AUTH",
                name,
                format!("addr={} laddr={} name=console", request.peer, request.local),
                crate::services::acl::unix_ms(),
            );
            Err(ConsoleError::Unauthorized)
        }
    }
}

/// `Basic base64(user:password)`: the user name and the password.
fn basic_credentials(header: &[u8]) -> Option<(String, Vec<u8>)> {
    let value = std::str::from_utf8(header).ok()?.trim();
    let (scheme, encoded) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let colon = decoded.iter().position(|&b| b == b':')?;
    Some((
        String::from_utf8(decoded[..colon].to_vec()).ok()?,
        decoded[colon + 1..].to_vec(),
    ))
}

fn allowed(user: &User, command: &'static str) -> Result<(), ConsoleError> {
    match crate::commands::permissions::may_run(crate::commands::TABLE, user, command) {
        true => Ok(()),
        false => Err(ConsoleError::NoPermCommand {
            user: user.name.clone(),
            command,
        }),
    }
}

fn json(value: serde_json::Value) -> PageResponse {
    PageResponse::whole(200, JSON, value.to_string()).header("cache-control", "no-store")
}

const PAGE_HTML: &str = include_str!("page.html");
const PAGE_CSS: &str = include_str!("page.css");
const PAGE_JS: &str = include_str!("page.js");

/// The page with its style and script inline, and a Content-Security-Policy that allows
/// exactly those two (by their hashes) and requests to this port only: nothing else loads,
/// and no script that a lock name might smuggle in would run.
struct Page {
    html: Bytes,
    policy: String,
}

fn page() -> PageResponse {
    static PAGE: OnceLock<Page> = OnceLock::new();
    let page = PAGE.get_or_init(|| {
        let hash = |text: &str| {
            use sha2::Digest;
            base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(text))
        };
        Page {
            html: Bytes::from(assemble_page()),
            policy: format!(
                "default-src 'none'; script-src 'sha256-{}'; style-src 'sha256-{}'; \
                 connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; \
                 frame-ancestors 'none'",
                hash(PAGE_JS),
                hash(PAGE_CSS)
            ),
        }
    });
    PageResponse::whole(200, "text/html; charset=utf-8", page.html.clone())
        .header("content-security-policy", page.policy.clone())
        .header("cache-control", "no-store")
        .header("x-content-type-options", "nosniff")
        .header("referrer-policy", "no-referrer")
}

/// The page as served: the HTML with the style and the script in their places.
pub fn assemble_page() -> String {
    PAGE_HTML
        .replacen("<style></style>", &format!("<style>{PAGE_CSS}</style>"), 1)
        .replacen(
            "<script></script>",
            &format!("<script>{PAGE_JS}</script>"),
            1,
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_credentials_are_read_as_browsers_send_them() {
        let encode = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let header = format!("Basic {}", encode("alice:se:cret"));
        assert_eq!(
            basic_credentials(header.as_bytes()),
            Some(("alice".into(), b"se:cret".to_vec()))
        );
        let header = format!("basic {}", encode(":pw"));
        assert_eq!(
            basic_credentials(header.as_bytes()),
            Some((String::new(), b"pw".to_vec()))
        );
        assert_eq!(basic_credentials(b"Bearer abc"), None);
        assert_eq!(basic_credentials(b"Basic !!!"), None);
        assert_eq!(
            basic_credentials(format!("Basic {}", encode("nocolon")).as_bytes()),
            None
        );
    }

    #[test]
    fn the_page_holds_its_style_and_script_and_loads_nothing() {
        let page = assemble_page();
        assert!(page.contains(&format!("<style>{PAGE_CSS}</style>")));
        assert!(page.contains(&format!("<script>{PAGE_JS}</script>")));
        // (The SVG namespace is a name, not a place anything is loaded from; the icon is an
        // empty data: URL, so the browser does not ask for /favicon.ico.)
        assert!(page.contains(r#"<link rel="icon" href="data:,">"#));
        for outside in [
            "stylesheet",
            "src=",
            "@import",
            "url(",
            "import(",
            "https://",
        ] {
            assert!(!page.contains(outside), "the page names {outside}");
        }
    }
}
