//! Pages the daemon serves beside the operator endpoints (its console): a request the port's
//! own endpoints do not answer goes to the daemon's [`Pages`], which answers it or leaves it
//! to the port's 404. The daemon sees a plain request and answers a plain response, so hyper
//! stays in this crate; a response body is either whole or a bounded stream (server-sent
//! events), which ends when the daemon drops its sender.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use tokio::sync::mpsc;

/// What the daemon's pages see of a request.
#[derive(Debug)]
pub struct PageRequest<'a> {
    /// `GET`, `HEAD`, ...
    pub method: &'a str,
    pub path: &'a str,
    /// The query string (without `?`), empty if none.
    pub query: &'a str,
    /// The `Authorization` header's value, as sent.
    pub authorization: Option<&'a [u8]>,
    /// The client's address.
    pub peer: SocketAddr,
    /// The port's own address.
    pub local: SocketAddr,
}

/// A response body: whole, or a stream of chunks that ends when the sender is dropped.
pub enum PageBody {
    Whole(Bytes),
    Stream(mpsc::Receiver<Bytes>),
}

pub struct PageResponse {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub body: PageBody,
}

impl PageResponse {
    pub fn whole(status: u16, content_type: &str, body: impl Into<Bytes>) -> PageResponse {
        PageResponse {
            status,
            headers: vec![("content-type", content_type.to_string())],
            body: PageBody::Whole(body.into()),
        }
    }

    pub fn header(mut self, name: &'static str, value: impl Into<String>) -> PageResponse {
        self.headers.push((name, value.into()));
        self
    }
}

/// The daemon's pages; `None` leaves the request to the port's 404.
pub trait Pages: Send + Sync + 'static {
    fn respond(&self, request: &PageRequest<'_>) -> Option<PageResponse>;
}

/// The body of every response of the port.
pub enum PortBody {
    Whole(Option<Bytes>),
    Stream(mpsc::Receiver<Bytes>),
}

impl From<PageBody> for PortBody {
    fn from(body: PageBody) -> PortBody {
        match body {
            PageBody::Whole(bytes) => PortBody::Whole(Some(bytes)),
            PageBody::Stream(rx) => PortBody::Stream(rx),
        }
    }
}

impl Body for PortBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            PortBody::Whole(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            PortBody::Stream(rx) => rx
                .poll_recv(cx)
                .map(|chunk| chunk.map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, PortBody::Whole(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            PortBody::Whole(bytes) => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
            PortBody::Stream(_) => SizeHint::default(),
        }
    }
}
