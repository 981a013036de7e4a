//! `flockd ping`: connects to the configured server (same file, variables and flags as the
//! daemon), authenticates if a password is set, and expects +PONG. The container HEALTHCHECK
//! uses it, so the image needs no redis-cli.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::process::ExitCode;
use std::time::Duration;

use crate::config::Config;

pub fn run(config: &Config) -> ExitCode {
    // A server bound to every address is reached over loopback.
    let host = if config.bind.is_unspecified() {
        if config.bind.is_ipv4() {
            IpAddr::from([127, 0, 0, 1])
        } else {
            IpAddr::from([0u16, 0, 0, 0, 0, 0, 0, 1])
        }
    } else {
        config.bind
    };
    match ping(
        SocketAddr::new(host, config.port),
        config.requirepass.as_deref(),
    ) {
        Ok(()) => {
            println!("PONG");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("flockd ping: {e}");
            ExitCode::FAILURE
        }
    }
}

fn ping(addr: SocketAddr, password: Option<&str>) -> Result<(), String> {
    let timeout = Duration::from_secs(3);
    let mut stream = TcpStream::connect_timeout(&addr, timeout)
        .map_err(|e| format!("cannot connect to {addr}: {e}"))?;
    stream
        .set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    let mut request = Vec::new();
    if let Some(password) = password {
        request.extend_from_slice(
            format!("*2\r\n$4\r\nAUTH\r\n${}\r\n{password}\r\n", password.len()).as_bytes(),
        );
    }
    request.extend_from_slice(b"*1\r\n$4\r\nPING\r\n");
    stream.write_all(&request).map_err(|e| e.to_string())?;
    let expected: &[u8] = if password.is_some() {
        b"+OK\r\n+PONG\r\n"
    } else {
        b"+PONG\r\n"
    };
    let mut reply = vec![0u8; expected.len()];
    let mut got = 0;
    while got < reply.len() {
        match stream.read(&mut reply[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) => return Err(format!("no reply from {addr}: {e}")),
        }
    }
    if &reply[..got] == expected {
        Ok(())
    } else {
        Err(format!(
            "unexpected reply from {addr}: {:?}",
            String::from_utf8_lossy(&reply[..got])
        ))
    }
}
