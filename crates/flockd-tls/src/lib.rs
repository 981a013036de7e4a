//! TLS for flockd's client port (and, with `tls-cluster`, its cluster port), with Redis's settings (`tls-cert-file`, `tls-key-file`,
//! `tls-ca-cert-file`, `tls-auth-clients`, `tls-protocols`) turned into a rustls server
//! configuration. rustls does all of TLS; this crate reads the files, checks them, and keeps
//! the acceptor that new connections use, so a reload (SIGHUP, CONFIG SET) changes what new
//! connections get without touching the open ones.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::version::{TLS12, TLS13};
use tokio_rustls::rustls::{
    self, RootCertStore, ServerConfig, SupportedProtocolVersion, crypto::ring,
};

pub use tokio_rustls;
pub use tokio_rustls::server::TlsStream;

/// `tls-auth-clients`: whether clients must present a certificate signed by the CA.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthClients {
    Yes,
    No,
    Optional,
}

impl AuthClients {
    pub fn as_str(self) -> &'static str {
        match self {
            AuthClients::Yes => "yes",
            AuthClients::No => "no",
            AuthClients::Optional => "optional",
        }
    }
}

impl std::str::FromStr for AuthClients {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        match s.to_ascii_lowercase().as_str() {
            "yes" => Ok(AuthClients::Yes),
            "no" => Ok(AuthClients::No),
            "optional" => Ok(AuthClients::Optional),
            _ => Err(()),
        }
    }
}

/// A protocol version of `tls-protocols`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Tls12,
    Tls13,
}

impl Protocol {
    /// Parses Redis's `tls-protocols` value: `TLSv1.2`, `TLSv1.3` or both, space-separated.
    /// Older versions are not offered by rustls at all, so naming them is an error.
    pub fn parse_list(text: &str) -> Result<Vec<Protocol>, String> {
        let mut out = Vec::new();
        for word in text.split_whitespace() {
            let protocol = match word.to_ascii_lowercase().as_str() {
                "tlsv1.2" => Protocol::Tls12,
                "tlsv1.3" => Protocol::Tls13,
                "tlsv1" | "tlsv1.0" | "tlsv1.1" => {
                    return Err(format!(
                        "{word} is not offered (too old); use TLSv1.2 or TLSv1.3"
                    ));
                }
                _ => return Err(format!("unknown protocol {word}: use TLSv1.2, TLSv1.3")),
            };
            if !out.contains(&protocol) {
                out.push(protocol);
            }
        }
        if out.is_empty() {
            return Err("no protocol: use TLSv1.2, TLSv1.3 or both".into());
        }
        Ok(out)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tls12 => "TLSv1.2",
            Protocol::Tls13 => "TLSv1.3",
        }
    }

    fn rustls(self) -> &'static SupportedProtocolVersion {
        match self {
            Protocol::Tls12 => &TLS12,
            Protocol::Tls13 => &TLS13,
        }
    }
}

/// Everything the TLS port is configured with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsSettings {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    pub ca_cert_file: Option<PathBuf>,
    pub auth_clients: AuthClients,
    pub protocols: Vec<Protocol>,
}

/// Why a TLS configuration could not be made; each names the file at fault.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TlsError {
    #[error("cannot read {what} {path}: {reason}")]
    File {
        what: &'static str,
        path: PathBuf,
        reason: String,
    },
    #[error("{what} {path} holds no {expected}")]
    Empty {
        what: &'static str,
        path: PathBuf,
        expected: &'static str,
    },
    #[error("tls-ca-cert-file {path}: {reason}")]
    BadCa { path: PathBuf, reason: String },
    #[error("tls-auth-clients {0} needs tls-ca-cert-file (the CA that signs client certificates)")]
    NeedsCa(&'static str),
    #[error(
        "tls-cluster needs tls-ca-cert-file: every node checks the others' certificates against that CA"
    )]
    ClusterNeedsCa,
    #[error(
        "a TLS client of this server (flockd ping, flockd lock) needs tls-ca-cert-file to check the server's certificate"
    )]
    ClientNeedsCa,
    #[error("TLS handshake with {addr}: {reason}")]
    Handshake { addr: String, reason: String },
    #[error("tls-cert-file {cert} and tls-key-file {key} do not make a usable pair: {reason}")]
    Pair {
        cert: PathBuf,
        key: PathBuf,
        reason: String,
    },
}

fn file_error(what: &'static str, path: &Path, e: impl fmt::Display) -> TlsError {
    TlsError::File {
        what,
        path: path.to_owned(),
        reason: e.to_string(),
    }
}

fn certificates(what: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_error(what, path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(what, path, e))?;
    if certs.is_empty() {
        return Err(TlsError::Empty {
            what,
            path: path.to_owned(),
            expected: "PEM certificate",
        });
    }
    Ok(certs)
}

fn private_key(settings: &TlsSettings) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(&settings.key_file).map_err(|e| match e {
        rustls_pki_types::pem::Error::NoItemsFound => TlsError::Empty {
            what: "tls-key-file",
            path: settings.key_file.clone(),
            expected: "PEM private key",
        },
        other => file_error("tls-key-file", &settings.key_file, other),
    })
}

fn root_store(ca: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in certificates("tls-ca-cert-file", ca)? {
        roots.add(cert).map_err(|e| TlsError::BadCa {
            path: ca.to_owned(),
            reason: e.to_string(),
        })?;
    }
    Ok(roots)
}

fn pair_error(settings: &TlsSettings, e: impl fmt::Display) -> TlsError {
    TlsError::Pair {
        cert: settings.cert_file.clone(),
        key: settings.key_file.clone(),
        reason: e.to_string(),
    }
}

/// TLS on the cluster port, both ends: each node shows its certificate (`tls-cert-file`) to
/// the others and checks theirs against `tls-ca-cert-file`, as server and as client (mutual
/// TLS), so only holders of a certificate the CA signed can join the Raft traffic.
#[derive(Clone)]
pub struct ClusterTls {
    pub server: Arc<ServerConfig>,
    pub client: Arc<rustls::ClientConfig>,
}

/// The cluster port's TLS from the same files as the client port's.
pub fn cluster_tls(settings: &TlsSettings) -> Result<ClusterTls, TlsError> {
    let Some(ca) = &settings.ca_cert_file else {
        return Err(TlsError::ClusterNeedsCa);
    };
    let server = server_config(&TlsSettings {
        auth_clients: AuthClients::Yes,
        ..settings.clone()
    })?;
    Ok(ClusterTls {
        server,
        client: client_config(settings, ca)?,
    })
}

/// A client's side of the same files: it checks the server against `ca` and shows
/// `tls-cert-file` as its own certificate (what a server with `tls-auth-clients yes` asks).
fn client_config(settings: &TlsSettings, ca: &Path) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let versions: Vec<&'static SupportedProtocolVersion> =
        settings.protocols.iter().map(|p| p.rustls()).collect();
    let client = rustls::ClientConfig::builder_with_provider(Arc::new(ring::default_provider()))
        .with_protocol_versions(&versions)
        .map_err(|e| pair_error(settings, e))?
        .with_root_certificates(root_store(ca)?)
        .with_client_auth_cert(
            certificates("tls-cert-file", &settings.cert_file)?,
            private_key(settings)?,
        )
        .map_err(|e| pair_error(settings, e))?;
    Ok(Arc::new(client))
}

/// A blocking TLS connection to this server's TLS port, for the command-line tools that talk
/// to it with the server's own settings (`flockd ping`): the handshake is done when this
/// returns, so a refused certificate is an error here, not a silent close later.
pub fn connect_blocking(
    settings: &TlsSettings,
    tcp: std::net::TcpStream,
) -> Result<rustls::StreamOwned<rustls::ClientConnection, std::net::TcpStream>, TlsError> {
    let ca = settings
        .ca_cert_file
        .as_ref()
        .ok_or(TlsError::ClientNeedsCa)?;
    let config = client_config(settings, ca)?;
    let peer = tcp.peer_addr().map_err(|e| TlsError::Handshake {
        addr: "the server".into(),
        reason: e.to_string(),
    })?;
    let handshake_error = |reason: String| TlsError::Handshake {
        addr: peer.to_string(),
        reason,
    };
    let name = rustls::pki_types::ServerName::IpAddress(peer.ip().into());
    let connection =
        rustls::ClientConnection::new(config, name).map_err(|e| handshake_error(e.to_string()))?;
    let mut stream = rustls::StreamOwned::new(connection, tcp);
    while stream.conn.is_handshaking() {
        stream
            .conn
            .complete_io(&mut stream.sock)
            .map_err(|e| handshake_error(e.to_string()))?;
    }
    Ok(stream)
}

/// The rustls configuration `settings` describe, with every file read and checked now.
pub fn server_config(settings: &TlsSettings) -> Result<Arc<ServerConfig>, TlsError> {
    let provider = Arc::new(ring::default_provider());
    let chain = certificates("tls-cert-file", &settings.cert_file)?;
    let key = private_key(settings)?;
    let versions: Vec<&'static SupportedProtocolVersion> =
        settings.protocols.iter().map(|p| p.rustls()).collect();
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(|e| pair_error(settings, e))?;
    let builder = match (&settings.ca_cert_file, settings.auth_clients) {
        (None, AuthClients::No) => builder.with_no_client_auth(),
        (None, other) => return Err(TlsError::NeedsCa(other.as_str())),
        (Some(_), AuthClients::No) => builder.with_no_client_auth(),
        (Some(ca), auth) => {
            let verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(root_store(ca)?), provider);
            let verifier = match auth {
                AuthClients::Optional => verifier.allow_unauthenticated(),
                _ => verifier,
            };
            let verifier = verifier.build().map_err(|e| TlsError::BadCa {
                path: ca.clone(),
                reason: e.to_string(),
            })?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let config = builder
        .with_single_cert(chain, key)
        .map_err(|e: rustls::Error| pair_error(settings, e))?;
    Ok(Arc::new(config))
}

/// The acceptor new connections use; [`Acceptor::reload`] replaces it for connections made
/// after, and open ones keep theirs.
pub struct Acceptor {
    current: ArcSwap<ClientPort>,
}

/// The client port's configuration and whether it insists on a client certificate.
struct ClientPort {
    acceptor: TlsAcceptor,
    certificate_required: bool,
}

/// A finished handshake on the client port.
pub enum Accepted<S> {
    /// Serve it.
    Ready(TlsStream<S>),
    /// The client showed no certificate where `tls-auth-clients yes` asks for one. The
    /// handshake let it through so that the server can say so in a RESP error the client
    /// prints (a TLS alert shows as "Server closed the connection" in redis-cli); nothing it
    /// sends is read.
    NoCertificate(TlsStream<S>),
}

impl ClientPort {
    /// With `tls-auth-clients yes` the handshake itself only refuses certificates the CA did
    /// not sign; a missing one is refused after it, by [`Acceptor::accept`]'s caller.
    fn new(settings: &TlsSettings) -> Result<ClientPort, TlsError> {
        let certificate_required =
            settings.auth_clients == AuthClients::Yes && settings.ca_cert_file.is_some();
        let handshake = match certificate_required {
            true => TlsSettings {
                auth_clients: AuthClients::Optional,
                ..settings.clone()
            },
            false => settings.clone(),
        };
        Ok(ClientPort {
            acceptor: TlsAcceptor::from(server_config(&handshake)?),
            certificate_required,
        })
    }
}

impl Acceptor {
    pub fn new(settings: &TlsSettings) -> Result<Acceptor, TlsError> {
        Ok(Acceptor {
            current: ArcSwap::from_pointee(ClientPort::new(settings)?),
        })
    }

    /// Reads the files again; on any error the acceptor in use stays.
    pub fn reload(&self, settings: &TlsSettings) -> Result<(), TlsError> {
        let next = ClientPort::new(settings)?;
        self.current.store(Arc::new(next));
        Ok(())
    }

    /// The TLS handshake on `stream`, with the configuration in force now.
    pub async fn accept<S>(&self, stream: S) -> std::io::Result<Accepted<S>>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let port = self.current.load_full();
        let tls = port.acceptor.accept(stream).await?;
        let shown = tls
            .get_ref()
            .1
            .peer_certificates()
            .is_some_and(|c| !c.is_empty());
        Ok(match port.certificate_required && !shown {
            true => Accepted::NoCertificate(tls),
            false => Accepted::Ready(tls),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Files {
        dir: PathBuf,
    }

    impl Drop for Files {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    fn files(tag: &str) -> (Files, TlsSettings) {
        let dir = std::env::temp_dir().join(format!("flockd-tls-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        std::fs::write(dir.join("ca.crt"), ca.pem()).unwrap();
        std::fs::write(dir.join("server.crt"), cert.pem()).unwrap();
        std::fs::write(dir.join("server.key"), key.serialize_pem()).unwrap();
        let settings = TlsSettings {
            cert_file: dir.join("server.crt"),
            key_file: dir.join("server.key"),
            ca_cert_file: Some(dir.join("ca.crt")),
            auth_clients: AuthClients::Yes,
            protocols: vec![Protocol::Tls12, Protocol::Tls13],
        };
        (Files { dir }, settings)
    }

    #[test]
    fn good_files_make_a_configuration_in_every_mode() {
        let (_files, settings) = files("good");
        for auth in [AuthClients::Yes, AuthClients::No, AuthClients::Optional] {
            let s = TlsSettings {
                auth_clients: auth,
                ..settings.clone()
            };
            assert!(server_config(&s).is_ok(), "{auth:?}");
        }
        let only13 = TlsSettings {
            protocols: vec![Protocol::Tls13],
            ..settings.clone()
        };
        assert!(server_config(&only13).is_ok());
    }

    #[test]
    fn bad_files_are_named() {
        let (files, settings) = files("bad");
        let missing = TlsSettings {
            cert_file: files.dir.join("nope.crt"),
            ..settings.clone()
        };
        let e = server_config(&missing).unwrap_err().to_string();
        assert!(
            e.starts_with("cannot read tls-cert-file ") && e.contains("nope.crt"),
            "{e}"
        );
        std::fs::write(files.dir.join("empty.pem"), "not a pem\n").unwrap();
        let no_key = TlsSettings {
            key_file: files.dir.join("empty.pem"),
            ..settings.clone()
        };
        let e = server_config(&no_key).unwrap_err().to_string();
        assert!(
            e.contains("tls-key-file")
                && e.contains("empty.pem")
                && e.contains("no PEM private key"),
            "{e}"
        );
        // The CA's certificate as the server's key pair: not a pair.
        let mismatch = TlsSettings {
            cert_file: files.dir.join("ca.crt"),
            ..settings.clone()
        };
        let e = server_config(&mismatch).unwrap_err().to_string();
        assert!(e.contains("do not make a usable pair"), "{e}");
        let no_ca = TlsSettings {
            ca_cert_file: None,
            ..settings.clone()
        };
        assert_eq!(
            server_config(&no_ca).unwrap_err().to_string(),
            "tls-auth-clients yes needs tls-ca-cert-file (the CA that signs client certificates)"
        );
    }

    #[test]
    fn protocol_lists_parse_like_redis() {
        assert_eq!(
            Protocol::parse_list("TLSv1.2 TLSv1.3"),
            Ok(vec![Protocol::Tls12, Protocol::Tls13])
        );
        assert_eq!(Protocol::parse_list("tlsv1.3"), Ok(vec![Protocol::Tls13]));
        assert!(
            Protocol::parse_list("TLSv1.1")
                .unwrap_err()
                .contains("too old")
        );
        assert!(Protocol::parse_list("SSLv3").is_err());
        assert!(Protocol::parse_list("").is_err());
    }
}
