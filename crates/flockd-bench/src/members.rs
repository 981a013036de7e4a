//! The processes of a benchmark cluster (flockd's or etcd's): started on free loopback ports
//! with a data directory each, stopped by pid and their directories removed when the guard
//! drops. Both the flockd cluster and the etcd comparison use it.

use std::fs::{self, File};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Child;
use std::time::{Duration, Instant};

use crate::servers;

/// The processes of one cluster (flockd or etcd), stopped by pid and their directories removed
/// when it drops.
pub struct ClusterGuard {
    children: Vec<Child>,
    dirs: Vec<PathBuf>,
    addrs: Vec<SocketAddr>,
}

impl ClusterGuard {
    /// A guard for members that will serve clients on `addrs`, in that order.
    pub fn new(addrs: Vec<SocketAddr>) -> ClusterGuard {
        ClusterGuard {
            children: Vec::new(),
            dirs: Vec::new(),
            addrs,
        }
    }

    /// Takes over a started member and its data directory.
    pub fn adopt(&mut self, child: Child, dir: PathBuf) {
        self.children.push(child);
        self.dirs.push(dir);
    }

    /// The client addresses, member by member.
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    pub fn pids(&self) -> Vec<u32> {
        self.children.iter().map(Child::id).collect()
    }

    /// A guard for `n` members on free loopback ports: the guard (whose addrs are the client
    /// ports), the client ports and the peer ports.
    pub fn on_free_ports(n: usize) -> Result<(ClusterGuard, Vec<u16>, Vec<u16>), String> {
        let mut ports = Vec::new();
        for _ in 0..2 * n {
            ports.push(servers::free_port().map_err(|e| format!("no free port: {e}"))?);
        }
        let peer_ports = ports.split_off(n);
        let guard = ClusterGuard::new(
            ports
                .iter()
                .map(|p| SocketAddr::from(([127, 0, 0, 1], *p)))
                .collect(),
        );
        Ok((guard, ports, peer_ports))
    }

    /// A fresh data directory for member `i` of a `tag` cluster, and the file its log goes to.
    pub fn member_dir(tag: &str, i: usize) -> Result<(PathBuf, File), String> {
        let dir =
            std::env::temp_dir().join(format!("flockd-bench-{}-{tag}-{i}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let log = File::create(dir.join("server.log")).map_err(|e| e.to_string())?;
        Ok((dir, log))
    }
}

impl Drop for ClusterGuard {
    fn drop(&mut self) {
        for child in &mut self.children {
            if let Ok(pid) = i32::try_from(child.id()) {
                unsafe {
                    libc::kill(pid, libc::SIGTERM);
                }
            }
        }
        for child in &mut self.children {
            let deadline = Instant::now() + Duration::from_secs(5);
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        for dir in &self.dirs {
            let _ = fs::remove_dir_all(dir);
        }
    }
}
