//! A cluster node's log: Raft (`flockd-raft`). A proposal made here reaches the leader
//! (forwarded if need be), and its results come from this node's own apply of the committed
//! entry; a read waits for the leader's read point; the leader hands its office over at a stop.

use std::sync::Arc;
use std::time::Duration;

use flockd_core::{Millis, Op, StateMachine};
use flockd_metrics::{HistogramData, MetricsSnapshot, RaftGroupMetrics, RaftMetrics};
use flockd_raft::{Cluster, ClusterView, Leader, NodeId, Role};
use tokio::sync::watch;
use tracing::{info, warn};

use super::{
    BoxFuture, Committing, Fields, Group, Log, LogMember, LogRole, LogView, Membership, OpenError,
    Opened, ProposeError, ReadWait, Route,
};
use crate::config::{ClusterConfig, Config};
use crate::services::applied::AppliedState;
use crate::services::clock::Clock;

pub struct RaftLog {
    cluster: Arc<Cluster>,
    /// The group's number, from 1 (1 on a one-group node).
    number: u16,
}

/// Starts this node's Raft: the state from the last snapshot in `dir/raft`, the log after it,
/// the peers on the cluster port; a new cluster's first node seeds it from a single node's AOF.
/// The leader's duties (re-arming leases, expiring them) start when this node takes office.
pub async fn open(
    config: &Config,
    cluster: &ClusterConfig,
    tls: Option<flockd_tls::ClusterTls>,
    new_applied: impl FnOnce(StateMachine) -> Arc<AppliedState>,
) -> Result<Opened, OpenError> {
    let applied = new_applied(StateMachine::new());
    let seed = seed_from_aof(config)?;
    let cport = cluster
        .peers
        .iter()
        .find(|p| p.id == cluster.node_id)
        .map_or(config.port.saturating_add(10000), |p| p.cport);
    let (snapshot_every, log_kept_after_snapshot) = snapshot_every()?;
    let settings = flockd_raft::ClusterSettings {
        node_id: cluster.node_id,
        peers: cluster.peers.clone(),
        dir: config.dir.join("raft"),
        bind: config.bind,
        cport,
        heartbeat_ms: cluster.heartbeat_ms,
        election_timeout_ms: cluster.election_timeout_ms,
        wait_leader_ms: cluster.wait_leader_ms,
        snapshot_every,
        log_kept_after_snapshot,
        sync_delay_ms: test_sync_delay()?,
        apply_trace: test_apply_trace(),
    };
    let groups = cluster.groups;
    // Group 0's state is the one `new_applied` makes (it configures the node's pub/sub); the
    // other groups share its pub/sub and FLOCK.HOT.
    let mut hosts = vec![applied.clone()];
    for _ in 1..groups {
        hosts.push(Arc::new(AppliedState::beside(&applied)));
    }
    // A clock per group: each follows its own group's log time.
    let clocks: Vec<Arc<Clock>> = hosts
        .iter()
        .map(|_| Arc::new(Clock::continuing_from(Millis(0))))
        .collect();
    let group_hosts = hosts
        .iter()
        .zip(&clocks)
        .map(|(h, clock)| flockd_raft::GroupHost {
            apply: h.clone() as Arc<dyn flockd_log::Apply>,
            clock: clock.clone(),
        })
        .collect();
    let transport: Arc<dyn flockd_raft::transport::Transport> = match tls {
        Some(config) => Arc::new(flockd_raft::transport::Tls { config }),
        None => Arc::new(flockd_raft::transport::Tcp),
    };
    let nodes = Cluster::start_groups(settings, group_hosts, seed, transport)
        .await
        .map_err(OpenError::Cluster)?;
    info!(
        node = cluster.node_id,
        peers = %cluster.peers_text(),
        groups,
        "cluster node started; the cluster port listens on {}:{cport}",
        config.bind
    );
    let group_logs: Vec<Group> = nodes
        .into_iter()
        .zip(hosts.into_iter().zip(clocks))
        .zip(1..)
        .map(|((node, (applied, clock)), number)| Group {
            applied,
            log: Arc::new(RaftLog {
                cluster: Arc::new(node),
                number,
            }),
            clock,
        })
        .collect();
    let log: Arc<dyn Log> = match groups {
        1 => group_logs[0].log.clone(),
        _ => Arc::new(super::groups::GroupedLog::new(&group_logs)),
    };
    Ok(Opened {
        applied,
        log,
        groups: group_logs,
    })
}

/// A single node's state to seed a new cluster with: its AOF, loaded, when the node has no
/// Raft state yet. Its live leases are re-armed and its waits and SESSION holdings end (their
/// connections are gone), as a single node's restart does.
fn seed_from_aof(config: &Config) -> Result<Option<StateMachine>, OpenError> {
    let aof_path = config.aof_path();
    if config.dir.join("raft").exists() || !aof_path.exists() {
        return Ok(None);
    }
    let mut machine = StateMachine::new();
    let replayed = tokio::task::block_in_place(|| flockd_aof::load(&aof_path, &mut machine))
        .map_err(flockd_aof::AofError::from)?;
    machine.reset_stats();
    let at = flockd_core::Millis(machine.time().0 + 1);
    let position = machine.position() + 1;
    machine.apply(position, at, &Op::Rearm { extra_ms: 0 });
    machine.apply(position, at, &Op::EndAllSessions);
    info!(
        file = %aof_path.display(),
        records = replayed.records,
        floor = machine.token_floor(),
        "seeding the cluster from the single node's AOF"
    );
    Ok(Some(machine))
}

/// The fault harness (tests/faults) plays a slow disk with this: the name of a file that holds
/// the milliseconds slept before each synced write of the Raft log (no file: 0), read again
/// every 100 ms so a run can slow a node down and speed it up again. An environment variable,
/// not a config key, because nothing but a test should ever set it.
const TEST_SYNC_DELAY_VAR: &str = "FLOCKD_TEST_SYNC_DELAY_FILE";
const TEST_SYNC_DELAY_MAX_MS: u64 = 1000;

fn sync_delay_error(why: String) -> OpenError {
    OpenError::TestSyncDelay(format!(
        "{TEST_SYNC_DELAY_VAR} must name a file holding milliseconds from 0 to \
         {TEST_SYNC_DELAY_MAX_MS}: {why}"
    ))
}

fn test_sync_delay() -> Result<Arc<std::sync::atomic::AtomicU64>, OpenError> {
    let delay = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let Some(path) = std::env::var_os(TEST_SYNC_DELAY_VAR) else {
        return Ok(delay);
    };
    let path = std::path::PathBuf::from(path);
    let read = move || read_test_sync_delay(&path);
    delay.store(read()?, std::sync::atomic::Ordering::Relaxed);
    tracing::warn!(
        "{TEST_SYNC_DELAY_VAR} is set: Raft log syncs wait as long as that file says (a test setting)"
    );
    let shared = delay.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        loop {
            tick.tick().await;
            match read() {
                Ok(ms) => shared.store(ms, std::sync::atomic::Ordering::Relaxed),
                Err(e) => tracing::warn!("{e}"),
            }
        }
    });
    Ok(delay)
}

/// A Raft snapshot every this many log entries, and this many kept after it: 50,000 and 1,000,
/// unless the test-only `FLOCKD_TEST_SNAPSHOT_EVERY` says how many (100 to 1,000,000; a tenth
/// of it is kept), so that a fault run shorter than 50,000 entries builds snapshots, sends them
/// to followers that fell behind and restarts nodes from them. An environment variable, not a
/// config key, for the same reason as the sync delay.
fn snapshot_every() -> Result<(u64, u64), OpenError> {
    const VAR: &str = "FLOCKD_TEST_SNAPSHOT_EVERY";
    let Some(text) = std::env::var_os(VAR) else {
        return Ok((50_000, 1000));
    };
    let every = text
        .to_str()
        .and_then(|t| t.trim().parse::<u64>().ok())
        .filter(|n| (100..=1_000_000).contains(n))
        .ok_or_else(|| {
            OpenError::TestSnapshotEvery(format!(
                "{VAR} must be a number of log entries from 100 to 1000000, not {text:?}"
            ))
        })?;
    tracing::warn!("{VAR} is set: a Raft snapshot every {every} log entries (a test setting)");
    Ok((every, every / 10))
}

/// Whether the test-only `FLOCKD_TEST_APPLY_TRACE` asks each group for a line per applied entry
/// in its dir (see `flockd_raft::apply_trace`): the fault harness sets it, to show where the
/// replicas part when their states differ.
fn test_apply_trace() -> bool {
    const VAR: &str = "FLOCKD_TEST_APPLY_TRACE";
    let on = std::env::var_os(VAR).is_some_and(|v| !v.is_empty() && v != "0");
    if on {
        tracing::warn!(
            "{VAR} is set: every applied Raft entry is written to a trace file (a test setting)"
        );
    }
    on
}

/// The milliseconds in the test sync-delay file: 0 without the file, an error for anything but
/// a number up to [`TEST_SYNC_DELAY_MAX_MS`].
fn read_test_sync_delay(path: &std::path::Path) -> Result<u64, OpenError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => {
            return Err(sync_delay_error(format!("{}: {e}", path.display())));
        }
    };
    match text.trim().parse::<u64>() {
        Ok(ms) if ms <= TEST_SYNC_DELAY_MAX_MS => Ok(ms),
        _ => Err(sync_delay_error(format!("{}: {text:?}", path.display()))),
    }
}

fn view_of(v: &ClusterView) -> LogView {
    let role = match v.role {
        Role::Leader => LogRole::Leader,
        Role::Follower => LogRole::Follower,
        Role::Candidate => LogRole::Candidate,
        Role::Learner => LogRole::Learner,
        Role::Shutdown => LogRole::Shutdown,
        Role::Removed => LogRole::Removed,
    };
    LogView {
        node_id: Some(v.node_id),
        role,
        leader_id: v.leader,
        term: v.term,
        commit_index: v.commit_index,
        applied_index: v.applied_index,
        members: v
            .members
            .iter()
            .map(|m| LogMember {
                id: Some(m.id),
                host: m.peer.host.clone(),
                port: m.peer.port,
                addr: m.peer.addr(),
                role: v.role_of(m),
                index: m.index,
                up: m.up,
                is_me: m.id == v.node_id,
            })
            .collect(),
        removed: v.removed.as_ref().map(|r| r.to_string()),
    }
}

fn raft_metrics(cluster: &Cluster) -> RaftMetrics {
    let view = cluster.view();
    let stats = cluster.stats();
    RaftMetrics {
        term: view.term,
        is_leader: view.role == Role::Leader,
        commit_index: view.commit_index,
        applied_index: view.applied_index,
        leader_changes: stats.leader_changes,
        forwarded_commands: stats.forwarded_commands,
        proposal_duration: HistogramData::from_histogram(&stats.proposals),
        log_fsync_duration: HistogramData::from_histogram(&stats.log_fsyncs),
    }
}

impl Log for RaftLog {
    fn propose(&self, ops: Vec<Op>) -> Committing {
        Committing::new(self.cluster.propose(ops), ProposeError::ShuttingDown)
    }

    fn write_now(&self) {}

    fn check_serving(&self) -> Result<(), ProposeError> {
        match self.cluster.removed() {
            Some(removal) => Err(ProposeError::NotServing(removal.to_string())),
            None => Ok(()),
        }
    }

    fn check_writable(&self) -> Result<(), ProposeError> {
        // A node without a leader keeps a command for `cluster-wait-leader-ms` before it
        // answers -CLUSTERDOWN, so nothing is refused up front.
        Ok(())
    }

    fn now(&self) -> Millis {
        self.cluster.now()
    }

    fn lease_duty(&self) -> watch::Receiver<bool> {
        self.cluster.lease_duty()
    }

    fn read_point(&self) -> Option<ReadWait> {
        let cluster = self.cluster.clone();
        Some(Box::pin(async move { cluster.read_point().await }))
    }

    fn route(&self, _slot: u16) -> Route {
        // One group serves every slot: its leader is the route.
        match self.cluster.leader() {
            Leader::Me => Route::Here,
            Leader::Other(peer) => Route::Leader {
                host: peer.host,
                port: peer.port,
            },
            Leader::Unknown => Route::Unknown,
        }
    }

    fn view(&self) -> LogView {
        view_of(&self.cluster.view())
    }

    fn persistence_info(&self, field: Fields<'_>) {
        // The state is kept in the Raft log and its snapshots.
        field("loading", &0);
        field("rdb_bgsave_in_progress", &0);
        field("aof_enabled", &0);
        field("raft_log_fsync", &"always");
    }

    fn replication_info(&self, field: Fields<'_>) {
        let v = self.cluster.view();
        field("raft_node_id", &v.node_id);
        field("raft_state", &v.role.as_str());
        field("raft_leader_id", &v.leader.unwrap_or(0));
        field("raft_term", &v.term);
        field("raft_commit_index", &v.commit_index);
        field("raft_applied_index", &v.applied_index);
        // A removed node lists itself as removed, not as a member.
        let members = v
            .members
            .iter()
            .filter(|m| v.removed.is_none() || m.id != v.node_id)
            .count();
        field("raft_members", &members);
        field("raft_removed", &u8::from(v.removed.is_some()));
        field(
            "raft_members_down",
            &v.members.iter().filter(|m| !m.up).count(),
        );
        // Commands this node sent on to the leader: near zero when clients route by slot.
        field(
            "raft_forwarded_commands",
            &self.cluster.stats().forwarded_commands,
        );
        field("raft_log_entries_appended", &v.log.entries_appended);
        field("raft_log_syncs", &v.log.syncs);
        field(
            "raft_log_entries_per_sync",
            &format!(
                "{:.2}",
                v.log.entries_appended as f64 / v.log.syncs.max(1) as f64
            ),
        );
        field("raft_duplicates_skipped", &v.duplicates_skipped);
    }

    fn metrics(&self, snapshot: &mut MetricsSnapshot) {
        // The unlabelled series are the first group's (a multi-group node's groups each add
        // theirs, in order).
        if snapshot.raft.is_none() {
            snapshot.raft = Some(raft_metrics(&self.cluster));
        }
        let view = self.cluster.view();
        snapshot.raft_groups.push(RaftGroupMetrics {
            group: self.number,
            leader: view.leader.unwrap_or(0),
            is_leader: view.role == Role::Leader,
            term: view.term,
            commit_index: view.commit_index,
            applied_index: view.applied_index,
        });
    }

    fn rewrite(&self) -> Result<(), String> {
        Err("a cluster node has no AOF: its Raft log is compacted by snapshots".into())
    }

    fn membership(&self) -> Option<Box<dyn Membership>> {
        Some(Box::new(Members(self.cluster.clone())))
    }

    fn reconfigure(&self, _old: &Config, _next: &Config) {}

    fn hand_over(&self, limit: Duration) -> BoxFuture<'_, bool> {
        Box::pin(hand_over(&self.cluster, limit))
    }

    fn leader_changed(&self, known: Option<u64>) -> BoxFuture<'_, Option<u64>> {
        Box::pin(self.cluster.leader_changed(known))
    }

    fn refusals(&self) -> Option<watch::Receiver<Option<String>>> {
        Some(self.cluster.refusals())
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.cluster.shutdown().await;
            info!("Raft stopped; bye");
        })
    }
}

struct Members(Arc<Cluster>);

impl Membership for Members {
    fn add(&self, id: u64, addr: String) -> BoxFuture<'static, Result<(), String>> {
        let cluster = self.0.clone();
        Box::pin(async move { cluster.add(id, &addr).await })
    }

    fn remove(&self, id: u64) -> BoxFuture<'static, Result<(), String>> {
        let cluster = self.0.clone();
        Box::pin(async move { cluster.remove(id).await })
    }

    fn transfer_leader(&self, id: u64) -> BoxFuture<'static, Result<(), String>> {
        let cluster = self.0.clone();
        Box::pin(async move { cluster.transfer_leader(id).await })
    }
}

/// True when another node leads now.
async fn hand_over(cluster: &Cluster, limit: Duration) -> bool {
    let view = cluster.view();
    if view.role != Role::Leader {
        return false;
    }
    let me = view.node_id;
    let Some(target) = view
        .members
        .iter()
        .filter(|m| m.id != me && m.voter)
        .max_by_key(|m| m.index.unwrap_or(0))
        .map(|m| m.id)
    else {
        return false; // a cluster of one: nobody to hand over to
    };
    match tokio::time::timeout(limit, transfer(cluster, me, target)).await {
        Ok(Ok(leader)) => {
            info!("stopping: handed the leadership to node {leader}");
            true
        }
        Ok(Err(e)) => {
            warn!("stopping: could not hand the leadership to node {target}: {e}");
            false
        }
        Err(_) => {
            warn!(
                "stopping: node {target} did not take the leadership within {limit:?}; \
                 stopping anyway"
            );
            false
        }
    }
}

/// Asks `target` to take over and returns the leader that did (it may be another node).
async fn transfer(cluster: &Cluster, me: NodeId, target: NodeId) -> Result<NodeId, String> {
    cluster.transfer_leader(target).await?;
    let mut known = Some(me);
    loop {
        let next = cluster.leader_changed(known).await;
        if next == known {
            return Err("Raft stopped".into());
        }
        if let Some(leader) = next.filter(|l| *l != me) {
            return Ok(leader);
        }
        known = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_test_sync_delay_file_holds_milliseconds_or_is_refused() {
        let dir = std::env::temp_dir().join(format!("flockd-sync-delay-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("delay");
        assert_eq!(read_test_sync_delay(&file).unwrap(), 0, "no file: no delay");
        std::fs::write(&file, "40\n").unwrap();
        assert_eq!(read_test_sync_delay(&file).unwrap(), 40);
        for bad in ["", "fast", "-1", "1001", "4 0"] {
            std::fs::write(&file, bad).unwrap();
            let err = read_test_sync_delay(&file).unwrap_err().to_string();
            assert!(
                err.contains(TEST_SYNC_DELAY_VAR) && err.contains("0 to 1000"),
                "{bad:?}: {err}"
            );
        }
        let err = read_test_sync_delay(&dir).unwrap_err().to_string();
        assert!(
            err.contains(&dir.display().to_string()),
            "a directory: {err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
