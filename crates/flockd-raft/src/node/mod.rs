//! One node of a flockd cluster: the openraft instance with its log, state machine and peers;
//! the way a proposal reaches the leader (here, or forwarded over the cluster connection) and
//! is retried after a leader change; the leader's duties when it takes office; and what the
//! server shows of it (ROLE, INFO replication, FLOCK.CLUSTER).
//!
//! The rooms: this file starts a node and holds its state; `propose` gets an entry committed
//! (here or at the leader), `read` finds a linearizable read point, `office` is what a new
//! leader does first, `membership` adds, removes and hands over, `serve` answers the peers on
//! the cluster port, `spread` spreads a multi-group node's group leaders over the nodes, and
//! `view` is what the server shows.

mod members;
mod membership;
mod office;
mod propose;
mod read;
mod serve;
mod spread;
mod view;

pub use members::Removal;
pub use view::{ClusterView, Member, Role};

use office::{count_leader_changes, take_office};
use serve::serve_peers;

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use flockd_core::time::Clock;
use flockd_core::{Millis, Op};
use openraft::async_runtime::WatchReceiver;
use openraft::error::{ClientWriteError, LinearizableReadError, RaftError};
use openraft::{ChangeMembers, Config, ReadPolicy, ServerState, SnapshotPolicy};
use tokio::sync::{mpsc, oneshot, watch};
use tracing::{debug, error, info, warn};

use crate::apply_trace::ApplyTrace;
use crate::counters::{RaftCounters, RaftStats};
use crate::error::StartError;
use crate::identity::{Identities, Identity};
use crate::log_store::flusher::Flusher;
use crate::log_store::{LogStore, node as basic_node};
use crate::network::{
    Forwarded, MembershipChange, NetworkFactory, Peers, ReadPoint, Request, Response,
};
use crate::peer_server::{PeerGroups, PeerHandler, serve_groups};
use crate::peers::{Peer, parse_addr};
use crate::pending::PendingTable;
use crate::state_machine::{MachineStore, Me};
use crate::transport::{BoxFuture, Listener, Tcp, Transport};
use crate::types::{FlockRaft, NodeId, Origin, RaftProposal};
use flockd_log::Apply;
use flockd_log::ProposalResult;
use flockd_log::ProposeError;

/// The openraft instance of a node.
type Raft = openraft::Raft<FlockRaft, MachineStore>;

/// openraft's watch of the role, the leader, the vote and the membership. Tasks that wait for a
/// change of leader watch this, not `Raft::metrics()`: that one is sent again on every commit
/// and apply, and woke each waiting task (every forward in flight among them) each time.
type ServerMetrics =
    openraft::alias::WatchReceiverOf<FlockRaft, openraft::metrics::RaftServerMetrics<FlockRaft>>;

/// How a node runs, from flockd's configuration.
#[derive(Clone, Debug)]
pub struct ClusterSettings {
    pub node_id: NodeId,
    /// `cluster-peers`: the members a new cluster forms with, or members to join.
    pub peers: Vec<Peer>,
    /// Where the log and snapshots live (a directory of its own).
    pub dir: PathBuf,
    /// The address the cluster port listens on, and its port.
    pub bind: IpAddr,
    pub cport: u16,
    pub heartbeat_ms: u64,
    /// Elections wait a random time between this and twice this.
    pub election_timeout_ms: u64,
    /// How long a proposal may wait for a leader to commit it.
    pub wait_leader_ms: u64,
    /// Entries applied between two snapshots (then the log before the snapshot is purged).
    pub snapshot_every: u64,
    /// Entries kept in the log below a snapshot, so a follower a little behind catches up
    /// from the log instead of a whole snapshot.
    pub log_kept_after_snapshot: u64,
    /// Test-only: milliseconds waited before each synced log write, to play a slow disk in
    /// fault tests (the harness may change it while the node runs). Zero otherwise.
    pub sync_delay_ms: Arc<std::sync::atomic::AtomicU64>,
    /// Test-only: each group writes a line per applied entry ([`crate::apply_trace`]).
    pub apply_trace: bool,
}

/// The file in a multi-group node's dir that says how many groups its data was made with (a
/// one-group node has none, as before groups existed).
const GROUPS_FILE: &str = "cluster-groups";

/// Where group `group` keeps its log and snapshots: the first group where a one-group node
/// always kept them, each other group in a directory of its own, named by the group's number
/// as users see it (`group-2` for the second).
fn group_dir(dir: &Path, group: u16) -> PathBuf {
    match group {
        0 => dir.to_owned(),
        group => dir.join(format!("group-{}", group + 1)),
    }
}

/// Writes `bytes` as the whole of `path` and syncs it with its directory: through a temporary
/// file renamed over it, so a crash leaves the old content or the new, never half of either.
fn write_synced(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    flockd_log::fsutil::sync_parent_dir(path)
}

/// Refuses a dir made with another number of groups, and records the number in a new one.
fn check_groups(dir: &Path, groups: u16) -> Result<(), StartError> {
    let path = dir.join(GROUPS_FILE);
    let made_with = match std::fs::read_to_string(&path) {
        Ok(text) => text.trim().parse::<u16>().map_err(|_| {
            StartError::Groups(format!("{} holds {text:?}, not a number", path.display()))
        })?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            if dir.join("log").exists() {
                1
            } else {
                groups
            }
        }
        Err(e) => return Err(io_at(&path)(e)),
    };
    if made_with != groups {
        return Err(StartError::Groups(format!(
            "{} holds a cluster made with cluster-groups {made_with}, and this node is set to \
             {groups}: the number of groups is fixed when a cluster is created (start it with \
             {made_with}, or move the dir away to make this node a new member)",
            dir.display()
        )));
    }
    if groups > 1 && !path.exists() {
        write_synced(&path, format!("{groups}\n").as_bytes()).map_err(io_at(&path))?;
    }
    Ok(())
}

impl ClusterSettings {
    pub fn me(&self) -> Option<&Peer> {
        self.peers.iter().find(|p| p.id == self.node_id)
    }
}

struct Node {
    me: Me,
    /// Which of the node's groups this is (0: the first, and the only one of a one-group node).
    /// Users see groups numbered from 1 (logs, metrics, INFO, dirs).
    group: u16,
    /// How many groups the node has.
    groups: u16,
    settings: ClusterSettings,
    raft: Raft,
    peers: Arc<Peers>,
    pending: Arc<PendingTable>,
    /// Proposals on their way to be gathered into entries (see `propose`).
    proposals: mpsc::UnboundedSender<propose::Proposed>,
    /// Reads on their way to share an ask for the leader's read point (see `read`).
    reads: mpsc::UnboundedSender<read::ReadAsked>,
    clock: Arc<Clock>,
    host: Arc<dyn Apply>,
    log: LogStore,
    store: MachineStore,
    /// True once this node leads and has re-armed the leases: it runs the lease clock (the
    /// expiry and idle-name tasks). `Cluster::lease_duty` watches it.
    lease_duty: watch::Sender<bool>,
    /// True once this node leads and its clock continues from the log's time: only then does
    /// it stamp proposals.
    stamping: std::sync::atomic::AtomicBool,
    /// When a leader's append (or heartbeat) last arrived.
    last_append: parking_lot::Mutex<Option<Instant>>,
    /// This node's dir id and the ones it saw of its peers.
    identities: Arc<Identities>,
    counters: RaftCounters,
    /// Set once this node knows it was removed from the cluster (see `members`); the flag is
    /// what every command checks.
    removed: std::sync::atomic::AtomicBool,
    removal: parking_lot::Mutex<Option<Removal>>,
}

/// Why a proposal is answered at its deadline when no attempt said more (a forward the leader
/// committed that this node, lagging or cut off, has not applied yet, say).
/// Who leads, as a node knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Leader {
    Me,
    /// Another member, with its addresses.
    Other(Peer),
    /// None known (an election, or this node is cut off).
    Unknown,
}

const NOT_IN_TIME: &str = "it was not committed and applied here in time: its outcome is unknown, it may still take effect";

/// A running cluster node.
pub struct Cluster {
    node: Arc<Node>,
    _leader_watch: openraft::WatchChangeHandle<FlockRaft>,
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> StartError + '_ {
    move |source| StartError::Io {
        path: path.to_owned(),
        source,
    }
}

/// This run's number: above the last run's kept in `dir` (synced before use, so two runs of a
/// node never share one), and at least the wall clock in milliseconds, so a node whose `dir`
/// was wiped (the file gone with it) still starts a run the cluster has not seen: the
/// replicated dedup table would take its first proposals for copies of the old run's.
fn next_incarnation(dir: &Path) -> Result<u64, StartError> {
    let path = dir.join("incarnation");
    let last = match std::fs::read_to_string(&path) {
        Ok(s) => s.trim().parse::<u64>().unwrap_or(0),
        Err(e) if e.kind() == io::ErrorKind::NotFound => 0,
        Err(e) => return Err(io_at(&path)(e)),
    };
    let wall_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let next = (last + 1).max(wall_ms);
    write_synced(&path, format!("{next}\n").as_bytes()).map_err(io_at(&path))?;
    Ok(next)
}

/// The most groups a cluster may have (`cluster-groups`).
pub const MAX_GROUPS: u16 = 64;

/// What a node's groups share: who the node is and its peers' connections. Not a clock: each
/// group's leader continues its clock from that group's log time (see
/// [`office::take_office`]), forward or back, and a shared clock would move every other group's
/// time with it, ending leases early there.
struct Together {
    me: Me,
    identities: Arc<Identities>,
    peers: Arc<Peers>,
}

/// One group of a node: the state its entries are applied to, and the clock its entries are
/// stamped with while this node leads it (a clock of its own, in that group's log time).
pub struct GroupHost {
    pub apply: Arc<dyn Apply>,
    pub clock: Arc<Clock>,
}

/// The groups a node serves on its cluster port, by number.
struct Groups(Vec<Arc<Node>>);

impl PeerGroups for Groups {
    fn group(&self, group: u16) -> Option<(Arc<dyn PeerHandler>, MachineStore)> {
        let node = self.0.get(usize::from(group))?;
        Some((node.clone() as Arc<dyn PeerHandler>, node.store.clone()))
    }
}

/// Opens group `group`'s log and snapshot and starts its Raft. A new group's first start on
/// the member with the smallest id forms it with the peers. Every group's log is written by
/// `flusher`'s one thread.
async fn start_group(
    settings: &ClusterSettings,
    (group, groups): (u16, u16),
    GroupHost { apply: host, clock }: GroupHost,
    (seed, flusher): (Option<flockd_core::StateMachine>, &Flusher),
    together: &Together,
) -> Result<(Arc<Node>, openraft::WatchChangeHandle<FlockRaft>), StartError> {
    let dir = group_dir(&settings.dir, group);
    let me = together.me;
    let log_dir = dir.join("log");
    let delay = settings.sync_delay_ms.clone();
    let log = tokio::task::block_in_place(|| LogStore::open_on(&log_dir, delay, flusher))
        .map_err(io_at(&log_dir))?;
    let pristine = log.is_pristine().map_err(io_at(&log_dir))?;
    let pending = Arc::new(PendingTable::default());
    let snapshot_dir = dir.join("snapshot");
    let mut store = tokio::task::block_in_place(|| {
        MachineStore::open(&snapshot_dir, host.clone(), pending.clone(), me)
    })
    .map_err(io_at(&snapshot_dir))?;
    if settings.apply_trace {
        store.trace_to(ApplyTrace::open(&dir).map_err(io_at(&dir))?);
    }
    let mut pristine = pristine && !store.has_snapshot();
    if let Some(machine) = seed
        && pristine
    {
        let only_me = settings.peers.len() == 1 && settings.me().is_some();
        if !only_me {
            return Err(StartError::Seed(
                "a node seeded from an AOF forms a one-node cluster: start it with \
                 cluster-peers naming only itself, then FLOCK.CLUSTER ADD the others"
                    .to_owned(),
            ));
        }
        let me_peer = settings.me().cloned().expect("checked above");
        // The log goes on after the file's last position, so no wait id of the new log
        // repeats one the file's state remembers.
        let log_id = crate::types::LogId {
            leader_id: crate::types::LeaderId {
                term: 0,
                node_id: settings.node_id,
            },
            index: machine.position().max(1),
        };
        let membership = crate::types::Membership::new(
            vec![BTreeSet::from([settings.node_id])],
            BTreeMap::from([(settings.node_id, basic_node(&me_peer.addr()))]),
        )
        .map_err(|e| StartError::Seed(e.to_string()))?;
        tokio::task::block_in_place(|| {
            store.seed(machine, log_id, membership)?;
            log.start_after(&log_id)
        })
        .map_err(io_at(&snapshot_dir))?;
        info!(
            index = log_id.index,
            "seeded the new cluster from the single node's AOF"
        );
        pristine = false;
    }
    let config = Config {
        cluster_name: "flockd".to_owned(),
        heartbeat_interval: settings.heartbeat_ms,
        // openraft waits its leader lease (its `election_timeout_max`) after the last
        // heartbeat and then a random time between min and max before it campaigns. So that
        // an election starts between the contract's timeout and twice it after the last
        // heartbeat, the lease is the timeout and the random part the rest, as wide as
        // openraft allows (min above one heartbeat) to keep split votes rare.
        election_timeout_min: settings.heartbeat_ms + 1,
        election_timeout_max: settings.election_timeout_ms,
        snapshot_policy: SnapshotPolicy::LogsSinceLast(settings.snapshot_every),
        max_in_snapshot_log_to_keep: settings.log_kept_after_snapshot,
        enable_pre_vote: Some(true),
        // Replicate an entry as soon as it is appended here, not once it is synced here: the
        // leader's sync and the followers' run at the same time (a commit still needs a
        // majority of synced copies, the leader's own counted only once it is synced).
        broadcast_submitted_on_append: Some(true),
        // A leader started again campaigns like any node instead of taking up its old term at
        // once (openraft's default). Entries it had sent before they were synced here can be
        // gone from its log after a kill; leading on in the same term it would write other
        // entries under the same (term, index), and a follower that kept the first ones takes
        // them as matching: two replicas with different states at one applied index, and a
        // token granted twice (seen in the fault harness after a leader and a follower were
        // killed together). A new term makes the followers replace what it lost.
        enable_leader_restore: Some(false),
        // A follower whose log went back is caught up from scratch with a snapshot. A wiped
        // dir is refused at the hello (crate::identity), but a dir restored from an older
        // copy of itself keeps its dir id. Without this, openraft's leader trips a debug
        // assertion (a panic in debug builds) or, in release builds, keeps replicating from
        // where the lost log ended.
        allow_log_reversion: Some(true),
        ..Default::default()
    };
    let config = Arc::new(
        config
            .validate()
            .map_err(|e| StartError::Raft(e.to_string()))?,
    );
    let network = NetworkFactory {
        peers: together.peers.clone(),
        transfers: Arc::new(AtomicU64::new(1)),
        group,
    };
    let log_stats = log.clone();
    let raft = openraft::Raft::new(settings.node_id, config, network, log, store.clone())
        .await
        .map_err(|e| StartError::Raft(e.to_string()))?;
    // A peer's dir is checked against the members the first group knows: membership changes
    // go to every group alike.
    if group == 0 {
        together.identities.watch_membership(raft.metrics());
    }
    let (lease_duty, _) = watch::channel(false);
    let (proposals, queued) = mpsc::unbounded_channel();
    let (reads, reads_queued) = mpsc::unbounded_channel();
    let node = Arc::new(Node {
        me,
        group,
        groups,
        settings: settings.clone(),
        raft: raft.clone(),
        peers: together.peers.clone(),
        pending,
        proposals,
        reads,
        clock,
        host,
        log: log_stats,
        store: store.clone(),
        lease_duty,
        stamping: std::sync::atomic::AtomicBool::new(false),
        last_append: parking_lot::Mutex::new(None),
        identities: together.identities.clone(),
        counters: RaftCounters::default(),
        removed: std::sync::atomic::AtomicBool::new(false),
        removal: parking_lot::Mutex::new(None),
    });
    tokio::spawn(propose::gather(Arc::downgrade(&node), queued));
    tokio::spawn(read::gather_reads(Arc::downgrade(&node), reads_queued));
    tokio::spawn(count_leader_changes(node.clone()));
    tokio::spawn(members::watch_members(node.clone()));
    // Not the node: the task ends with the runtime, and must not keep the node alive.
    let (pending, waited_ms) = (node.pending.clone(), node.settings.wait_leader_ms);
    tokio::spawn(async move {
        pending
            .answer_overdue(Duration::from_millis(waited_ms), |why| {
                ProposeError::NoLeader {
                    waited_ms,
                    why: why.unwrap_or_else(|| NOT_IN_TIME.to_owned()),
                }
            })
            .await
    });
    // The first start of the member with the smallest id in the peers forms the cluster
    // with them; every other new node waits to hear from a leader (the founders' first
    // replication, or FLOCK.CLUSTER ADD). Only one node proposing the first membership
    // means no node ever holds a first entry that conflicts with the leader's.
    let founder = node.settings.peers.iter().map(|p| p.id).min() == Some(node.me.node);
    if pristine && founder {
        let members: BTreeMap<NodeId, openraft::BasicNode> = node
            .settings
            .peers
            .iter()
            .map(|p| (p.id, basic_node(&p.addr())))
            .collect();
        match raft.initialize(members).await {
            Ok(()) => info!(
                node = node.me.node,
                group = group + 1,
                "formed a new cluster with {} member(s)",
                node.settings.peers.len()
            ),
            // Another member's vote got here first: this node joins that cluster.
            Err(e) => info!(group = group + 1, "not initializing the cluster here: {e}"),
        }
    }
    let start = node.clone();
    let stop = node.clone();
    let watch = raft.on_leader_change(
        move |_| {
            let node = start.clone();
            async move {
                tokio::spawn(take_office(node));
            }
        },
        move |_| {
            let node = stop.clone();
            async move {
                node.stamping
                    .store(false, std::sync::atomic::Ordering::Release);
                node.lease_duty.send_replace(false);
                info!(
                    node = node.me.node,
                    group = node.group + 1,
                    "no longer the leader"
                );
            }
        },
    );
    Ok((node, watch))
}

impl Cluster {
    /// Opens the node's log and snapshot in `settings.dir`, listens on its cluster port and
    /// starts Raft. A node whose dir holds no Raft state and which is named in the peers forms
    /// the cluster with them; one not named waits to be added (FLOCK.CLUSTER ADD).
    ///
    /// `seed`: a single node's state (its AOF, loaded) to start a new one-node cluster from;
    /// used only on the first start, with `cluster-peers` naming this node alone.
    pub async fn start(
        settings: ClusterSettings,
        host: Arc<dyn Apply>,
        clock: Arc<Clock>,
        seed: Option<flockd_core::StateMachine>,
    ) -> Result<Cluster, StartError> {
        Cluster::start_on(settings, host, clock, seed, Arc::new(Tcp)).await
    }

    /// [`Cluster::start`] with the peer connections on `transport` (an in-memory network, in
    /// tests that run a whole cluster in one process).
    pub async fn start_on(
        settings: ClusterSettings,
        host: Arc<dyn Apply>,
        clock: Arc<Clock>,
        seed: Option<flockd_core::StateMachine>,
        transport: Arc<dyn Transport>,
    ) -> Result<Cluster, StartError> {
        let host = GroupHost { apply: host, clock };
        let mut groups = Cluster::start_groups(settings, vec![host], seed, transport).await?;
        Ok(groups.remove(0))
    }

    /// Starts a node of a multi-group cluster (`cluster-groups`): one openraft group per host
    /// in `hosts` (its state machine and its clock), in order, each with its log and snapshots in a directory of its own,
    /// all on the one cluster port and sharing each peer's connection. One host is a one-group
    /// node, exactly as [`Cluster::start_on`]. The dir says how many groups its data was made
    /// with; another number is refused.
    pub async fn start_groups(
        settings: ClusterSettings,
        hosts: Vec<GroupHost>,
        seed: Option<flockd_core::StateMachine>,
        transport: Arc<dyn Transport>,
    ) -> Result<Vec<Cluster>, StartError> {
        let count = u16::try_from(hosts.len())
            .ok()
            .filter(|n| (1..=MAX_GROUPS).contains(n))
            .ok_or_else(|| {
                StartError::Groups(format!(
                    "cluster-groups is {}, and must be from 1 to {MAX_GROUPS}",
                    hosts.len()
                ))
            })?;
        if seed.is_some() && count > 1 {
            return Err(StartError::Seed(
                "a node seeded from an AOF forms a one-group cluster (cluster-groups 1)".to_owned(),
            ));
        }
        let dir = settings.dir.clone();
        std::fs::create_dir_all(&dir).map_err(io_at(&dir))?;
        check_groups(&dir, count)?;
        let incarnation = next_incarnation(&dir)?;
        let identities = Arc::new(
            tokio::task::block_in_place(|| Identities::open(&dir, settings.node_id))
                .map_err(io_at(&dir))?,
        );
        let me = Me {
            node: settings.node_id,
            incarnation,
        };
        let peers = Arc::new(Peers::new(transport.clone(), identities.clone()));
        let shared = Together {
            me,
            identities,
            peers,
        };
        let mut seed = seed;
        let flusher = Flusher::start().map_err(io_at(&dir))?;
        let mut nodes = Vec::with_capacity(hosts.len());
        for (group, host) in (0..count).zip(hosts) {
            let numbered = (group, count);
            let log_with = (seed.take(), &flusher);
            nodes.push(start_group(&settings, numbered, host, log_with, &shared).await?);
        }
        let addr = SocketAddr::new(settings.bind, settings.cport);
        let listener = transport
            .listen(addr)
            .await
            .map_err(|source| StartError::Bind {
                addr: addr.to_string(),
                source,
            })?;
        let table = Arc::new(Groups(nodes.iter().map(|(node, _)| node.clone()).collect()));
        tokio::spawn(serve_peers(listener, table));
        if count > 1 {
            let weak = nodes.iter().map(|(node, _)| Arc::downgrade(node)).collect();
            tokio::spawn(spread::spread_leaders(weak));
        }
        Ok(nodes
            .into_iter()
            .map(|(node, watch)| Cluster {
                node,
                _leader_watch: watch,
            })
            .collect())
    }

    /// Proposes `ops` as one entry. The receiver gets their results once the entry is applied
    /// here, or an error once no leader committed it within `cluster-wait-leader-ms`.
    pub fn propose(&self, ops: Vec<Op>) -> oneshot::Receiver<ProposalResult> {
        self.node.propose(ops)
    }

    /// Waits until a linearizable read may be served from this node's applied state: every write
    /// committed before the call is applied here (the leader's ReadIndex, confirmed by a quorum).
    /// Returns the leader's clock at that point, what the read judges leases by. Tried again
    /// after a leader change, until `cluster-wait-leader-ms`, as a proposal is.
    pub async fn read_point(&self) -> Result<Millis, ProposeError> {
        self.node.read_point().await
    }

    /// The leader's clock (what this node stamps with, if it leads).
    pub fn now(&self) -> Millis {
        self.node.clock.now()
    }

    /// True while this node leads and has re-armed the leases.
    pub fn lease_duty(&self) -> watch::Receiver<bool> {
        self.node.lease_duty.subscribe()
    }

    /// Waits until the leader this node knows is no longer `known`, and returns the new one
    /// (`None`: no leader known). Returns `known` when the node shuts down.
    pub async fn leader_changed(&self, known: Option<NodeId>) -> Option<NodeId> {
        let mut metrics = self.node.raft.server_metrics();
        loop {
            let current = metrics.borrow_watched().current_leader;
            if current != known {
                return current;
            }
            if metrics.changed().await.is_err() {
                return known;
            }
        }
    }

    /// Set once a peer refused this node (it came back with a wiped dir under its old id): the
    /// reason, with the procedure. The process should stop.
    pub fn refusals(&self) -> watch::Receiver<Option<String>> {
        self.node.identities.refusals()
    }

    /// Set once this node knows it was taken out of the cluster: it then serves no command.
    pub fn removed(&self) -> Option<Removal> {
        self.node.removal()
    }

    /// Who leads now, as this node knows it. Cheaper than [`Cluster::view`]: it reads the
    /// leader and one member, for a command's routing.
    pub fn leader(&self) -> Leader {
        let metrics = self.node.raft.metrics();
        let m = metrics.borrow_watched();
        match m.current_leader {
            Some(id) if id == self.node.me.node => Leader::Me,
            Some(id) => m
                .membership_config
                .nodes()
                .find(|(member, _)| **member == id)
                .and_then(|(_, n)| parse_addr(id, &n.addr).ok())
                .map_or(Leader::Unknown, Leader::Other),
            None => Leader::Unknown,
        }
    }

    pub fn view(&self) -> ClusterView {
        self.node.view()
    }

    /// Leader changes seen, commands forwarded, proposal durations, the log's fsync waits: for
    /// the metrics port.
    pub fn stats(&self) -> RaftStats {
        self.node.counters.read(self.node.log.fsyncs())
    }

    pub async fn shutdown(&self) {
        self.node.lease_duty.send_replace(false);
        if let Err(e) = self.node.raft.shutdown().await {
            warn!("raft shutdown: {e}");
        }
        // Tasks that still hold the store (peer connections winding down) must not keep the
        // directory locked: closing it here lets the same process open it again at once.
        tokio::task::block_in_place(|| self.node.log.close());
    }
}
