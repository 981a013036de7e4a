//! What TLS costs: workload 2 on one flockd with a TLS port beside its plain one, rounds
//! alternating between plain-text connections and TLS connections (rustls, TLS 1.3, server
//! certificate checked, no client certificate); the report gives both medians and the ratio.
//! The certificates are made for the run with rcgen and removed after it.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::{self, RootCertStore};

use crate::paired;
use crate::report;
use crate::servers::{self, Kind, Target};
use crate::workloads::Workload;

/// A CA and a server certificate for `localhost` signed by it, written into `dir`; the
/// connector trusts only that CA.
fn certificates(dir: &Path) -> Result<TlsConnector, String> {
    let bad = |e: rcgen::Error| format!("cannot make a certificate: {e}");
    let ca_key = rcgen::KeyPair::generate().map_err(bad)?;
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(bad)?;
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "flockd-bench CA");
    let ca_cert = ca.self_signed(&ca_key).map_err(bad)?;
    let key = rcgen::KeyPair::generate().map_err(bad)?;
    let server = rcgen::CertificateParams::new(vec!["localhost".to_string()]).map_err(bad)?;
    let cert = server
        .signed_by(&key, &rcgen::Issuer::new(ca, &ca_key))
        .map_err(bad)?;
    let write = |name: &str, pem: String| {
        std::fs::write(dir.join(name), pem).map_err(|e| format!("cannot write {name}: {e}"))
    };
    write("server.crt", cert.pem())?;
    write("server.key", key.serialize_pem())?;
    let mut roots = RootCertStore::empty();
    roots
        .add(ca_cert.der().clone())
        .map_err(|e| format!("the CA: {e}"))?;
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| format!("TLS versions: {e}"))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(TlsConnector::from(Arc::new(config)))
}

/// Removes the certificates' directory however the comparison ends.
struct CertDir(PathBuf);

impl Drop for CertDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The markdown row for `fsync`.
pub async fn cost(
    flockd: &Path,
    fsync: &str,
    w: &Workload,
    rounds: usize,
    duration: Duration,
    seed: &mut u64,
) -> Result<String, String> {
    let dir =
        CertDir(std::env::temp_dir().join(format!("flockd-bench-tls-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).map_err(|e| format!("cannot create a directory: {e}"))?;
    let connector = certificates(&dir.0)?;
    let tls_port = servers::free_port().map_err(|e| format!("cannot pick a port: {e}"))?;
    let file = |name: &str| dir.0.join(name).display().to_string();
    let guard = servers::start_with(
        Kind::Flockd,
        flockd,
        fsync,
        &[
            "--tls-port".into(),
            tls_port.to_string(),
            "--tls-cert-file".into(),
            file("server.crt"),
            "--tls-key-file".into(),
            file("server.key"),
        ],
    )
    .await?;
    let plain = guard.target.clone();
    let pid = guard.running_pid()?;
    let tls = Target {
        addr: SocketAddr::from(([127, 0, 0, 1], tls_port)),
        tls: Some(connector),
        ..Target::flockd(plain.addr)
    };
    let sides = paired::compare(
        fsync,
        w,
        &[(&plain, "plain text", pid), (&tls, "TLS", pid)],
        rounds,
        duration,
        seed,
    )
    .await
    .map_err(|e| format!("{e}\n{}", guard.log_tail()))?;
    drop(guard);
    let mut md = String::new();
    let _ = writeln!(
        md,
        "| {fsync} | {} | {} | **{:.2}x** | {:.2}x | {:.2} | {:.2} |",
        report::fmt_int(sides[0].per_s),
        report::fmt_int(sides[1].per_s),
        sides[1].per_s / sides[0].per_s,
        sides[1].ratio_of_rounds,
        sides[0].cpu_us_per_op,
        sides[1].cpu_us_per_op
    );
    Ok(md)
}
