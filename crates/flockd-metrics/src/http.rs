//! The HTTP port (`metrics-port`): `GET /metrics`, `/livez`, `/readyz`, on hyper, and whatever
//! the daemon's [`Pages`] answer (its console); the rest is 404. A public port
//! gets bounded input: at most [`MAX_CONNECTIONS`] at once (more are closed at accept), headers
//! in [`MAX_HEADER_BYTES`] (hyper answers 431 beyond), all headers within
//! [`HEADER_READ_TIMEOUT`] (a slowloris client is dropped), and request bodies are never read.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hyper::body::Incoming;
use hyper::header::{ALLOW, AUTHORIZATION, CONTENT_TYPE, HeaderName, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::exposition::{self, MetricsSource};
use crate::pages::{PageRequest, Pages, PortBody};

pub const MAX_CONNECTIONS: usize = 64;
pub const MAX_HEADER_BYTES: usize = 16 * 1024;
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const TEXT: &str = "text/plain; charset=utf-8";

struct Endpoints {
    registry: Registry,
    source: Arc<dyn MetricsSource>,
    pages: Option<Arc<dyn Pages>>,
}

/// Serves the endpoints on `listener` until `shutdown`; `pages` answers what they do not.
pub async fn serve(
    listener: TcpListener,
    source: Arc<dyn MetricsSource>,
    pages: Option<Arc<dyn Pages>>,
    shutdown: CancellationToken,
) {
    let local = listener.local_addr().ok();
    let endpoints = Arc::new(Endpoints {
        registry: exposition::registry(source.clone()),
        source,
        pages,
    });
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!("metrics port: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = shutdown.cancelled() => return,
        };
        // Over the limit: closed at once (dropping the stream), nothing buffered for it.
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            continue;
        };
        let endpoints = endpoints.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let endpoints = endpoints.clone();
                let addrs = (peer, local.unwrap_or(peer));
                async move { Ok::<_, Infallible>(respond(&endpoints, &request, addrs)) }
            });
            let connection = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .max_buf_size(MAX_HEADER_BYTES)
                .serve_connection(TokioIo::new(stream), service);
            tokio::pin!(connection);
            tokio::select! {
                result = connection.as_mut() => {
                    if let Err(e) = result {
                        tracing::debug!("metrics port: connection ended: {e}");
                    }
                }
                _ = shutdown.cancelled() => connection.as_mut().graceful_shutdown(),
            }
            drop(slot);
        });
    }
}

fn respond(
    endpoints: &Endpoints,
    request: &Request<Incoming>,
    (peer, local): (std::net::SocketAddr, std::net::SocketAddr),
) -> Response<PortBody> {
    let path = request.uri().path();
    let known = matches!(path, "/metrics" | "/livez" | "/readyz");
    if !known {
        let page = endpoints.pages.as_ref().and_then(|pages| {
            pages.respond(&PageRequest {
                method: request.method().as_str(),
                path,
                query: request.uri().query().unwrap_or(""),
                authorization: request
                    .headers()
                    .get(AUTHORIZATION)
                    .map(HeaderValue::as_bytes),
                peer,
                local,
            })
        });
        if let Some(page) = page {
            let mut response = Response::new(PortBody::from(page.body));
            *response.status_mut() =
                StatusCode::from_u16(page.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            for (name, value) in page.headers {
                if let Ok(value) = HeaderValue::from_str(&value) {
                    response
                        .headers_mut()
                        .append(HeaderName::from_static(name), value);
                }
            }
            return response;
        }
        return plain(
            StatusCode::NOT_FOUND,
            "not found: try /metrics, /livez or /readyz\n",
        );
    }
    if request.method() != Method::GET && request.method() != Method::HEAD {
        let mut response = plain(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n");
        response
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return response;
    }
    match path {
        "/metrics" => {
            let body = exposition::render(&endpoints.registry);
            let mut response = Response::new(PortBody::Whole(Some(Bytes::from(body))));
            response
                .headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static(OPENMETRICS));
            response
        }
        "/livez" => plain(StatusCode::OK, "ok\n"),
        _ => match endpoints.source.ready() {
            Ok(()) => plain(StatusCode::OK, "ready\n"),
            Err(why) => plain(
                StatusCode::SERVICE_UNAVAILABLE,
                &format!("not ready: {why}\n"),
            ),
        },
    }
}

fn plain(status: StatusCode, body: &str) -> Response<PortBody> {
    let mut response = Response::new(PortBody::Whole(Some(Bytes::copy_from_slice(
        body.as_bytes(),
    ))));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(TEXT));
    response
}
