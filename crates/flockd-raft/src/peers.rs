//! Cluster members as the configuration names them: `id=host:port@cport` (Redis's CLUSTER
//! NODES notation), `@cport` defaulting to port + 10000.

use std::fmt;

use crate::error::StartError;
use crate::types::NodeId;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    pub id: NodeId,
    pub host: String,
    /// The client port.
    pub port: u16,
    /// The cluster port (Raft traffic).
    pub cport: u16,
}

impl Peer {
    /// `host:port@cport`, the form kept in the membership.
    pub fn addr(&self) -> String {
        format!("{}:{}@{}", self.host, self.port, self.cport)
    }
}

impl fmt::Display for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.id, self.addr())
    }
}

/// Parses `host:port[@cport]` for node `id`.
pub fn parse_addr(id: NodeId, addr: &str) -> Result<Peer, StartError> {
    let bad = |why: &str| StartError::BadPeer {
        peer: format!("{id}={addr}"),
        why: why.to_owned(),
    };
    let (hostport, cport) = match addr.split_once('@') {
        Some((hostport, cport)) => (hostport, Some(cport)),
        None => (addr, None),
    };
    let (host, port) = hostport
        .rsplit_once(':')
        .ok_or_else(|| bad("expected host:port[@cport]"))?;
    if host.is_empty() {
        return Err(bad("the host is empty"));
    }
    let port: u16 = port
        .parse()
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| bad("the port is not a number in 1..=65535"))?;
    let cport = match cport {
        Some(c) => c
            .parse()
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| bad("the cluster port is not a number in 1..=65535"))?,
        None => port
            .checked_add(10000)
            .ok_or_else(|| bad("port + 10000 is not a port: give @cport"))?,
    };
    Ok(Peer {
        id,
        host: host.to_owned(),
        port,
        cport,
    })
}

/// Parses `id=host:port[@cport],...` (ids unique, 1..=2^63-1).
pub fn parse_peers(list: &str) -> Result<Vec<Peer>, StartError> {
    let mut peers: Vec<Peer> = Vec::new();
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let bad = |why: &str| StartError::BadPeer {
            peer: item.to_owned(),
            why: why.to_owned(),
        };
        let (id, addr) = item
            .split_once('=')
            .ok_or_else(|| bad("expected id=host:port[@cport]"))?;
        let id: NodeId = id
            .trim()
            .parse()
            .ok()
            .filter(|id| (1..=i64::MAX as u64).contains(id))
            .ok_or_else(|| bad("the node id is not a number in 1..=2^63-1"))?;
        if peers.iter().any(|p| p.id == id) {
            return Err(bad("the node id is given twice"));
        }
        peers.push(parse_addr(id, addr.trim())?);
    }
    if peers.is_empty() {
        return Err(StartError::BadPeer {
            peer: list.to_owned(),
            why: "no peers".to_owned(),
        });
    }
    Ok(peers)
}

/// `host:cport` of a membership address `host:port@cport` (or of `host:port`, + 10000).
pub fn cluster_addr_of(addr: &str) -> String {
    match parse_addr(0, addr) {
        Ok(peer) => format!("{}:{}", peer.host, peer.cport),
        Err(_) => addr.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_parse_with_and_without_the_cluster_port() {
        let peers = parse_peers("1=127.0.0.1:6390@16390, 2=localhost:6391").unwrap();
        assert_eq!(peers[0].addr(), "127.0.0.1:6390@16390");
        assert_eq!(peers[1].cport, 16391);
        assert_eq!(cluster_addr_of("h:1@2"), "h:2");
        for bad in [
            "",
            "1",
            "x=h:1",
            "0=h:1",
            "1=h",
            "1=:5",
            "1=h:0",
            "1=h:70000",
            "1=h:1@x",
            "1=h:60000",
            "1=h:1,1=h:2",
        ] {
            assert!(parse_peers(bad).is_err(), "{bad:?} accepted");
        }
    }
}
