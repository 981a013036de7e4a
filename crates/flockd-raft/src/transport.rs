//! How the cluster port's bytes travel between nodes: over TCP in the server ([`Tcp`], or
//! [`Tls`] with `tls-cluster`), or over
//! an in-memory network ([`memory`]) when tests run a whole cluster in one process and cut its
//! links. The peer protocol above it ([`crate::network`], [`crate::peer_server`]) is the same
//! on both.

use std::io;
use std::net::SocketAddr;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;

/// A boxed future that can cross threads: what the transport and the peer handler return.
pub type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

pub type PeerReader = Box<dyn AsyncRead + Send + Unpin>;
pub type PeerWriter = Box<dyn AsyncWrite + Send + Unpin>;

/// One connection between two nodes, as two halves.
pub struct PeerStream {
    pub reader: PeerReader,
    pub writer: PeerWriter,
    /// Who is at the other end, for logs.
    pub peer: String,
}

pub trait Transport: Send + Sync + 'static {
    /// Connects to the cluster port at `addr` (`host:cport`).
    fn connect<'a>(&'a self, addr: &'a str) -> BoxFuture<'a, io::Result<PeerStream>>;
    /// Listens on this node's cluster port.
    fn listen(&self, addr: SocketAddr) -> BoxFuture<'_, io::Result<Box<dyn Listener>>>;
}

pub trait Listener: Send {
    /// The next connection; an error of kind `NotConnected` means the port is closed for good.
    fn accept(&mut self) -> BoxFuture<'_, io::Result<PeerStream>>;
}

impl PeerStream {
    /// One stream (TLS, an in-memory pipe) as the two halves the peer protocol reads and writes.
    pub fn split<S>(stream: S, peer: impl Into<String>) -> PeerStream
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (reader, writer) = tokio::io::split(stream);
        PeerStream {
            reader: Box::new(reader),
            writer: Box::new(writer),
            peer: peer.into(),
        }
    }
}

/// The cluster port on TCP, with Nagle off (the peer protocol is many small frames).
pub struct Tcp;

fn tcp_stream(stream: tokio::net::TcpStream, peer: String) -> PeerStream {
    let _ = stream.set_nodelay(true);
    let (reader, writer) = stream.into_split();
    PeerStream {
        reader: Box::new(reader),
        writer: Box::new(writer),
        peer,
    }
}

impl Transport for Tcp {
    fn connect<'a>(&'a self, addr: &'a str) -> BoxFuture<'a, io::Result<PeerStream>> {
        Box::pin(async move {
            let stream = tokio::net::TcpStream::connect(addr).await?;
            Ok(tcp_stream(stream, addr.to_owned()))
        })
    }

    fn listen(&self, addr: SocketAddr) -> BoxFuture<'_, io::Result<Box<dyn Listener>>> {
        Box::pin(async move {
            let listener = TcpListener::bind(addr).await?;
            Ok(Box::new(listener) as Box<dyn Listener>)
        })
    }
}

impl Listener for TcpListener {
    fn accept(&mut self) -> BoxFuture<'_, io::Result<PeerStream>> {
        Box::pin(async move {
            let (stream, peer) = TcpListener::accept(self).await?;
            Ok(tcp_stream(stream, peer.to_string()))
        })
    }
}

/// The cluster port on TCP with TLS both ways (`tls-cluster`): a node dials with its client
/// certificate and checks the peer's server certificate against the CA, for the host it dials
/// (so each node's certificate names its host or address); a node accepts only peers whose
/// certificate the CA signed. Handshakes run beside the accept loop, bounded in time, so a slow
/// or wrong client holds up no other.
pub struct Tls {
    pub config: flockd_tls::ClusterTls,
}

/// How long a peer has to finish the TLS handshake.
const TLS_HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

impl Transport for Tls {
    fn connect<'a>(&'a self, addr: &'a str) -> BoxFuture<'a, io::Result<PeerStream>> {
        Box::pin(async move {
            use flockd_tls::tokio_rustls::{TlsConnector, rustls::pki_types::ServerName};
            let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
            let host = host.trim_start_matches('[').trim_end_matches(']');
            let name = ServerName::try_from(host.to_owned())
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
            let stream = tokio::net::TcpStream::connect(addr).await?;
            let _ = stream.set_nodelay(true);
            let connector = TlsConnector::from(self.config.client.clone());
            let tls = tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, connector.connect(name, stream))
                .await
                .map_err(|_| {
                    io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out")
                })??;
            Ok(PeerStream::split(tls, addr))
        })
    }

    fn listen(&self, addr: SocketAddr) -> BoxFuture<'_, io::Result<Box<dyn Listener>>> {
        Box::pin(async move {
            let listener = TcpListener::bind(addr).await?;
            let acceptor = flockd_tls::tokio_rustls::TlsAcceptor::from(self.config.server.clone());
            let (ready, streams) = tokio::sync::mpsc::channel::<PeerStream>(64);
            tokio::spawn(async move {
                loop {
                    let (stream, peer) = match listener.accept().await {
                        Ok(accepted) => accepted,
                        Err(e) => {
                            tracing::warn!("cluster port: accept failed: {e}");
                            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                            continue;
                        }
                    };
                    if ready.is_closed() {
                        return;
                    }
                    let _ = stream.set_nodelay(true);
                    let acceptor = acceptor.clone();
                    let ready = ready.clone();
                    tokio::spawn(async move {
                        match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream))
                            .await
                        {
                            Ok(Ok(tls)) => {
                                let _ = ready.send(PeerStream::split(tls, peer.to_string())).await;
                            }
                            Ok(Err(e)) => {
                                tracing::warn!(
                                    "cluster port: TLS handshake with {peer} failed: {e}"
                                )
                            }
                            Err(_) => {
                                tracing::warn!("cluster port: TLS handshake with {peer} timed out")
                            }
                        }
                    });
                }
            });
            Ok(Box::new(TlsListener { streams }) as Box<dyn Listener>)
        })
    }
}

struct TlsListener {
    streams: tokio::sync::mpsc::Receiver<PeerStream>,
}

impl Listener for TlsListener {
    fn accept(&mut self) -> BoxFuture<'_, io::Result<PeerStream>> {
        Box::pin(async move {
            self.streams
                .recv()
                .await
                .ok_or_else(|| io::Error::from(io::ErrorKind::NotConnected))
        })
    }
}

pub mod memory {
    //! An in-memory network for in-process clusters: every node is an [`Endpoint`] named by its
    //! cluster address; a connection is a pair of in-memory pipes joined by a pump task, so a
    //! test can crash a node (its port closes, every connection to or from it ends) or cut the
    //! links between two nodes, in one direction or both, and heal them again.

    use std::collections::{HashMap, HashSet};
    use std::io;
    use std::net::SocketAddr;
    use std::sync::Arc;

    use parking_lot::Mutex;
    use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
    use tokio::sync::mpsc;
    use tokio_util::sync::CancellationToken;

    use super::BoxFuture;
    use super::{Listener, PeerStream, Transport};

    /// Bytes a pipe buffers before its writer waits (a bounded buffer, as a socket has).
    const PIPE_BUFFER: usize = 256 << 10;
    /// Connections waiting to be accepted on one port.
    const BACKLOG: usize = 64;

    /// One live connection: `from` dialled `to`.
    struct Link {
        from: String,
        to: String,
        cut: CancellationToken,
    }

    #[derive(Default)]
    struct State {
        ports: HashMap<String, mpsc::Sender<PeerStream>>,
        /// (from, to): `from` may not dial `to`.
        cut: HashSet<(String, String)>,
        /// Directions to cut as soon as the next bytes have passed from `from` to `to`.
        cut_after_next: HashSet<(String, String)>,
        links: Vec<Link>,
    }

    impl State {
        fn cut(&mut self, from: &str, to: &str) {
            self.cut.insert((from.to_owned(), to.to_owned()));
            self.links.retain(|link| {
                let dialled = link.from == from && link.to == to;
                if dialled {
                    link.cut.cancel();
                }
                !dialled
            });
        }
    }

    /// The network every endpoint of one test cluster shares.
    #[derive(Clone, Default)]
    pub struct Network {
        state: Arc<Mutex<State>>,
    }

    impl Network {
        pub fn new() -> Network {
            Network::default()
        }

        /// The transport of the node whose cluster address is `addr` (`host:cport`).
        pub fn endpoint(&self, addr: &str) -> Endpoint {
            Endpoint {
                network: self.clone(),
                me: addr.to_owned(),
            }
        }

        /// The node at `addr` is gone: its port closes and every connection to or from it
        /// ends. It may listen again (a restart) with a new endpoint's `listen`.
        pub fn crash(&self, addr: &str) {
            let mut state = self.state.lock();
            state.ports.remove(addr);
            state.links.retain(|link| {
                let touches = link.from == addr || link.to == addr;
                if touches {
                    link.cut.cancel();
                }
                !touches
            });
        }

        /// The connections `from` dialled to `to` end (with whatever was in flight on them,
        /// both ways), and `from` cannot dial `to` until [`Network::heal`]. `to` may still
        /// dial `from`: a node's requests to a peer go on connections it dials, so this stops
        /// the requests of `from` to `to` and leaves those of `to` to `from` alone.
        pub fn cut(&self, from: &str, to: &str) {
            self.state.lock().cut(from, to);
        }

        /// Both directions between `a` and `b`.
        pub fn partition(&self, a: &str, b: &str) {
            let mut state = self.state.lock();
            state.cut(a, b);
            state.cut(b, a);
        }

        /// `from` may dial `to` again.
        pub fn heal(&self, from: &str, to: &str) {
            self.state
                .lock()
                .cut
                .remove(&(from.to_owned(), to.to_owned()));
        }

        /// Once the next bytes have passed from `from` to `to` (they reach `to`), `from` and
        /// `to` are partitioned: whatever `to` answers is lost. How a test makes a request
        /// take effect while its sender cannot know it did.
        pub fn partition_after_next(&self, from: &str, to: &str) {
            self.state
                .lock()
                .cut_after_next
                .insert((from.to_owned(), to.to_owned()));
        }

        /// Whether a `partition_after_next` has not fired yet.
        pub fn armed(&self, from: &str, to: &str) -> bool {
            self.state
                .lock()
                .cut_after_next
                .contains(&(from.to_owned(), to.to_owned()))
        }

        /// Bytes passed from `from` to `to`: fire a waiting `partition_after_next`.
        fn passed(&self, from: &str, to: &str) {
            let mut state = self.state.lock();
            if state
                .cut_after_next
                .remove(&(from.to_owned(), to.to_owned()))
            {
                state.cut(from, to);
                state.cut(to, from);
            }
        }
    }

    /// One node's side of the [`Network`].
    pub struct Endpoint {
        network: Network,
        me: String,
    }

    /// Copies `from`'s bytes into `to` until either side ends, reporting each chunk.
    async fn pump(
        mut from: tokio::io::ReadHalf<DuplexStream>,
        mut to: tokio::io::WriteHalf<DuplexStream>,
        mut passed: impl FnMut(),
    ) {
        let mut buf = vec![0u8; 16 << 10];
        loop {
            match from.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if to.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                    passed();
                }
            }
        }
        let _ = to.shutdown().await;
    }

    fn stream(pipe: DuplexStream, peer: &str) -> PeerStream {
        PeerStream::split(pipe, peer)
    }

    impl Transport for Endpoint {
        fn connect<'a>(&'a self, addr: &'a str) -> BoxFuture<'a, io::Result<PeerStream>> {
            Box::pin(async move {
                let refused = || io::Error::from(io::ErrorKind::ConnectionRefused);
                let (port, cut) = {
                    let mut state = self.network.state.lock();
                    if state.cut.contains(&(self.me.clone(), addr.to_owned())) {
                        return Err(refused());
                    }
                    let port = state.ports.get(addr).cloned().ok_or_else(refused)?;
                    let cut = CancellationToken::new();
                    state.links.push(Link {
                        from: self.me.clone(),
                        to: addr.to_owned(),
                        cut: cut.clone(),
                    });
                    (port, cut)
                };
                let (dialler, dialler_pump) = tokio::io::duplex(PIPE_BUFFER);
                let (listener_pump, listener) = tokio::io::duplex(PIPE_BUFFER);
                port.send(stream(listener, &self.me))
                    .await
                    .map_err(|_| refused())?;
                let (dialler_read, dialler_write) = tokio::io::split(dialler_pump);
                let (listener_read, listener_write) = tokio::io::split(listener_pump);
                let network = self.network.clone();
                let (from, to) = (self.me.clone(), addr.to_owned());
                tokio::spawn(async move {
                    let outbound =
                        pump(dialler_read, listener_write, || network.passed(&from, &to));
                    let inbound = pump(listener_read, dialler_write, || {});
                    tokio::select! {
                        _ = cut.cancelled() => {}
                        _ = async { tokio::join!(outbound, inbound) } => {}
                    }
                    // Dropping the pumps' pipe ends ends the connection for both nodes.
                });
                Ok(stream(dialler, addr))
            })
        }

        fn listen(&self, _addr: SocketAddr) -> BoxFuture<'_, io::Result<Box<dyn Listener>>> {
            Box::pin(async move {
                let (port, incoming) = mpsc::channel(BACKLOG);
                self.network
                    .state
                    .lock()
                    .ports
                    .insert(self.me.clone(), port);
                Ok(Box::new(MemoryListener { incoming }) as Box<dyn Listener>)
            })
        }
    }

    struct MemoryListener {
        incoming: mpsc::Receiver<PeerStream>,
    }

    impl Listener for MemoryListener {
        fn accept(&mut self) -> BoxFuture<'_, io::Result<PeerStream>> {
            Box::pin(async move {
                self.incoming
                    .recv()
                    .await
                    .ok_or_else(|| io::Error::from(io::ErrorKind::NotConnected))
            })
        }
    }
}
