//! Why a console request was refused, and the limits whose breach refuses one.

use flockd_metrics::PageResponse;

/// Server-sent event streams open at once, at most: they hold connections of the metrics
/// port (64 in all), which must stay free for scrapes.
pub const MAX_FEEDS: usize = 16;
/// Held locks one search page returns, at most.
pub const MAX_PAGE: usize = 200;

pub(super) const JSON: &str = "application/json";
const REALM: &str = "Basic realm=\"flockd\", charset=\"UTF-8\"";

/// Why a console request was refused; each maps to an HTTP status.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConsoleError {
    #[error("the server is still loading its data")]
    Loading,
    #[error("authentication required: the Redis port's credentials (HTTP Basic)")]
    Unauthorized,
    #[error("NOPERM User {user} has no permissions to run the '{command}' command")]
    NoPermCommand { user: String, command: &'static str },
    #[error("NOPERM No permissions to access a key")]
    NoPermKey,
    #[error("NOPERM No permissions to access a channel")]
    NoPermChannel,
    #[error("{0}")]
    BadRequest(String),
    #[error("no such console endpoint")]
    NotFound,
    #[error("only GET and HEAD")]
    Method,
    #[error("{MAX_FEEDS} event feeds are open already: close one")]
    TooManyFeeds,
    #[error("max number of clients reached")]
    MaxClients,
}

impl ConsoleError {
    pub(super) fn status(&self) -> u16 {
        match self {
            ConsoleError::Loading => 503,
            ConsoleError::Unauthorized => 401,
            ConsoleError::NoPermCommand { .. }
            | ConsoleError::NoPermKey
            | ConsoleError::NoPermChannel => 403,
            ConsoleError::BadRequest(_) => 400,
            ConsoleError::NotFound => 404,
            ConsoleError::Method => 405,
            ConsoleError::TooManyFeeds | ConsoleError::MaxClients => 429,
        }
    }

    pub(super) fn response(&self) -> PageResponse {
        let body = serde_json::json!({ "error": self.to_string() }).to_string();
        let response =
            PageResponse::whole(self.status(), JSON, body).header("cache-control", "no-store");
        match self {
            ConsoleError::Unauthorized => response.header("www-authenticate", REALM),
            ConsoleError::Method => response.header("allow", "GET, HEAD"),
            _ => response,
        }
    }
}
