//! A cluster of real `flockd` processes on loopback ports, for the tests that need one
//! (tests/cluster/cluster.rs, tests/cluster/sentinel.rs): started, killed and restarted by index, asked by raw
//! RESP, waited on for an agreed leader.

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener};
use std::time::{Duration, Instant};

use super::load::{Client, Rng};
use super::{Server, TempDir};

/// Ports for every node (client and cluster), bound once to be free, then released.
///
/// They are taken below the kernel's ephemeral range, not from it (as a bind to port 0
/// would): a node starts after its peers, and meanwhile their outgoing connections take local
/// ports from that range, which once took a port kept for a node ("Address already in use").
pub fn free_ports(n: usize) -> Vec<u16> {
    let below = ephemeral_range_start().max(2048);
    let lowest = 1024u32;
    let span = below as u32 - lowest;
    // Where to look differs per process and call, so parallel tests rarely meet.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut rng = Rng((u64::from(std::process::id()) << 32) ^ now);
    let mut listeners: Vec<TcpListener> = Vec::with_capacity(n);
    for _ in 0..span.min(100_000) {
        if listeners.len() == n {
            break;
        }
        let port = (lowest + rng.below(u64::from(span)) as u32) as u16;
        if let Ok(listener) = TcpListener::bind(("127.0.0.1", port)) {
            listeners.push(listener);
        }
    }
    assert_eq!(listeners.len(), n, "no {n} free ports under {below}");
    listeners
        .iter()
        .map(|l| l.local_addr().expect("addr").port())
        .collect()
}

/// The first port the kernel hands to outgoing connections (Linux's default, 32768, if it
/// cannot be read).
fn ephemeral_range_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768)
}

pub struct Cluster {
    pub dirs: Vec<TempDir>,
    pub nodes: Vec<Option<Server>>,
    /// The members a new cluster forms with (the first `founders` nodes).
    pub founders: usize,
    pub ports: Vec<u16>,
    /// More arguments for node `i`'s start, if any.
    pub extra_args: Vec<Vec<String>>,
    /// Every node's `log-level`.
    pub log_level: &'static str,
}

/// The `log-level` the cluster tests run at: openraft's warnings too, to help read a failure.
const TEST_LOG_LEVEL: &str = "info,openraft=warn";

impl Cluster {
    pub fn start(n: usize) -> Cluster {
        Self::start_of(n, n)
    }

    /// Ports and dirs for `capacity` nodes; the first `founders` are started and form the
    /// cluster, the others can be started later to join it.
    pub fn start_of(founders: usize, capacity: usize) -> Cluster {
        Self::start_with(founders, capacity, Vec::new())
    }

    /// [`Cluster::start`] with every node at `log-level` `level` (as an operator runs it, say).
    pub fn start_logging_at(n: usize, level: &'static str) -> Cluster {
        Self::start_configured(n, n, Vec::new(), level)
    }

    /// [`Cluster::start_of`], node `i` started with `extra_args[i]` too.
    pub fn start_with(founders: usize, capacity: usize, extra_args: Vec<Vec<String>>) -> Cluster {
        Self::start_configured(founders, capacity, extra_args, TEST_LOG_LEVEL)
    }

    fn start_configured(
        founders: usize,
        capacity: usize,
        extra_args: Vec<Vec<String>>,
        log_level: &'static str,
    ) -> Cluster {
        let ports = free_ports(2 * capacity);
        let dirs: Vec<TempDir> = (0..capacity)
            .map(|i| TempDir::new(&format!("cluster{i}")))
            .collect();
        let mut cluster = Cluster {
            dirs,
            nodes: (0..capacity).map(|_| None).collect(),
            founders,
            ports,
            extra_args,
            log_level,
        };
        for i in 0..founders {
            cluster.start_node(i);
        }
        cluster
    }

    /// `id=host:port@cport` of node `i`.
    pub fn peer(&self, i: usize) -> String {
        let capacity = self.nodes.len();
        format!(
            "{}=127.0.0.1:{}@{}",
            i + 1,
            self.ports[i],
            self.ports[capacity + i]
        )
    }

    /// `host:port@cport` of node `i`, as FLOCK.CLUSTER ADD takes it.
    pub fn address(&self, i: usize) -> String {
        self.peer(i).split_once('=').expect("id=").1.to_string()
    }

    /// The founders, plus node `i` itself when it joins later.
    pub fn peers_for(&self, i: usize) -> String {
        let mut peers: Vec<String> = (0..self.founders).map(|j| self.peer(j)).collect();
        if i >= self.founders {
            peers.push(self.peer(i));
        }
        peers.join(",")
    }

    pub fn start_node(&mut self, i: usize) {
        let peers = self.peers_for(i);
        self.start_node_with(i, &peers);
    }

    pub fn start_node_with(&mut self, i: usize, peers: &str) {
        let mut args = vec![
            "--bind".to_string(),
            "127.0.0.1".to_string(),
            "--port".to_string(),
            self.ports[i].to_string(),
            "--dir".to_string(),
            self.dirs[i].path().display().to_string(),
            "--node-id".to_string(),
            (i + 1).to_string(),
            "--cluster-peers".to_string(),
            peers.to_string(),
        ];
        if let Some(extra) = self.extra_args.get(i) {
            args.extend(extra.iter().cloned());
        }
        let server = Server::try_spawn(
            self.dirs[i].path(),
            args,
            &[("FLOCKD_LOG_LEVEL", self.log_level)],
        )
        .unwrap_or_else(|log| panic!("node {} did not start:\n{log}", i + 1));
        self.nodes[i] = Some(server);
    }

    pub fn kill(&mut self, i: usize) {
        if let Some(mut node) = self.nodes[i].take() {
            node.kill9();
        }
    }

    pub fn call(&self, i: usize, args: &[&str]) -> String {
        let mut c = Client::connect(self.addr(i)).expect("connect");
        c.call(args)
            .unwrap_or_else(|e| panic!("node {}: {args:?}: {e}\n{}", i + 1, self.logs()))
    }

    pub fn addr(&self, i: usize) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.ports[i]))
    }

    pub fn addrs(&self) -> Vec<SocketAddr> {
        (0..self.nodes.len()).map(|i| self.addr(i)).collect()
    }

    pub fn logs(&self) -> String {
        let mut out = String::new();
        for (i, node) in self.nodes.iter().enumerate() {
            if let Some(node) = node {
                let log = node.log();
                let tail: Vec<&str> = log.lines().rev().take(40).collect();
                out.push_str(&format!("--- node {} (last lines)\n", i + 1));
                for line in tail.into_iter().rev() {
                    out.push_str(line);
                    out.push('\n');
                }
            }
        }
        out
    }

    /// INFO replication of node `i`, as key -> value (empty if it does not answer).
    pub fn replication(&self, i: usize) -> HashMap<String, String> {
        let Ok(mut c) = Client::connect(self.addr(i)) else {
            return HashMap::new();
        };
        let Ok(reply) = c.call(&["INFO", "replication"]) else {
            return HashMap::new();
        };
        reply
            .lines()
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.to_string(), v.trim().to_string()))
            .collect()
    }

    /// Commands the running nodes forwarded to a leader (INFO replication's
    /// `raft_forwarded_commands`), summed: near zero when clients route by slot.
    pub fn forwarded(&self) -> u64 {
        (0..self.nodes.len())
            .filter(|i| self.nodes[*i].is_some())
            .map(|i| {
                self.replication(i)
                    .get("raft_forwarded_commands")
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0)
            })
            .sum()
    }

    /// Waits until the running nodes agree on one leader; returns its index.
    pub fn wait_for_leader(&self, timeout: Duration) -> usize {
        let deadline = Instant::now() + timeout;
        loop {
            let running: Vec<usize> = (0..self.nodes.len())
                .filter(|i| self.nodes[*i].is_some())
                .collect();
            let leaders: Vec<String> = running
                .iter()
                .map(|i| {
                    self.replication(*i)
                        .get("raft_leader_id")
                        .cloned()
                        .unwrap_or_default()
                })
                .collect();
            if let Some(first) = leaders.first()
                && first != "0"
                && !first.is_empty()
                && leaders.iter().all(|l| l == first)
            {
                let id: usize = first.parse().expect("leader id");
                if self.nodes[id - 1].is_some()
                    && self
                        .replication(id - 1)
                        .get("raft_state")
                        .map(String::as_str)
                        == Some("leader")
                {
                    return id - 1;
                }
            }
            assert!(
                Instant::now() < deadline,
                "no agreed leader within {timeout:?}: {leaders:?}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
