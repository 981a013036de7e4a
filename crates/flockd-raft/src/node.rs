//! One node of a flockd cluster: the openraft instance with its log, state machine and peers;
//! the way a proposal reaches the leader (here, or forwarded over the cluster connection) and
//! is retried after a leader change; the leader's duties when it takes office; and what the
//! server shows of it (ROLE, INFO replication, FLOCK.CLUSTER).

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
use tokio::sync::{oneshot, watch};
use tracing::{error, info, warn};

use crate::error::{ClusterError, StartError};
use crate::figures::{RaftFigures, RaftFiguresRead};
use crate::identity::{Identities, Identity};
use crate::log_store::{LogStore, node as basic_node};
use crate::network::{Forwarded, NetworkFactory, Peers, ReadPoint, Request, Response};
use crate::peer_server::{PeerHandler, serve_connection};
use crate::peers::{Peer, parse_addr};
use crate::pending::{Outcome, PendingTable};
use crate::state_machine::{MachineStore, Me};
use crate::transport::{BoxFuture, Listener, Tcp, Transport};
use crate::types::{FlockRaft, NodeId, Origin, Proposal};
use flockd_log::Apply;

/// The openraft instance of a node.
type Raft = openraft::Raft<FlockRaft, MachineStore>;

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
}

impl ClusterSettings {
    pub fn me(&self) -> Option<&Peer> {
        self.peers.iter().find(|p| p.id == self.node_id)
    }
}

/// A node's role as Redis clients see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Leader,
    Follower,
    Candidate,
    Learner,
    Shutdown,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Leader => "leader",
            Role::Follower => "follower",
            Role::Candidate => "candidate",
            Role::Learner => "learner",
            Role::Shutdown => "shutdown",
        }
    }
}

/// One member as this node knows it.
#[derive(Clone, Debug)]
pub struct Member {
    pub id: NodeId,
    pub peer: Peer,
    pub voter: bool,
    /// The highest log index known to be on it (its own applied index for this node; what it
    /// acknowledged, on the leader; unknown elsewhere).
    pub index: Option<u64>,
}

/// What ROLE, INFO replication and FLOCK.CLUSTER show.
#[derive(Clone, Debug)]
pub struct ClusterView {
    pub node_id: NodeId,
    pub role: Role,
    /// The leader this node hears from (itself, if it leads); `None` while it hears none.
    pub leader: Option<NodeId>,
    pub term: u64,
    pub commit_index: u64,
    pub applied_index: u64,
    pub members: Vec<Member>,
    pub log: crate::log_store::LogStats,
    /// Entries applied here as no-ops: their proposal had taken effect already.
    pub duplicates_skipped: u64,
}

impl ClusterView {
    pub fn member(&self, id: NodeId) -> Option<&Member> {
        self.members.iter().find(|m| m.id == id)
    }

    /// What `member` is as this node sees it: `leader`, `follower` (a voter) or `learner`.
    pub fn role_of(&self, member: &Member) -> &'static str {
        if Some(member.id) == self.leader {
            "leader"
        } else if member.voter {
            "follower"
        } else {
            "learner"
        }
    }
}

struct Node {
    me: Me,
    settings: ClusterSettings,
    raft: Raft,
    peers: Arc<Peers>,
    pending: Arc<PendingTable>,
    clock: Arc<Clock>,
    host: Arc<dyn Apply>,
    log: LogStore,
    store: MachineStore,
    /// True once this node leads and has re-armed the leases: the expiry task may run.
    leading: watch::Sender<bool>,
    /// True once this node leads and its clock continues from the log's time: only then does
    /// it stamp proposals.
    in_office: std::sync::atomic::AtomicBool,
    /// When a leader's append (or heartbeat) last arrived.
    last_append: parking_lot::Mutex<Option<Instant>>,
    /// This node's dir id and the ones it saw of its peers.
    identities: Arc<Identities>,
    figures: RaftFigures,
}

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
    let tmp = dir.join("incarnation.tmp");
    let write = || -> io::Result<()> {
        use std::io::Write;
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(format!("{next}\n").as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)?;
        std::fs::File::open(dir)?.sync_all()
    };
    write().map_err(io_at(&path))?;
    Ok(next)
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
        let dir = settings.dir.clone();
        std::fs::create_dir_all(&dir).map_err(io_at(&dir))?;
        let incarnation = next_incarnation(&dir)?;
        let identities = Arc::new(
            tokio::task::block_in_place(|| Identities::open(&dir, settings.node_id))
                .map_err(io_at(&dir))?,
        );
        let me = Me {
            node: settings.node_id,
            incarnation,
        };
        let log_dir = dir.join("log");
        let log = tokio::task::block_in_place(|| {
            LogStore::open(&log_dir, settings.sync_delay_ms.clone())
        })
        .map_err(io_at(&log_dir))?;
        let pristine = log.is_pristine().map_err(io_at(&log_dir))?;
        let pending = Arc::new(PendingTable::default());
        let snapshot_dir = dir.join("snapshot");
        let store = tokio::task::block_in_place(|| {
            MachineStore::open(&snapshot_dir, host.clone(), pending.clone(), me)
        })
        .map_err(io_at(&snapshot_dir))?;
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
        let peers = Arc::new(Peers::new(transport.clone(), identities.clone()));
        let network = NetworkFactory {
            peers: peers.clone(),
            transfers: Arc::new(AtomicU64::new(1)),
        };
        let log_stats = log.clone();
        let raft = openraft::Raft::new(settings.node_id, config, network, log, store.clone())
            .await
            .map_err(|e| StartError::Raft(e.to_string()))?;
        identities.watch_membership(raft.metrics());

        let addr = SocketAddr::new(settings.bind, settings.cport);
        let listener = transport
            .listen(addr)
            .await
            .map_err(|source| StartError::Bind {
                addr: addr.to_string(),
                source,
            })?;
        let (leading, _) = watch::channel(false);
        let node = Arc::new(Node {
            me,
            settings,
            raft: raft.clone(),
            peers,
            pending,
            clock,
            host,
            log: log_stats,
            store: store.clone(),
            leading,
            in_office: std::sync::atomic::AtomicBool::new(false),
            last_append: parking_lot::Mutex::new(None),
            identities,
            figures: RaftFigures::default(),
        });
        tokio::spawn(serve_peers(listener, node.clone()));
        tokio::spawn(count_leader_changes(node.clone()));
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
                    "formed a new cluster with {} member(s)",
                    node.settings.peers.len()
                ),
                // Another member's vote got here first: this node joins that cluster.
                Err(e) => info!("not initializing the cluster here: {e}"),
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
                    node.in_office
                        .store(false, std::sync::atomic::Ordering::Release);
                    node.leading.send_replace(false);
                    info!(node = node.me.node, "no longer the leader");
                }
            },
        );
        Ok(Cluster {
            node,
            _leader_watch: watch,
        })
    }

    /// Proposes `ops` as one entry. The receiver gets their results once the entry is applied
    /// here, or an error once no leader committed it within `cluster-wait-leader-ms`.
    pub fn propose(&self, ops: Vec<Op>) -> oneshot::Receiver<Outcome> {
        self.node.propose(ops)
    }

    /// Waits until a linearizable read may be served from this node's applied state: every write
    /// committed before the call is applied here (the leader's ReadIndex, confirmed by a quorum).
    /// Returns the leader's clock at that point, what the read judges leases by. Tried again
    /// after a leader change, until `cluster-wait-leader-ms`, as a proposal is.
    pub async fn read_point(&self) -> Result<Millis, ClusterError> {
        self.node.read_point().await
    }

    /// The leader's clock (what this node stamps with, if it leads).
    pub fn now(&self) -> Millis {
        self.node.clock.now()
    }

    /// True while this node leads and has re-armed the leases.
    pub fn leadership(&self) -> watch::Receiver<bool> {
        self.node.leading.subscribe()
    }

    /// Waits until the leader this node knows is no longer `known`, and returns the new one
    /// (`None`: no leader known). Returns `known` when the node shuts down.
    pub async fn leader_changed(&self, known: Option<NodeId>) -> Option<NodeId> {
        let mut metrics = self.node.raft.metrics();
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

    pub fn view(&self) -> ClusterView {
        self.node.view()
    }

    /// Leader changes seen, commands forwarded, proposal durations: for the metrics port.
    pub fn figures(&self) -> RaftFiguresRead {
        self.node.figures.read()
    }

    /// FLOCK.CLUSTER ADD: the node joins as a learner, catches up, then becomes a voter.
    pub async fn add(&self, id: NodeId, addr: &str) -> Result<(), String> {
        let peer = parse_addr(id, addr).map_err(|e| e.to_string())?;
        let raft = &self.node.raft;
        raft.add_learner(id, basic_node(&peer.addr()), true)
            .await
            .map_err(write_error)?;
        raft.change_membership(ChangeMembers::AddVoterIds(BTreeSet::from([id])), false)
            .await
            .map_err(write_error)?;
        Ok(())
    }

    /// FLOCK.CLUSTER REMOVE: the node leaves the voters and the cluster.
    pub async fn remove(&self, id: NodeId) -> Result<(), String> {
        let raft = &self.node.raft;
        raft.change_membership(ChangeMembers::RemoveVoters(BTreeSet::from([id])), false)
            .await
            .map_err(write_error)?;
        Ok(())
    }

    /// FLOCK.CLUSTER LEADER: hands leadership to `id`.
    pub async fn transfer_leader(&self, id: NodeId) -> Result<(), String> {
        let view = self.view();
        if view.role != Role::Leader {
            return Err(match view.leader {
                Some(l) => format!("this node is not the leader (node {l} is)"),
                None => "no leader is known".to_owned(),
            });
        }
        if view.member(id).is_none_or(|m| !m.voter) {
            return Err(format!("node {id} is not a voting member"));
        }
        self.node
            .raft
            .trigger()
            .transfer_leader(id)
            .await
            .map_err(|e| e.to_string())
    }

    pub async fn shutdown(&self) {
        self.node.leading.send_replace(false);
        if let Err(e) = self.node.raft.shutdown().await {
            warn!("raft shutdown: {e}");
        }
        // Tasks that still hold the store (peer connections winding down) must not keep the
        // directory locked: closing it here lets the same process open it again at once.
        tokio::task::block_in_place(|| self.node.log.close());
    }
}

fn write_error(e: RaftError<FlockRaft, ClientWriteError<FlockRaft>>) -> String {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => match f.leader_id {
            Some(l) => format!("this node is not the leader (node {l} is)"),
            None => "no leader is known".to_owned(),
        },
        other => other.to_string(),
    }
}

/// What a new leader does before its expiry task runs: see every entry of earlier terms
/// applied, move its clock past their times, and re-arm every live lease for its full length
/// plus the longest election timeout (a failover lengthens a lease, never shortens it).
async fn take_office(node: Arc<Node>) {
    info!(node = node.me.node, "took office as the leader");
    // openraft reports the committed vote a moment before its leader state takes writes: a
    // write then is told to forward to nobody. Try again while this node is still the one
    // voted for, for up to an election timeout.
    let deadline = Instant::now() + Duration::from_millis(node.settings.election_timeout_ms);
    loop {
        match node.raft.write_blank().await {
            Ok(_) => break,
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f)))
                if f.leader_id.is_none_or(|id| id == node.me.node) && Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Err(e) => {
                warn!("lost the leadership while taking office: {e}");
                return;
            }
        }
    }
    // This node's clock ran on from its own start: it may be far ahead of the log's time
    // (it started before the last leader did), and stamping with it would end every lease at
    // once. Nothing was stamped with it as leader yet, so it continues from the log's time.
    node.clock.continue_from(node.host.time());
    node.in_office
        .store(true, std::sync::atomic::Ordering::Release);
    let extra_ms = node.settings.election_timeout_ms * 2;
    match node.propose(vec![Op::Rearm { extra_ms }]).await {
        Ok(Ok(results)) => info!("re-armed every live lease as the new leader: {results:?}"),
        Ok(Err(e)) => {
            warn!("cannot re-arm the leases: {e}");
            return;
        }
        Err(_) => return,
    }
    if node.raft.is_leader() {
        node.leading.send_replace(true);
    }
}

impl Node {
    /// `cluster-wait-leader-ms`: how long a command may wait for a leader to commit it.
    fn wait_leader(&self) -> Duration {
        Duration::from_millis(self.settings.wait_leader_ms)
    }

    fn propose(self: &Arc<Self>, ops: Vec<Op>) -> oneshot::Receiver<Outcome> {
        let (seq, outcome) = self.pending.register();
        let deadline = Instant::now() + self.wait_leader();
        tokio::spawn(self.clone().submit(seq, ops, deadline));
        outcome
    }

    /// Gets proposal `seq` committed: here if this node leads, else at the leader it knows,
    /// again after every failure (the same seq: a copy that did take effect makes the others
    /// no-ops) until it is answered or `deadline` passes.
    async fn submit(self: Arc<Self>, seq: u64, ops: Vec<Op>, deadline: Instant) {
        let mut metrics = self.raft.metrics();
        let mut last_why = "no leader is known".to_owned();
        let proposed = deadline - self.wait_leader();
        loop {
            if !self.pending.is_waiting(seq) {
                return;
            }
            let now = Instant::now();
            if now >= deadline {
                self.pending.resolve(
                    seq,
                    Err(ClusterError::NoLeader {
                        waited_ms: self.settings.wait_leader_ms,
                        why: last_why,
                    }),
                );
                return;
            }
            let proposal = Proposal {
                origin: Origin {
                    node: self.me.node,
                    incarnation: self.me.incarnation,
                    seq,
                    floor: self.pending.floor(),
                },
                at: Millis(0),
                ops: ops.clone(),
            };
            let leader = metrics.borrow_watched().current_leader;
            let outcome = match leader {
                // A leader cut off from the majority holds the entry until it commits or a
                // newer leader's log replaces it (after the partition heals): the client is
                // answered at its limit all the same. Should the entry commit later, its apply
                // finds the seq answered and drops the result.
                Some(id) if id == self.me.node => {
                    tokio::time::timeout(deadline - now, self.write_here(proposal))
                        .await
                        .unwrap_or_else(|_| Forwarded::Failed(UNACKNOWLEDGED_WRITE.to_owned()))
                }
                Some(id) => {
                    self.figures.forwarded(ops.len());
                    tokio::select! {
                        outcome = self.forward(id, proposal, deadline - now) => outcome,
                        () = leader_moved_from(self.raft.metrics(), id) => {
                            Forwarded::Failed(format!("node {id} stopped leading while it had the request"))
                        }
                    }
                }
                None => Forwarded::NotLeader { leader: None },
            };
            match outcome {
                // Applied on the leader: this node's own apply answers the client.
                Forwarded::Committed => {
                    self.figures.proposal_committed(proposed.elapsed());
                    return;
                }
                Forwarded::NotLeader { leader } => last_why = not_leading(leader),
                Forwarded::Failed(why) => last_why = why,
            }
            news_of_a_leader(&mut metrics, deadline).await;
        }
    }

    async fn read_point(&self) -> Result<Millis, ClusterError> {
        let deadline = Instant::now() + self.wait_leader();
        let mut metrics = self.raft.metrics();
        let mut last_why = "no leader is known".to_owned();
        loop {
            let now = Instant::now();
            if now >= deadline {
                return Err(ClusterError::NoLeader {
                    waited_ms: self.settings.wait_leader_ms,
                    why: last_why,
                });
            }
            let leader = metrics.borrow_watched().current_leader;
            let point = match leader {
                Some(id) if id == self.me.node => {
                    tokio::time::timeout(deadline - now, self.read_index_here())
                        .await
                        .unwrap_or_else(|_| ReadPoint::Failed(UNCONFIRMED_READ.to_owned()))
                }
                Some(id) => {
                    tokio::select! {
                        point = self.read_index_at(id, deadline - now) => point,
                        () = leader_moved_from(self.raft.metrics(), id) => {
                            ReadPoint::Failed(format!("node {id} stopped leading while it had the read"))
                        }
                    }
                }
                None => ReadPoint::NotLeader { leader: None },
            };
            match point {
                ReadPoint::Ready { index, at } => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    return match self
                        .raft
                        .wait(Some(left))
                        .applied_index_at_least(Some(index), "read point")
                        .await
                    {
                        Ok(_) => Ok(at),
                        Err(openraft::metrics::WaitError::ShuttingDown) => {
                            Err(ClusterError::ShuttingDown)
                        }
                        Err(openraft::metrics::WaitError::Timeout(..)) => {
                            Err(ClusterError::NoLeader {
                                waited_ms: self.settings.wait_leader_ms,
                                why: format!("this node had not applied index {index} yet"),
                            })
                        }
                    };
                }
                ReadPoint::NotLeader { leader } => last_why = not_leading(leader),
                ReadPoint::Failed(why) => last_why = why,
            }
            news_of_a_leader(&mut metrics, deadline).await;
        }
    }

    /// The read point as the leader: its commit index once a quorum confirmed it still leads
    /// (a leader cut off from the majority gets no confirmation and names none).
    async fn read_index_here(&self) -> ReadPoint {
        if !self.in_office.load(std::sync::atomic::Ordering::Acquire) {
            return ReadPoint::NotLeader {
                leader: Some(self.me.node),
            };
        }
        match self.raft.get_read_linearizer(ReadPolicy::ReadIndex).await {
            Ok(linearizer) => ReadPoint::Ready {
                index: linearizer.read_log_id().index(),
                at: self.clock.now(),
            },
            Err(RaftError::APIError(LinearizableReadError::ForwardToLeader(f))) => {
                ReadPoint::NotLeader {
                    leader: f.leader_id,
                }
            }
            // openraft's text names every member: the reply keeps to the point.
            Err(RaftError::APIError(LinearizableReadError::QuorumNotEnough(_))) => {
                ReadPoint::Failed(UNCONFIRMED_READ.to_owned())
            }
            Err(e) => ReadPoint::Failed(e.to_string()),
        }
    }

    async fn read_index_at(&self, leader: NodeId, left: Duration) -> ReadPoint {
        let Some(addr) = self.address_of(leader) else {
            return ReadPoint::NotLeader { leader: None };
        };
        let client = self.peers.client(leader, &addr);
        match client.call(&Request::ReadIndex, left).await {
            Ok(Response::ReadPoint(point)) => point,
            Ok(other) => ReadPoint::Failed(format!("unexpected answer {other:?}")),
            Err(e) => ReadPoint::Failed(e.to_string()),
        }
    }

    /// Proposes on this node as the leader: stamped with the leader's clock, once it is in
    /// office (until then the proposer tries again shortly).
    async fn write_here(&self, mut proposal: Proposal) -> Forwarded {
        if !self.in_office.load(std::sync::atomic::Ordering::Acquire) {
            return Forwarded::NotLeader {
                leader: Some(self.me.node),
            };
        }
        proposal.at = self.clock.now();
        match self.raft.client_write(proposal).await {
            Ok(_) => Forwarded::Committed,
            // Discarded: a newer leader's log replaced the entry here (it may have committed
            // there all the same). Sent again with the same seq, it takes effect at most once.
            Err(RaftError::APIError(
                ClientWriteError::ForwardToLeader(f) | ClientWriteError::LogEntryDiscarded(f),
            )) => Forwarded::NotLeader {
                leader: f.leader_id,
            },
            Err(e) => Forwarded::Failed(e.to_string()),
        }
    }

    async fn forward(&self, leader: NodeId, proposal: Proposal, left: Duration) -> Forwarded {
        let Some(addr) = self.address_of(leader) else {
            return Forwarded::NotLeader { leader: None };
        };
        let client = self.peers.client(leader, &addr);
        match client.call(&Request::Forward(proposal), left).await {
            Ok(Response::Forwarded(outcome)) => outcome,
            Ok(other) => Forwarded::Failed(format!("unexpected answer {other:?}")),
            Err(e) => Forwarded::Failed(e.to_string()),
        }
    }

    fn address_of(&self, id: NodeId) -> Option<String> {
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow_watched();
        metrics
            .membership_config
            .nodes()
            .find(|(nid, _)| **nid == id)
            .map(|(_, n)| n.addr.clone())
    }

    fn view(&self) -> ClusterView {
        let metrics = self.raft.metrics();
        let m = metrics.borrow_watched();
        let role = match m.state {
            ServerState::Leader => Role::Leader,
            ServerState::Follower => Role::Follower,
            ServerState::Candidate => Role::Candidate,
            ServerState::Learner => Role::Learner,
            ServerState::Shutdown => Role::Shutdown,
        };
        let applied_index = m.last_applied.map_or(0, |id| id.index);
        let voters: BTreeSet<NodeId> = m.membership_config.voter_ids().collect();
        let members = m
            .membership_config
            .nodes()
            .map(|(id, n)| {
                let index = if *id == self.me.node {
                    Some(applied_index)
                } else {
                    m.replication
                        .as_ref()
                        .and_then(|r| r.get(id).cloned())
                        .flatten()
                        .map(|id| id.index)
                };
                Member {
                    id: *id,
                    peer: parse_addr(*id, &n.addr).unwrap_or(Peer {
                        id: *id,
                        host: n.addr.clone(),
                        port: 0,
                        cport: 0,
                    }),
                    voter: voters.contains(id),
                    index,
                }
            })
            .collect();
        // openraft keeps naming the last leader while no other is elected; a follower that
        // has not heard from it for two election timeouts knows no leader.
        let heard = self.last_append.lock().is_some_and(|at| {
            at.elapsed() < Duration::from_millis(self.settings.election_timeout_ms * 2)
        });
        let leader = m.current_leader.filter(|id| *id == self.me.node || heard);
        ClusterView {
            node_id: self.me.node,
            role,
            leader,
            term: m.current_term,
            commit_index: m.local_committed.map_or(0, |id| id.index),
            applied_index,
            members,
            log: self.log.stats(),
            duplicates_skipped: self.store.duplicates_skipped(),
        }
    }
}

/// Why a write proposed on the leader got no answer in time: no majority acknowledged its entry
/// (this leader is cut off, or the majority is slow). Its outcome is unknown: the entry stays in
/// this leader's log and may still commit.
const UNACKNOWLEDGED_WRITE: &str = "the leader got no majority to acknowledge it; its outcome is unknown, it may still take effect";

/// Why the leader named no read point in time: no majority confirmed it still leads.
const UNCONFIRMED_READ: &str = "the leader got no majority to confirm that it still leads";

/// Why the last attempt found no leader to take it.
fn not_leading(leader: Option<NodeId>) -> String {
    match leader {
        Some(l) => format!("node {l} was said to lead"),
        None => "no leader is known".to_owned(),
    }
}

/// Returns once this node knows a leader other than `leader`: a request sent to a leader that was
/// paused or cut off is then sent again to the new one at once (the copies share a seq, so at
/// most one takes effect), instead of waiting out `cluster-wait-leader-ms` on the old one.
async fn leader_moved_from(
    mut metrics: openraft::alias::WatchReceiverOf<FlockRaft, openraft::RaftMetrics<FlockRaft>>,
    leader: NodeId,
) {
    loop {
        let current = metrics.borrow_watched().current_leader;
        if current.is_some_and(|id| id != leader) {
            return;
        }
        if metrics.changed().await.is_err() {
            // shutting down: the request's own deadline ends the wait
            std::future::pending::<()>().await;
        }
    }
}

/// Waits for news of a leader (or a little while) before the next attempt.
async fn news_of_a_leader(
    metrics: &mut openraft::alias::WatchReceiverOf<FlockRaft, openraft::RaftMetrics<FlockRaft>>,
    deadline: Instant,
) {
    let pause = Duration::from_millis(50).min(deadline.saturating_duration_since(Instant::now()));
    let _ = tokio::time::timeout(pause, metrics.changed()).await;
}

/// The cluster port: one task per peer connection.
/// Counts every new leader this node hears of (not the gaps without one), until it shuts down.
async fn count_leader_changes(node: Arc<Node>) {
    let mut metrics = node.raft.metrics();
    let mut known = metrics.borrow_watched().current_leader;
    while metrics.changed().await.is_ok() {
        let current = metrics.borrow_watched().current_leader;
        if current.is_some() && current != known {
            node.figures.leader_changed();
            known = current;
        }
    }
}

async fn serve_peers(mut listener: Box<dyn Listener>, node: Arc<Node>) {
    loop {
        let stream = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) if e.kind() == io::ErrorKind::NotConnected => return,
            Err(e) => {
                warn!("cluster port accept: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let handler: Arc<dyn PeerHandler> = node.clone();
        let store = node.store.clone();
        let peer = stream.peer.clone();
        tokio::spawn(async move {
            if let Err(e) = serve_connection(stream, handler, store).await {
                tracing::debug!(%peer, "peer connection ended: {e}");
            }
        });
    }
}

/// A peer's answer: the response, or the error's text.
fn answer<T, E: std::fmt::Display>(result: Result<T, E>, wrap: fn(T) -> Response) -> Response {
    match result {
        Ok(r) => wrap(r),
        Err(e) => Response::Failed(e.to_string()),
    }
}

impl PeerHandler for Node {
    fn greet(&self, peer: Identity) -> Result<Identity, String> {
        match self.identities.check(peer) {
            Ok(()) => Ok(self.identities.me()),
            Err(why) => {
                error!("refusing a connection from node {}: {why}", peer.node);
                Err(why)
            }
        }
    }

    fn refused(&self, why: String) {
        self.identities.refused_by_peer(why);
    }

    fn handle(&self, request: Request) -> BoxFuture<'_, Response> {
        Box::pin(async move {
            let raft = &self.raft;
            match request {
                Request::Append(rpc) => {
                    *self.last_append.lock() = Some(Instant::now());
                    answer(raft.append_entries(rpc).await, Response::Append)
                }
                Request::Vote(rpc) => answer(raft.vote(rpc).await, Response::Vote),
                Request::PreVote(rpc) => answer(raft.pre_vote(rpc).await, Response::Vote),
                Request::TransferLeader(rpc) => answer(
                    raft.handle_transfer_leader(rpc).await,
                    Response::TransferLeader,
                ),
                // The asking node stops waiting at its own limit; this one does not wait longer.
                Request::Forward(proposal) => Response::Forwarded(
                    tokio::time::timeout(self.wait_leader(), self.write_here(proposal))
                        .await
                        .unwrap_or_else(|_| Forwarded::Failed(UNACKNOWLEDGED_WRITE.to_owned())),
                ),
                Request::ReadIndex => Response::ReadPoint(
                    tokio::time::timeout(self.wait_leader(), self.read_index_here())
                        .await
                        .unwrap_or_else(|_| ReadPoint::Failed(UNCONFIRMED_READ.to_owned())),
                ),
                Request::SnapshotBegin { .. }
                | Request::SnapshotChunk { .. }
                | Request::SnapshotEnd { .. }
                | Request::Hello(_)
                | Request::Refuse(_) => {
                    Response::Failed("this message belongs to its connection".to_owned())
                }
            }
        })
    }

    fn install(
        &self,
        vote: crate::types::Vote,
        meta: crate::types::SnapshotMeta,
        file: crate::state_machine::SnapshotFile,
    ) -> BoxFuture<'_, Response> {
        Box::pin(async move {
            let snapshot = openraft::alias::SnapshotOf::<FlockRaft, _> {
                meta,
                snapshot: file,
            };
            match self.raft.install_full_snapshot(vote, snapshot).await {
                Ok(r) => Response::Snapshot(r),
                Err(e) => Response::Failed(e.to_string()),
            }
        })
    }
}
