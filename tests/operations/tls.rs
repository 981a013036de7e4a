//! The TLS port against the real binary with real clients: redis-cli --tls, redis-py (Python's
//! ssl) and openssl s_client. Certificates are made fresh per test with rcgen: a CA, the
//! server's (for 127.0.0.1 and localhost), a client's signed by the CA, and a second CA nobody
//! trusts. Each failure (no client certificate, a wrong CA, TLS 1.1, plain text on the TLS
//! port) must be clear to the client and leave the server serving.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::cluster::Cluster;
use crate::common::{Server, TempDir, skipping, wait_until};

struct Pki {
    dir: TempDir,
}

impl Pki {
    fn new() -> Pki {
        let dir = TempDir::new("tls");
        let ca = issue_ca(dir.path(), "ca");
        let other = issue_ca(dir.path(), "other-ca");
        issue(dir.path(), &other, "stranger", "flockd test stranger");
        issue(dir.path(), &ca, "server", "flockd test server");
        issue(dir.path(), &ca, "client", "flockd test client");
        Pki { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn p(&self, name: &str) -> String {
        self.path(name).display().to_string()
    }

    /// The server flags for TLS on a free port with these files.
    fn server_flags(&self, extra: &[&str]) -> Vec<String> {
        let mut flags = vec![
            "--tls-port".to_string(),
            "0".to_string(),
            "--tls-cert-file".to_string(),
            self.p("server.crt"),
            "--tls-key-file".to_string(),
            self.p("server.key"),
            "--tls-ca-cert-file".to_string(),
            self.p("ca.crt"),
        ];
        flags.extend(extra.iter().map(|s| s.to_string()));
        flags
    }
}

type Ca = (rcgen::CertificateParams, rcgen::KeyPair);

fn issue_ca(dir: &Path, name: &str) -> Ca {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("flockd test {name}"));
    let cert = params.self_signed(&key).unwrap();
    std::fs::write(dir.join(format!("{name}.crt")), cert.pem()).unwrap();
    (params, key)
}

fn issue(dir: &Path, ca: &Ca, name: &str, common_name: &str) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params =
        rcgen::CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
            .unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, common_name);
    let issuer = rcgen::Issuer::new(ca.0.clone(), &ca.1);
    let cert = params.signed_by(&key, &issuer).unwrap();
    std::fs::write(dir.join(format!("{name}.crt")), cert.pem()).unwrap();
    std::fs::write(dir.join(format!("{name}.key")), key.serialize_pem()).unwrap();
}

fn tls_addr(server: &Server) -> String {
    let log = server.log();
    let line = log
        .lines()
        .find(|l| l.contains("ready to accept TLS connections on "))
        .unwrap_or_else(|| panic!("no TLS ready line:\n{log}"));
    let at = line.find("connections on ").unwrap() + "connections on ".len();
    line[at..]
        .split(|c: char| c.is_whitespace() || c == '"')
        .next()
        .unwrap()
        .to_string()
}

fn have(program: &str, arg: &str) -> bool {
    Command::new(program)
        .arg(arg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs redis-cli over TLS with `tls` options, the command in `args`; (exit ok, stdout+stderr).
fn cli(addr: &str, tls: &[&str], args: &[&str]) -> (bool, String) {
    let (host, port) = addr.rsplit_once(':').unwrap();
    let out = Command::new("timeout")
        .args(["20", "redis-cli", "--tls", "-h", host, "-p", port])
        .args(tls)
        .args(args)
        .output()
        .expect("run redis-cli");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text.trim().to_string())
}

fn start(pki: &Pki, extra: &[&str]) -> Server {
    let flags = pki.server_flags(extra);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    Server::start_in(&pki.path("data"), &flags)
}

#[test]
fn mutual_tls_with_redis_cli_and_refusals_that_say_why() {
    if !have("redis-cli", "--version") {
        return skipping("redis-cli is not installed");
    }
    let pki = Pki::new();
    let server = start(&pki, &[]);
    let addr = tls_addr(&server);
    let ca = pki.p("ca.crt");
    let (cert, key) = (pki.p("client.crt"), pki.p("client.key"));
    let good = ["--cacert", &ca, "--cert", &cert, "--key", &key];

    assert_eq!(
        cli(&addr, &good, &["FLOCK.ACQUIRE", "tls:lock", "60000"]),
        (true, "1".to_string())
    );
    assert_eq!(
        cli(&addr, &good, &["FLOCK.TOKEN", "tls:lock"]),
        (true, "1".to_string())
    );

    // No client certificate: the default with a CA is mutual TLS.
    let (_, out) = cli(&addr, &["--cacert", &ca], &["PING"]);
    assert!(
        !out.contains("PONG") && !out.is_empty(),
        "a client without a certificate got: {out}"
    );
    // ... and is told why, in words redis-cli prints (a TLS alert shows as "Server closed the
    // connection" there).
    assert!(
        out.contains("TLS client certificate required (tls-auth-clients yes)"),
        "a client without a certificate got: {out}"
    );
    // A client that trusts another CA refuses the server.
    let other = pki.p("other-ca.crt");
    let (_, out) = cli(
        &addr,
        &["--cacert", &other, "--cert", &cert, "--key", &key],
        &["PING"],
    );
    assert!(
        out.contains("certificate verify failed") || out.contains("SSL"),
        "a client trusting another CA got: {out}"
    );
    // A client certificate signed by a CA the server does not trust.
    let (stranger, stranger_key) = (pki.p("stranger.crt"), pki.p("stranger.key"));
    let (_, out) = cli(
        &addr,
        &["--cacert", &ca, "--cert", &stranger, "--key", &stranger_key],
        &["PING"],
    );
    assert!(!out.contains("PONG"), "a stranger's certificate got: {out}");
    wait_until(Duration::from_secs(5), "the refusals are logged", || {
        let log = server.log();
        log.contains("TLS handshake failed: peer sent no certificates")
            && log.contains("TLS handshake failed: invalid peer certificate")
            && log.contains("TLS handshake failed: received fatal alert")
    });

    // Plain text to the TLS port: a RESP error that says what is wrong, then the close.
    let mut plain = common::Raw::connect(addr.parse().unwrap());
    plain.send(b"PING\r\n");
    assert_eq!(
        plain.read_to_close(),
        "-ERR this port speaks TLS: connect with TLS (redis-cli --tls)\r\n"
    );
    // The plain port still serves, and so does TLS.
    server.assert_alive();
    assert_eq!(cli(&addr, &good, &["PING"]), (true, "PONG".to_string()));
}

#[test]
fn old_protocols_are_refused_and_tls_protocols_limits_the_rest() {
    if !have("openssl", "version") {
        return skipping("openssl is not installed");
    }
    let pki = Pki::new();
    let server = start(
        &pki,
        &["--tls-auth-clients", "no", "--tls-protocols", "TLSv1.3"],
    );
    let addr = tls_addr(&server);
    let s_client = |version: &str| {
        let out = Command::new("timeout")
            .args(["20", "openssl", "s_client", "-connect", &addr, version])
            // OpenSSL 3 would not even try TLS 1.1 at its default security level: let it, so
            // the refusal is the server's.
            .args(["-cipher", "DEFAULT@SECLEVEL=0"])
            .args(["-CAfile", &pki.p("ca.crt"), "-verify_return_error"])
            .stdin(Stdio::null())
            .output()
            .expect("run openssl");
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.success(), text)
    };
    let (ok, out) = s_client("-tls1_3");
    assert!(ok && out.contains("New, TLSv1.3, Cipher is"), "{out}");
    let (ok, out) = s_client("-tls1_2");
    assert!(!ok, "TLS 1.2 with tls-protocols TLSv1.3: {out}");
    let (ok, out) = s_client("-tls1_1");
    // The server's alert, not the client giving up on its own.
    assert!(
        !ok && (out.contains("alert handshake failure") || out.contains("alert protocol version")),
        "TLS 1.1: {out}"
    );
    assert!(
        server.log().contains("TLS handshake failed"),
        "{}",
        server.log()
    );
    server.assert_alive();
}

#[test]
fn redis_py_over_tls_and_a_reload_for_new_connections() {
    if Command::new("python3")
        .args(["-c", "import redis"])
        .status()
        .map_or(true, |s| !s.success())
    {
        return skipping("redis-py is not installed (pip install redis)");
    }
    let pki = Pki::new();
    let mut server = start(&pki, &["--tls-auth-clients", "optional"]);
    let addr = tls_addr(&server);
    let (host, port) = addr.rsplit_once(':').unwrap();
    // One client with a certificate, one without (optional), and the server certificate's CN
    // each sees.
    let script = r#"
import redis, ssl, sys
host, port, ca, cert, key, name = sys.argv[1:7]
def conn(with_cert):
    kw = dict(host=host, port=int(port), ssl=True, ssl_ca_certs=ca, ssl_cert_reqs="required",
              socket_timeout=10)
    if with_cert:
        kw.update(ssl_certfile=cert, ssl_keyfile=key)
    return redis.Redis(**kw)
a, b = conn(True), conn(False)
print(a.execute_command("FLOCK.ACQUIRE", name, 60000))
print(b.execute_command("FLOCK.TOKEN", name))
sock = a.connection_pool.get_connection("PING")
peer = sock._sock.getpeercert()
print(dict(x[0] for x in peer["subject"])["commonName"])
"#;
    let run = |script: &str, name: &str| {
        let out = Command::new("timeout")
            .args(["30", "python3", "-c", script, host, port])
            .args([pki.p("ca.crt"), pki.p("client.crt"), pki.p("client.key")])
            .arg(name)
            .output()
            .expect("run python3");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert_eq!(run(script, "py:1"), "1\n1\nflockd test server\n");

    // New certificate files, then SIGHUP: new connections get the new certificate, and a
    // connection opened before keeps working (the same socket, checked in one script).
    std::fs::copy(pki.path("client.crt"), pki.path("server.crt")).unwrap();
    std::fs::copy(pki.path("client.key"), pki.path("server.key")).unwrap();
    let reload = r#"
import os, redis, signal, sys, time
host, port, ca, cert, key, name, pid = sys.argv[1:8]
kw = dict(host=host, port=int(port), ssl=True, ssl_ca_certs=ca, ssl_cert_reqs="required",
          ssl_certfile=cert, ssl_keyfile=key, socket_timeout=10)
old = redis.Redis(**kw)
c = old.connection_pool.get_connection("PING")
c.send_command("FLOCK.TOKEN", "py:1")
print(c.read_response())
before = c._sock.getpeercert()
os.kill(int(pid), signal.SIGHUP)
time.sleep(1)
c.send_command("FLOCK.TOKEN", "py:1")
print(c.read_response(), dict(x[0] for x in before["subject"])["commonName"])
new = redis.Redis(**kw).connection_pool.get_connection("PING")
new.send_command("PING")
new.read_response()
print(dict(x[0] for x in new._sock.getpeercert()["subject"])["commonName"])
"#;
    let pid = server.pid().to_string();
    let out = Command::new("timeout")
        .args(["30", "python3", "-c", reload, host, port])
        .args([pki.p("ca.crt"), pki.p("client.crt"), pki.p("client.key")])
        .args(["py:1", &pid])
        .output()
        .expect("run python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "1\n1 flockd test server\nflockd test client\n",
        "{}",
        server.log()
    );
    assert!(
        server
            .log()
            .contains("SIGHUP: TLS certificates reloaded for new connections")
    );
    assert_eq!(run(script, "py:2"), "1\n1\nflockd test client\n");

    // A bad file by CONFIG SET: refused with the file named, the certificate in use stays.
    let mut raw = server.raw();
    let reply = raw.call(&["CONFIG", "SET", "tls-cert-file", &pki.p("nope.crt")]);
    assert!(
        reply.starts_with("-ERR CONFIG SET failed (possibly related to argument 'tls-cert-file') - cannot read tls-cert-file ")
            && reply.contains("nope.crt"),
        "{reply:?}"
    );
    assert_eq!(run(script, "py:3"), "1\n1\nflockd test client\n");
    server.kill9();
}

#[test]
fn bad_files_stop_the_start_and_name_the_file() {
    let pki = Pki::new();
    let missing = pki.p("missing.key");
    let flags = [
        "--tls-port",
        "0",
        "--tls-cert-file",
        &pki.p("server.crt"),
        "--tls-key-file",
        &missing,
    ];
    let out = common::run_flockd(
        &[&["--port", "0", "--dir", &pki.p("data")][..], &flags[..]].concat(),
        &[],
        Duration::from_secs(20),
    );
    assert!(out.status.is_some_and(|s| !s.success()), "{}", out.stderr);
    assert!(
        out.stderr.contains("tls-key-file") && out.stderr.contains("missing.key"),
        "{}",
        out.stderr
    );
    // tls-auth-clients yes without a CA: refused before anything is read.
    let out = common::run_flockd(
        &[
            "--port",
            "0",
            "--dir",
            &pki.p("data"),
            "--tls-port",
            "0",
            "--tls-cert-file",
            &pki.p("server.crt"),
            "--tls-key-file",
            &pki.p("server.key"),
            "--tls-auth-clients",
            "yes",
        ],
        &[],
        Duration::from_secs(20),
    );
    assert!(out.status.is_some_and(|s| !s.success()), "{}", out.stderr);
    assert!(out.stderr.contains("tls-auth-clients"), "{}", out.stderr);
}

#[test]
fn tls_only_closes_the_plain_port() {
    if !have("redis-cli", "--version") {
        return skipping("redis-cli is not installed");
    }
    use std::io::{BufRead, BufReader};
    let pki = Pki::new();
    let mut flags = pki.server_flags(&["--tls-only", "yes", "--tls-auth-clients", "no"]);
    flags.extend(["--bind", "127.0.0.1", "--dir"].map(String::from));
    flags.push(pki.p("data"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_flockd"))
        .args(&flags)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn flockd");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    let addr = loop {
        let Some(Ok(line)) = lines.next() else {
            let _ = child.kill();
            let _ = child.wait();
            panic!("flockd stopped before its TLS ready line: {seen:?}");
        };
        if let Some(at) = line.find("ready to accept TLS connections on ") {
            break line[at + "ready to accept TLS connections on ".len()..]
                .trim()
                .to_string();
        }
        assert!(seen.len() < 100, "{seen:?}");
        seen.push(line);
    };
    let (ok, out) = cli(&addr, &["--cacert", &pki.p("ca.crt")], &["PING"]);
    let _ = child.kill();
    let _ = child.wait();
    // Everything it logged, before the TLS line and after it until the kill.
    seen.extend(lines.map_while(Result::ok));
    assert_eq!((ok, out.as_str()), (true, "PONG"));
    assert!(
        !seen
            .iter()
            .any(|l| l.contains("ready to accept connections on")),
        "{seen:?}"
    );
}

#[test]
fn the_redis_crate_over_rustls_with_and_without_a_client_certificate() {
    let pki = Pki::new();
    let server = start(&pki, &[]);
    let addr = tls_addr(&server);
    let read = |name: &str| std::fs::read(pki.path(name)).unwrap();
    let client = |with_cert: bool| {
        redis::Client::build_with_tls(
            format!("rediss://{addr}/"),
            redis::TlsCertificates {
                client_tls: with_cert.then(|| redis::ClientTlsConfig {
                    client_cert: read("client.crt"),
                    client_key: read("client.key"),
                }),
                root_cert: Some(read("ca.crt")),
            },
        )
        .unwrap()
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut con = client(true)
            .get_multiplexed_async_connection()
            .await
            .expect("mutual TLS with the CA's client certificate");
        let token: i64 = redis::cmd("FLOCK.ACQUIRE")
            .arg("rs:tls")
            .arg(60_000)
            .query_async(&mut con)
            .await
            .unwrap();
        assert_eq!(token, 1);
        // Without a certificate the server ends the handshake: an error, never a reply.
        let refused = client(false).get_multiplexed_async_connection().await;
        match refused {
            Err(e) => assert!(!e.to_string().is_empty()),
            Ok(mut con) => {
                let r: redis::RedisResult<String> = redis::cmd("PING").query_async(&mut con).await;
                assert!(r.is_err(), "served without a client certificate: {r:?}");
            }
        }
    });
    server.assert_alive();
}

/// `tls-cluster yes`: the cluster port is TLS both ways. A 3-node cluster forms and forwards
/// through it; plain bytes on the cluster port get no answer; openssl s_client gets in with a
/// certificate the CA signed and is refused without one or with a stranger's.
#[test]
fn the_cluster_port_speaks_mutual_tls_with_tls_cluster() {
    let pki = Pki::new();
    let flags = vec![
        "--tls-cluster".to_string(),
        "yes".to_string(),
        "--tls-cert-file".to_string(),
        pki.p("server.crt"),
        "--tls-key-file".to_string(),
        pki.p("server.key"),
        "--tls-ca-cert-file".to_string(),
        pki.p("ca.crt"),
    ];
    let cluster = Cluster::start_with(3, 3, vec![flags; 3]);
    let leader = cluster.wait_for_leader(Duration::from_secs(20));
    let follower = (leader + 1) % 3;
    // A grant and a fenced write through a follower: forwarded to the leader over TLS.
    let token = cluster.call(follower, &["FLOCK.ACQUIRE", "tls:lock", "10000"]);
    assert!(token.starts_with(':'), "{token:?}");
    let token = token.trim().trim_start_matches(':').to_string();
    assert_eq!(
        cluster.call(follower, &["FENCE.SET", "tls:res", &token, "v"]),
        ":1\r\n"
    );
    assert_eq!(
        cluster.call(leader, &["FENCE.TOKEN", "tls:res"]),
        format!(":{token}\r\n")
    );
    let cport = cluster.ports[3 + follower];

    // Plain bytes (a frame as a peer without TLS would send) get nothing but a close.
    let mut plain = std::net::TcpStream::connect(("127.0.0.1", cport)).expect("connect");
    plain
        .set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    use std::io::{Read, Write};
    let _ = plain.write_all(&[0, 0, 0, 12, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0]);
    let mut buf = [0u8; 64];
    let read = plain.read(&mut buf);
    assert!(
        matches!(read, Ok(0) | Err(_)) || buf.first() == Some(&0x15),
        "plain text on the TLS cluster port: {read:?} {buf:?}"
    );

    if !have("openssl", "version") {
        return skipping("openssl is not installed");
    }
    // TLS 1.2, where a refused client certificate ends the handshake itself.
    let s_client = |cert: Option<&str>| {
        let addr = format!("127.0.0.1:{cport}");
        let mut cmd = Command::new("timeout");
        cmd.args(["20", "openssl", "s_client", "-connect", &addr, "-tls1_2"])
            .args([
                "-CAfile",
                &pki.p("ca.crt"),
                "-verify_return_error",
                "-brief",
            ]);
        if let Some(name) = cert {
            cmd.args(["-cert", &pki.p(&format!("{name}.crt"))])
                .args(["-key", &pki.p(&format!("{name}.key"))]);
        }
        let out = cmd.stdin(Stdio::null()).output().expect("run openssl");
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
    };
    let member = s_client(Some("client"));
    assert!(member.contains("CONNECTION ESTABLISHED"), "{member}");
    for (who, cert) in [("no certificate", None), ("a stranger", Some("stranger"))] {
        let out = s_client(cert);
        assert!(!out.contains("CONNECTION ESTABLISHED"), "{who}: {out}");
    }
    // The cluster still works after the refusals.
    assert_eq!(
        cluster.call(follower, &["FLOCK.RELEASE", "tls:lock", &token]),
        ":1\r\n"
    );
}

/// `flockd ping` (the container's HEALTHCHECK) against a TLS-only server with mutual TLS: it
/// takes the same flags as the daemon, after the subcommand, and talks TLS with the `tls-*`
/// files (its certificate is the server's, which the CA signed). A wrong CA is refused clearly.
#[test]
fn ping_reaches_a_tls_only_server_with_the_tls_files() {
    let pki = Pki::new();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string();
    let mut flags = pki.server_flags(&["--tls-only", "yes"]);
    let at = flags.iter().position(|f| f == "--tls-port").unwrap();
    flags[at + 1] = port.clone();
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    // A TLS-only server has no plain ready line: the ping itself says when it is up.
    let data = pki.p("data");
    let mut server = Command::new(env!("CARGO_BIN_EXE_flockd"))
        .args(["--bind", "127.0.0.1", "--dir", &data])
        .args(&flags)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn flockd");
    struct Stop<'a>(&'a mut std::process::Child);
    impl Drop for Stop<'_> {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let server = Stop(&mut server);
    let mut ping = vec!["ping", "--bind", "127.0.0.1"];
    ping.extend(&flags);
    let mut out = common::run_flockd(&ping, &[], Duration::from_secs(20));
    for _ in 0..100 {
        if out.status.is_some_and(|s| s.success()) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        out = common::run_flockd(&ping, &[], Duration::from_secs(20));
    }
    assert_eq!(
        out.status.and_then(|s| s.code()),
        Some(0),
        "stdout {} stderr {}",
        out.stdout,
        out.stderr
    );
    assert_eq!(out.stdout.trim(), "PONG");

    // The server's certificate checked against a CA that did not sign it: a clear refusal.
    let stranger_ca = pki.p("other-ca.crt");
    let at = ping
        .iter()
        .position(|f| *f == "--tls-ca-cert-file")
        .unwrap();
    ping[at + 1] = &stranger_ca;
    let out = common::run_flockd(&ping, &[], Duration::from_secs(20));
    assert_eq!(out.status.and_then(|s| s.code()), Some(1), "{}", out.stderr);
    assert!(
        out.stderr.contains("TLS handshake with 127.0.0.1") && out.stderr.contains("certificate"),
        "{}",
        out.stderr
    );
    assert!(
        server.0.try_wait().unwrap().is_none(),
        "the server still runs"
    );
}

/// `flockd lock` over mutual TLS with the same `tls-*` files as the daemon's flags: CMD runs
/// with its token; without the client certificate the handshake fails and CMD never runs.
#[test]
fn flockd_lock_over_mutual_tls_with_the_tls_files() {
    let pki = Pki::new();
    let server = start(&pki, &[]);
    let url = format!("rediss://{}/", tls_addr(&server));
    let lock = |with_cert: bool| {
        let mut args = vec![
            "lock".to_string(),
            "tls:job".to_string(),
            "--url".to_string(),
            url.clone(),
            "--tls-ca-cert-file".to_string(),
            pki.p("ca.crt"),
        ];
        if with_cert {
            args.extend([
                "--tls-cert-file".to_string(),
                pki.p("client.crt"),
                "--tls-key-file".to_string(),
                pki.p("client.key"),
            ]);
        }
        args.extend(["--", "sh", "-c", "echo token=$FLOCK_TOKEN"].map(String::from));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        common::run_flockd(&args, &[], Duration::from_secs(30))
    };
    let out = lock(true);
    assert_eq!(
        (out.status.and_then(|s| s.code()), out.stdout.as_str()),
        (Some(0), "token=1\n"),
        "{}",
        out.stderr
    );
    let out = lock(false);
    assert_eq!(out.status.and_then(|s| s.code()), Some(125), "{out:?}");
    assert_eq!(out.stdout, "");
    assert!(out.stderr.starts_with("flockd lock: "), "{}", out.stderr);
}

/// An HTTP request on the TLS port runs nothing, as on the plain port: curl's POST over TLS,
/// its body a command, leaves the lock held and is counted.
#[test]
fn an_https_request_on_the_tls_port_runs_nothing() {
    if !have("curl", "--version") {
        return skipping("curl is not installed");
    }
    let pki = Pki::new();
    let server = start(&pki, &["--tls-auth-clients", "no"]);
    let mut raw = server.raw();
    assert_eq!(raw.call(&["FLOCK.ACQUIRE", "victim", "60000"]), ":1\r\n");
    let url = format!("https://{}/", tls_addr(&server));
    let status = Command::new("timeout")
        .args(["20", "curl", "--silent", "--max-time", "10", "--cacert"])
        .arg(pki.p("ca.crt"))
        .args([
            "-X",
            "POST",
            "--data-binary",
            "\r\nFLOCK.FORCERELEASE victim\r\n",
            &url,
        ])
        .stdout(Stdio::null())
        .status()
        .expect("run curl");
    // No HTTP answer: 52 (empty reply) or 56 (reset).
    assert!(matches!(status.code(), Some(52 | 56)), "curl: {status:?}");
    assert_ne!(raw.call(&["FLOCK.TTL", "victim"]), ":-2\r\n");
    assert_eq!(
        common::info_int(&mut raw, "stats", "http_requests_refused"),
        1
    );
}
