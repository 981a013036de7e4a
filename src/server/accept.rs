//! Serving: accept clients on the bound ports (up to `maxclients`, TLS handshakes bounded in
//! time) and hand each to a connection task, until the server stops; then let the connections
//! finish the command in flight, stop the timers and close the log.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use super::connection;
use super::shared::Shared;
use super::start::{Running, ServerError};
use crate::services::stats;

impl Running {
    /// Accepts clients until the server stops, then shuts down cleanly.
    pub async fn serve(self) -> Result<(), ServerError> {
        let Running {
            shared,
            plain,
            tls: tls_listener,
            sentinel: sentinel_listener,
            expiry,
            refused,
            _dir_lock,
        } = self;
        let connections = TaskTracker::new();
        loop {
            let (accepted, over_tls) = tokio::select! {
                accepted = accept_on(plain.as_ref()) => (accepted, false),
                accepted = accept_on(tls_listener.as_ref()) => (accepted, true),
                accepted = accept_on(sentinel_listener.as_ref()) => (accepted, false),
                _ = shared.shutdown.cancelled() => break,
            };
            match accepted {
                Ok((stream, peer)) => accept(&shared, &connections, stream, peer, over_tls),
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
        drop(plain);
        drop(tls_listener);
        drop(sentinel_listener);
        info!(
            "shutting down: waiting for {} connection(s) to finish",
            shared.clients.connected()
        );
        connections.close();
        let grace = Duration::from_millis(shared.config.load().shutdown_timeout_ms);
        if tokio::time::timeout(grace, connections.wait())
            .await
            .is_err()
        {
            warn!("connections still open after {grace:?}; closing them");
        }
        expiry.join_all().await;
        shared.log.close().await;
        match refused.lock().take() {
            Some(why) => Err(ServerError::Refused(why)),
            None => Ok(()),
        }
    }
}

/// The next connection on `listener`; never, without one.
async fn accept_on(listener: Option<&TcpListener>) -> std::io::Result<(TcpStream, SocketAddr)> {
    match listener {
        Some(listener) => listener.accept().await,
        None => std::future::pending().await,
    }
}

/// What a client without a certificate reads on a port that requires one.
const NO_CERTIFICATE_REPLY: &[u8] = b"-ERR TLS client certificate required (tls-auth-clients yes): connect with a certificate the server's CA signed (redis-cli --tls --cert FILE --key FILE)\r\n";

/// How long a client has to finish the TLS handshake.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The TLS handshake of a new connection, or `None` (logged) if it fails. Plain text sent to
/// the TLS port gets a RESP error saying so before the close, so a misconfigured client learns
/// why instead of seeing a reset.
async fn handshake(
    shared: &Shared,
    stream: TcpStream,
    peer: SocketAddr,
) -> Option<flockd_tls::TlsStream<TcpStream>> {
    let acceptor = shared.tls.as_ref()?;
    let mut first = [0u8; 1];
    let peeked = tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, stream.peek(&mut first)).await;
    // 0x16: a TLS handshake record; anything else is not TLS.
    if let Ok(Ok(1)) = peeked
        && first[0] != 0x16
    {
        info!(%peer, "plain text on the TLS port; closed");
        let mut stream = stream;
        let _ = tokio::time::timeout(Duration::from_secs(1), async {
            let _ = stream
                .write_all(b"-ERR this port speaks TLS: connect with TLS (redis-cli --tls)\r\n")
                .await;
            let _ = stream.shutdown().await;
        })
        .await;
        return None;
    }
    match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
        Ok(Ok(flockd_tls::Accepted::Ready(tls))) => Some(tls),
        Ok(Ok(flockd_tls::Accepted::NoCertificate(mut tls))) => {
            // The words a TLS alert cannot carry to redis-cli, which shows an alert as "Server
            // closed the connection": the client reads this as its first reply.
            info!(%peer, "TLS handshake failed: peer sent no certificates");
            let _ = tokio::time::timeout(Duration::from_secs(1), async {
                let _ = tls.write_all(NO_CERTIFICATE_REPLY).await;
                let _ = tls.shutdown().await;
            })
            .await;
            None
        }
        Ok(Err(e)) => {
            info!(%peer, "TLS handshake failed: {e}");
            None
        }
        Err(_) => {
            info!(%peer, "TLS handshake timed out after {TLS_HANDSHAKE_TIMEOUT:?}");
            None
        }
    }
}

fn accept(
    shared: &Arc<Shared>,
    connections: &TaskTracker,
    stream: TcpStream,
    peer: SocketAddr,
    over_tls: bool,
) {
    stats::bump(&shared.stats.connections_received, 1);
    let _ = stream.set_nodelay(true);
    let laddr = stream.local_addr().unwrap_or(shared.local_addr);
    match shared
        .clients
        .register(peer, laddr, shared.config.load().maxclients)
    {
        Some(handle) if over_tls => {
            let shared = shared.clone();
            connections.spawn(async move {
                match handshake(&shared, stream, peer).await {
                    Some(tls) => connection::serve::serve(shared, tls, handle).await,
                    None => shared.clients.unregister(handle.id),
                }
            });
        }
        Some(handle) => {
            connections.spawn(connection::serve::serve(shared.clone(), stream, handle));
        }
        None => {
            // Reply and close off the accept loop, so a flood of refused clients never stalls it.
            stats::bump(&shared.stats.rejected_connections, 1);
            connections.spawn(async move {
                let mut stream = stream;
                let _ = tokio::time::timeout(Duration::from_secs(1), async {
                    let _ = stream
                        .write_all(b"-ERR max number of clients reached\r\n")
                        .await;
                    let _ = stream.shutdown().await;
                })
                .await;
            });
        }
    }
}
