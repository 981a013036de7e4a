//! The peer protocol on the cluster port: frames of `[u32 length][u64 request id][postcard
//! body]`, requests and their responses matched by id, so one TCP connection per peer carries
//! heartbeats, appends, votes, snapshot chunks and forwarded client writes at once. Each
//! connection starts with a hello each way (node id and dir id, see [`crate::identity`]). A client
//! connection reconnects on its next call after any failure; frames are bounded in size, and
//! the number of requests a peer may have in flight on one connection is bounded too.

use std::collections::HashMap;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use flockd_core::Millis;
use openraft::error::{RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::{RPCOption, RaftNetworkFactory, v2::RaftNetworkV2};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest,
    TransferLeaderResponse, VoteRequest, VoteResponse,
};
use openraft::{BasicNode, OptionalSend};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::oneshot;
use tracing::{debug, info, warn};

use crate::dedup::Dedup;
use crate::identity::{Identities, Identity};
use crate::state_machine::SnapshotData;
use crate::transport::{PeerWriter, Transport};
use crate::types::{FlockRaft, NodeId, RaftProposal, SnapshotMeta, Vote};

/// The largest frame either side reads (a snapshot chunk or an append batch is far below).
pub const MAX_FRAME: usize = 64 << 20;
/// What a frame's buffer starts at before its bytes arrive (most frames are far smaller).
const FRAME_PREALLOC: usize = 64 << 10;
/// The least time a refused connect takes to be reported: it paces the retries to a dead peer.
const FAILED_CONNECT_PACE: Duration = Duration::from_millis(100);
/// Bytes of a snapshot sent per chunk.
pub const SNAPSHOT_CHUNK: usize = 1 << 20;

#[derive(Debug, Serialize, Deserialize)]
pub enum Request {
    /// The first message on every connection: who dials, from which dir.
    Hello(Identity),
    /// The dialer refuses the node it reached (that node lost its dir): why, before it hangs up.
    Refuse(String),
    Append(AppendEntriesRequest<FlockRaft>),
    Vote(VoteRequest<FlockRaft>),
    PreVote(VoteRequest<FlockRaft>),
    SnapshotBegin {
        transfer: u64,
    },
    SnapshotChunk {
        transfer: u64,
        offset: u64,
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
    },
    SnapshotEnd {
        transfer: u64,
        len: u64,
        vote: Vote,
        meta: SnapshotMeta,
        dedup: Dedup,
    },
    TransferLeader(TransferLeaderRequest<FlockRaft>),
    /// A client write from a node that is not the leader: propose it here.
    Forward(RaftProposal),
    /// A read on a node that is not the leader: confirm leadership, name the read point.
    ReadIndex,
    /// Are you there, and which members do you know? Sent by every node to every member twice a
    /// second: the answers are the members' up or down state, and how a node that was removed
    /// while it could not hear it learns so.
    Probe,
    /// A request for one of a multi-group cluster's other groups (`cluster-groups`), on the
    /// connection the groups share. The first group's requests go bare, so a one-group cluster
    /// sends exactly what it did before groups existed.
    Group {
        group: u16,
        request: Box<Request>,
    },
    /// FLOCK.CLUSTER ADD or REMOVE sent by a member that does not lead the group to the one
    /// that does (a multi-group node leads some groups and not others).
    Membership(MembershipChange),
}

/// A change of the members, as FLOCK.CLUSTER asks it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MembershipChange {
    Add { id: NodeId, addr: String },
    Remove { id: NodeId },
}

impl Request {
    /// `request` as group `group` sends it.
    pub fn in_group(group: u16, request: Request) -> Request {
        match group {
            0 => request,
            group => Request::Group {
                group,
                request: Box::new(request),
            },
        }
    }

    /// The group a request is for, and the request itself (a group's request never nests).
    pub fn group(self) -> (u16, Request) {
        match self {
            Request::Group { group, request } => (group, *request),
            request => (0, request),
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
pub enum Response {
    /// The answer to a hello: who was reached.
    Hello(Identity),
    /// The answer to a hello from a node this one refuses: why.
    Refused(String),
    Append(AppendEntriesResponse<FlockRaft>),
    Vote(VoteResponse<FlockRaft>),
    SnapshotChunk,
    Snapshot(SnapshotResponse<FlockRaft>),
    TransferLeader(TransferLeaderResponse<FlockRaft>),
    Forwarded(Forwarded),
    ReadPoint(ReadPoint),
    Failed(String),
    Probe(ProbeAnswer),
    /// A membership change made by the leader it was sent to: `None`, or why not.
    Membership(Option<String>),
}

/// A member's answer to a probe: the membership it knows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeAnswer {
    /// The log index of the membership entry it knows (`None`: it was never part of one).
    pub membership_index: Option<u64>,
    /// Every member of that membership, voters and learners.
    pub members: Vec<NodeId>,
}

/// What became of a forwarded (or local) client write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Forwarded {
    /// Committed and applied on the leader.
    Committed,
    /// This node is not the leader; it may know who is.
    NotLeader {
        leader: Option<NodeId>,
    },
    Failed(String),
}

/// Where a linearizable read may be served (openraft's ReadIndex, confirmed by a quorum).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReadPoint {
    /// Once the reader has applied `index`, its state holds every write committed before the
    /// read arrived; `at` is the leader's clock then, what the read judges leases by.
    Ready {
        index: u64,
        at: Millis,
    },
    /// This node is not the leader; it may know who is.
    NotLeader {
        leader: Option<NodeId>,
    },
    Failed(String),
}

#[derive(Debug, thiserror::Error)]
pub enum NetError {
    #[error("cannot connect to {addr}: {source}")]
    Connect { addr: String, source: io::Error },
    #[error("connection to {0} lost")]
    Lost(String),
    #[error("{addr} did not answer within {after:?}")]
    Timeout { addr: String, after: Duration },
    #[error("message encoding: {0}")]
    Encode(String),
    #[error("the peer failed: {0}")]
    Remote(String),
    #[error("refused: {0}")]
    Refused(String),
    #[error("{addr} is node {found}, not node {expected}")]
    WrongNode {
        addr: String,
        expected: NodeId,
        found: NodeId,
    },
}

/// What a connection's reader buffers: the frames of a batch of heartbeats, appends and
/// answers come in one read instead of three reads each (length, id, body).
pub const READ_BUFFER: usize = 64 << 10;

/// Reads one frame: `(request id, body)`. `None` at a clean end of stream.
pub async fn read_frame<R: AsyncRead + Unpin>(r: &mut R) -> io::Result<Option<(u64, Vec<u8>)>> {
    let len = match r.read_u32().await {
        Ok(len) => len as usize,
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    };
    if !(8..=MAX_FRAME).contains(&len) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a peer frame of {len} bytes (at most {MAX_FRAME})"),
        ));
    }
    let id = r.read_u64().await?;
    // The length is the peer's word: the buffer grows with the bytes that arrive, so a header
    // that declares 64 MiB and then stalls or hangs up holds no more than it sent.
    let want = len - 8;
    let mut body = Vec::with_capacity(want.min(FRAME_PREALLOC));
    let got = (&mut *r).take(want as u64).read_to_end(&mut body).await?;
    if got < want {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("a peer frame ended after {got} of its {want} bytes"),
        ));
    }
    Ok(Some((id, body)))
}

/// A request's body as the serving side reads it. Public so that the fuzz targets run the very
/// decode the cluster port runs.
pub fn decode_request(body: &[u8]) -> Result<Request, postcard::Error> {
    decode_whole(body)
}

/// A response's body as the dialing side reads it.
pub fn decode_response(body: &[u8]) -> Result<Response, postcard::Error> {
    decode_whole(body)
}

/// A message that is the whole body: postcard alone stops where the message ends and leaves
/// the rest unread, so a body with bytes left over (a frame made of parts of two) would pass.
fn decode_whole<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, postcard::Error> {
    match postcard::take_from_bytes(body)? {
        (message, []) => Ok(message),
        _ => Err(postcard::Error::DeserializeBadEncoding),
    }
}

pub fn frame<T: Serialize>(id: u64, message: &T) -> Result<Vec<u8>, NetError> {
    let body = postcard::to_allocvec(message).map_err(|e| NetError::Encode(e.to_string()))?;
    if body.len() + 8 > MAX_FRAME {
        return Err(NetError::Encode(format!(
            "a message of {} bytes is over the frame limit",
            body.len()
        )));
    }
    let mut out = Vec::with_capacity(12 + body.len());
    out.extend_from_slice(&((body.len() + 8) as u32).to_be_bytes());
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(&body);
    Ok(out)
}

pub async fn write_all<W: AsyncWrite + Unpin>(w: &mut W, bytes: &[u8]) -> io::Result<()> {
    w.write_all(bytes).await?;
    w.flush().await
}

/// One live connection to a peer.
struct Connection {
    /// `None` once a frame was cut short (see [`Connection::send_frame`]).
    writer: tokio::sync::Mutex<Option<PeerWriter>>,
    waiting: Mutex<HashMap<u64, oneshot::Sender<Response>>>,
    next_id: AtomicU64,
    dead: AtomicBool,
}

/// What became of a frame sent on a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sent {
    Whole,
    /// The deadline came while another call had the writer: not a byte of it went, and the
    /// connection is as good as it was.
    NotWritten,
    /// Cut short at the deadline: the connection is done.
    Cut,
    /// The write failed (the peer is gone): the connection is done.
    Broken,
    /// An earlier frame was cut: the connection's writing had ended.
    Closed,
}

impl Connection {
    /// Writes one frame whole by `deadline`, or ends the connection's writing for good. A
    /// write given up part way (the deadline: a paused peer reads nothing and the socket's
    /// buffer fills; or an error) leaves the peer in the middle of a frame. The next frame
    /// written would be read as the rest of this one, and the decoder takes a request made of
    /// two as readily as any: an append whose last entry the leader never sent. So the writer
    /// is shut down and dropped, and the calls waiting behind it write nothing.
    async fn send_frame(&self, bytes: &[u8], deadline: Instant) -> Sent {
        // Uncontended (nearly always), the lock is taken without arming a timer.
        let mut slot = match self.writer.try_lock() {
            Ok(slot) => slot,
            Err(_) => match tokio::time::timeout_at(deadline.into(), self.writer.lock()).await {
                Ok(slot) => slot,
                Err(_) => return Sent::NotWritten,
            },
        };
        let Some(writer) = slot.as_mut() else {
            return Sent::Closed;
        };
        let failed = match tokio::time::timeout_at(deadline.into(), write_all(writer, bytes)).await
        {
            Ok(Ok(())) => return Sent::Whole,
            Ok(Err(_)) => Sent::Broken,
            Err(_) => Sent::Cut,
        };
        self.dead.store(true, Ordering::Release);
        if let Some(mut writer) = slot.take() {
            // The peer reads what arrived, then the end of the stream: a frame cut short, which
            // it drops with the connection. Bounded: a TLS close may wait for room to be sent.
            tokio::spawn(async move {
                let _ = tokio::time::timeout(CUT_SHUTDOWN, writer.shutdown()).await;
            });
        }
        failed
    }
}

/// How long a connection whose frame was cut short tries to tell the peer it ended.
const CUT_SHUTDOWN: Duration = Duration::from_secs(1);

/// The client side of one peer: calls share one connection, made again after a failure.
pub struct PeerClient {
    /// The member this client calls, and its `host:cport`.
    node: NodeId,
    addr: String,
    transport: Arc<dyn Transport>,
    identities: Arc<Identities>,
    connection: tokio::sync::Mutex<Option<Arc<Connection>>>,
    /// When a refusal was last logged: openraft retries every heartbeat.
    refusal_logged: Mutex<Option<std::time::Instant>>,
    /// What the log has said of this peer being reachable.
    health: Mutex<Health>,
}

/// Failures to reach a peer for less than this are a blip (a lost connection made again at
/// the next call, a heartbeat late on a busy machine), not worth a line.
const DOWN_AFTER: Duration = Duration::from_secs(1);
/// While a peer stays down, how often the log says so again.
const DOWN_REMINDER: Duration = Duration::from_secs(60);

/// A peer's reachability as the log tells it: one line when it goes down, a reminder at most
/// once every [`DOWN_REMINDER`] while it stays down, one line when it is back. openraft retries
/// every heartbeat (ten times a second); its own lines about it are at DEBUG.
#[derive(Default)]
struct Health {
    /// When the current run of failed calls began; `None` while calls succeed.
    failing_since: Option<Instant>,
    /// Failed calls in the current run.
    failures: u64,
    /// When the log last said the peer is down; `None` unless it said so since it was up.
    reported: Option<Instant>,
    /// When the peer last answered a call.
    answered_at: Option<Instant>,
}

/// What the log says of a peer after a call.
#[derive(Debug, PartialEq, Eq)]
enum Say {
    Down,
    StillDown { down_for: Duration, failures: u64 },
    Back { down_for: Duration, failures: u64 },
}

impl Health {
    fn missed(&mut self, now: Instant) -> Option<Say> {
        let since = *self.failing_since.get_or_insert(now);
        self.failures += 1;
        let down_for = now.saturating_duration_since(since);
        let say = match self.reported {
            None if down_for >= DOWN_AFTER => Say::Down,
            Some(at) if now.saturating_duration_since(at) >= DOWN_REMINDER => Say::StillDown {
                down_for,
                failures: self.failures,
            },
            _ => return None,
        };
        self.reported = Some(now);
        Some(say)
    }

    fn reached(&mut self, now: Instant) -> Option<Say> {
        self.answered_at = Some(now);
        let since = self.failing_since.take()?;
        let failures = std::mem::take(&mut self.failures);
        self.reported.take()?;
        Some(Say::Back {
            down_for: now.saturating_duration_since(since),
            failures,
        })
    }
}

/// A duration as the log shows it: `850 ms`, `12.3 s`, `4 min 10 s`.
fn for_humans(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        format!("{ms} ms")
    } else if ms < 60_000 {
        format!("{:.1} s", d.as_secs_f64())
    } else {
        let s = d.as_secs();
        format!("{} min {} s", s / 60, s % 60)
    }
}

impl PeerClient {
    pub fn new(
        node: NodeId,
        addr: String,
        transport: Arc<dyn Transport>,
        identities: Arc<Identities>,
    ) -> PeerClient {
        PeerClient {
            node,
            addr,
            transport,
            identities,
            connection: tokio::sync::Mutex::new(None),
            refusal_logged: Mutex::new(None),
            health: Mutex::new(Health::default()),
        }
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The connection to the peer, made (connect and hello) by `deadline` if there is none.
    async fn connected(&self, deadline: Instant) -> Result<Arc<Connection>, NetError> {
        let timeout = deadline.saturating_duration_since(Instant::now());
        // Another call may be connecting: its wait is bounded by its own deadline, not ours.
        let mut slot = match self.connection.try_lock() {
            Ok(slot) => slot,
            Err(_) => {
                match tokio::time::timeout_at(deadline.into(), self.connection.lock()).await {
                    Ok(slot) => slot,
                    Err(_) => return Err(self.timed_out(timeout)),
                }
            }
        };
        if let Some(connection) = slot.as_ref()
            && !connection.dead.load(Ordering::Acquire)
        {
            return Ok(connection.clone());
        }
        let connect = self.transport.connect(&self.addr);
        let started = tokio::time::Instant::now();
        let stream = match tokio::time::timeout(timeout.min(Duration::from_secs(1)), connect).await
        {
            Ok(Ok(stream)) => stream,
            Ok(Err(source)) => {
                // A refused connect fails at once, and openraft sends a heartbeat (and logs its
                // failure) on every commit: to a dead peer, hundreds a second. The failure is
                // told no sooner than a heartbeat interval after the try, which paces them; a
                // dead peer's answer is no answer either way.
                tokio::time::sleep_until(started + timeout.min(FAILED_CONNECT_PACE)).await;
                return Err(NetError::Connect {
                    addr: self.addr.clone(),
                    source,
                });
            }
            Err(_) => {
                return Err(NetError::Connect {
                    addr: self.addr.clone(),
                    source: io::Error::new(io::ErrorKind::TimedOut, "connect timed out"),
                });
            }
        };
        let mut reader = tokio::io::BufReader::with_capacity(READ_BUFFER, stream.reader);
        let connection = Arc::new(Connection {
            writer: tokio::sync::Mutex::new(Some(stream.writer)),
            waiting: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            dead: AtomicBool::new(false),
        });
        let reading = connection.clone();
        let addr = self.addr.clone();
        tokio::spawn(async move {
            loop {
                match read_frame(&mut reader).await {
                    Ok(Some((id, body))) => {
                        let Ok(response) = decode_response(&body) else {
                            debug!(%addr, "undecodable response from a peer");
                            break;
                        };
                        if let Some(tx) = reading.waiting.lock().remove(&id) {
                            let _ = tx.send(response);
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        debug!(%addr, "peer connection: {e}");
                        break;
                    }
                }
            }
            reading.dead.store(true, Ordering::Release);
            // Every caller still waiting sees its sender dropped: the connection is lost.
            reading.waiting.lock().clear();
        });
        self.greet(&connection, deadline).await.inspect_err(|_| {
            connection.dead.store(true, Ordering::Release);
        })?;
        *slot = Some(connection.clone());
        Ok(connection)
    }

    /// The hello both ends of a new connection trade: each checks the other's dir.
    async fn greet(&self, connection: &Arc<Connection>, deadline: Instant) -> Result<(), NetError> {
        let me = self.identities.me();
        match self
            .call_on(connection, &Request::Hello(me), deadline)
            .await?
        {
            Response::Hello(peer) if peer.node != self.node => Err(NetError::WrongNode {
                addr: self.addr.clone(),
                expected: self.node,
                found: peer.node,
            }),
            Response::Hello(peer) => match self.identities.check(peer) {
                Ok(()) => Ok(()),
                Err(why) => {
                    self.log_refusal(&why);
                    // Told, the refused node stops; a lost message is sent again next call.
                    if let Ok(bytes) = frame(0, &Request::Refuse(why.clone())) {
                        connection.send_frame(&bytes, deadline).await;
                    }
                    Err(NetError::Refused(why))
                }
            },
            Response::Refused(why) => {
                self.identities.refused_by_peer(why.clone());
                Err(NetError::Refused(why))
            }
            other => Err(NetError::Remote(format!("a hello answered with {other:?}"))),
        }
    }

    fn log_refusal(&self, why: &str) {
        let mut last = self.refusal_logged.lock();
        if last.is_none_or(|at| at.elapsed() > Duration::from_secs(5)) {
            *last = Some(std::time::Instant::now());
            tracing::error!("refusing node {} at {}: {why}", self.node, self.addr);
        }
    }

    /// Sends group `group`'s `request` and waits up to `timeout` for its response.
    pub async fn call_in(
        &self,
        group: u16,
        request: Request,
        timeout: Duration,
    ) -> Result<Response, NetError> {
        self.call(&Request::in_group(group, request), timeout).await
    }

    /// Sends `request` and waits for its response: `timeout` bounds the whole call, a connect
    /// and hello first included (a read or a forward must answer within its client's limit).
    pub async fn call(&self, request: &Request, timeout: Duration) -> Result<Response, NetError> {
        let deadline = Instant::now() + timeout;
        let result = match self.connected(deadline).await {
            Ok(connection) => self.call_on(&connection, request, deadline).await,
            Err(e) => Err(e),
        };
        match &result {
            // The peer answered (an error of its own is still an answer).
            Ok(_) | Err(NetError::Remote(_) | NetError::Encode(_)) => self.reached(),
            // A refusal has its own line (log_refusal); the peer is there.
            Err(NetError::Refused(_)) => {}
            Err(e) => self.missed(e),
        }
        result
    }

    fn reached(&self) {
        if let Some(Say::Back { down_for, failures }) = self.health.lock().reached(Instant::now()) {
            info!(
                "node {} at {} is reachable again after {} ({failures} failed tries)",
                self.node,
                self.addr,
                for_humans(down_for)
            );
        }
    }

    /// Whether the peer answered a call within the last `window`.
    pub fn answered_within(&self, window: Duration) -> bool {
        self.health
            .lock()
            .answered_at
            .is_some_and(|at| at.elapsed() < window)
    }

    /// Every error but a refusal names the address.
    fn missed(&self, e: &NetError) {
        match self.health.lock().missed(Instant::now()) {
            Some(Say::Down) => warn!("node {} is unreachable: {e} (retrying)", self.node),
            Some(Say::StillDown { down_for, failures }) => warn!(
                "node {} still unreachable after {} ({failures} failed tries): {e}",
                self.node,
                for_humans(down_for)
            ),
            _ => debug!(node = self.node, addr = %self.addr, "peer call failed: {e}"),
        }
    }

    async fn call_on(
        &self,
        connection: &Arc<Connection>,
        request: &Request,
        deadline: Instant,
    ) -> Result<Response, NetError> {
        let timeout = deadline.saturating_duration_since(Instant::now());
        // The connect and hello took the whole time: nothing is sent, and the connection,
        // which did nothing wrong, is kept.
        if timeout.is_zero() {
            return Err(self.timed_out(timeout));
        }
        let id = connection.next_id.fetch_add(1, Ordering::Relaxed);
        let bytes = frame(id, request)?;
        let (tx, rx) = oneshot::channel();
        connection.waiting.lock().insert(id, tx);
        let lost = || NetError::Lost(self.addr.clone());
        let sent = connection.send_frame(&bytes, deadline).await;
        match sent {
            Sent::Whole => {}
            Sent::NotWritten => {
                connection.waiting.lock().remove(&id);
                return Err(self.timed_out(timeout));
            }
            Sent::Cut | Sent::Broken | Sent::Closed => {
                if sent == Sent::Cut {
                    // Rare (a peer that stopped reading), and it costs the connection: say so.
                    warn!(
                        "a {}-byte message to node {} at {} was cut short after {:?}: its connection ends",
                        bytes.len(),
                        self.node,
                        self.addr,
                        timeout
                    );
                }
                connection.dead.store(true, Ordering::Release);
                connection.waiting.lock().remove(&id);
                return Err(lost());
            }
        }
        match tokio::time::timeout_at(deadline.into(), rx).await {
            Ok(Ok(Response::Failed(why))) => Err(NetError::Remote(why)),
            Ok(Ok(response)) => Ok(response),
            Ok(Err(_)) => Err(lost()),
            Err(_) => {
                connection.waiting.lock().remove(&id);
                // A peer that does not answer may be gone: the next call connects afresh.
                connection.dead.store(true, Ordering::Release);
                Err(self.timed_out(timeout))
            }
        }
    }

    fn timed_out(&self, after: Duration) -> NetError {
        NetError::Timeout {
            addr: self.addr.clone(),
            after,
        }
    }
}

/// The client of every peer, by node id.
pub struct Peers {
    transport: Arc<dyn Transport>,
    identities: Arc<Identities>,
    clients: Mutex<HashMap<NodeId, Arc<PeerClient>>>,
}

impl Peers {
    pub fn new(transport: Arc<dyn Transport>, identities: Arc<Identities>) -> Peers {
        Peers {
            transport,
            identities,
            clients: Mutex::new(HashMap::new()),
        }
    }

    /// Whether `node` answered a call within the last `window` (no client yet: it did not).
    pub fn answered_within(&self, node: NodeId, window: Duration) -> bool {
        self.clients
            .lock()
            .get(&node)
            .is_some_and(|client| client.answered_within(window))
    }

    /// The client of `node` at `addr` (`host:port@cport`), made anew if the address changed.
    pub fn client(&self, node: NodeId, addr: &str) -> Arc<PeerClient> {
        let cluster_addr = crate::peers::cluster_addr_of(addr);
        let mut clients = self.clients.lock();
        match clients.get(&node) {
            Some(client) if client.addr() == cluster_addr => client.clone(),
            _ => {
                let client = Arc::new(PeerClient::new(
                    node,
                    cluster_addr,
                    self.transport.clone(),
                    self.identities.clone(),
                ));
                clients.insert(node, client.clone());
                client
            }
        }
    }
}

/// openraft's network for one group: a [`PeerNetwork`] per target, over the [`Peers`] every
/// group of the node shares.
pub struct NetworkFactory {
    pub peers: Arc<Peers>,
    pub transfers: Arc<AtomicU64>,
    pub group: u16,
}

impl RaftNetworkFactory<FlockRaft> for NetworkFactory {
    type Network = PeerNetwork;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> PeerNetwork {
        PeerNetwork {
            client: self.peers.client(target, &node.addr),
            transfers: self.transfers.clone(),
            group: self.group,
        }
    }
}

pub struct PeerNetwork {
    client: Arc<PeerClient>,
    transfers: Arc<AtomicU64>,
    group: u16,
}

fn unreachable<E: std::error::Error + 'static>(e: E) -> RPCError<FlockRaft> {
    RPCError::Unreachable(Unreachable::new(&e))
}

fn vote_response(response: Response) -> Result<VoteResponse<FlockRaft>, Response> {
    match response {
        Response::Vote(response) => Ok(response),
        other => Err(other),
    }
}

fn unexpected(response: Response) -> NetError {
    NetError::Remote(format!("unexpected response {response:?}"))
}

impl PeerNetwork {
    /// One request and the response `pick` expects; anything else is the peer unreachable
    /// (openraft backs off and tries again).
    async fn rpc<T>(
        &self,
        request: Request,
        option: &RPCOption,
        pick: fn(Response) -> Result<T, Response>,
    ) -> Result<T, RPCError<FlockRaft>> {
        match self
            .client
            .call_in(self.group, request, option.hard_ttl())
            .await
        {
            Ok(response) => pick(response).map_err(|other| unreachable(unexpected(other))),
            Err(e) => Err(unreachable(e)),
        }
    }
}

impl RaftNetworkV2<FlockRaft> for PeerNetwork {
    type SnapshotData = SnapshotData;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<FlockRaft>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<FlockRaft>, RPCError<FlockRaft>> {
        self.rpc(Request::Append(rpc), &option, |r| match r {
            Response::Append(response) => Ok(response),
            other => Err(other),
        })
        .await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<FlockRaft>,
        option: RPCOption,
    ) -> Result<VoteResponse<FlockRaft>, RPCError<FlockRaft>> {
        self.rpc(Request::Vote(rpc), &option, vote_response).await
    }

    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<FlockRaft>,
        option: RPCOption,
    ) -> Result<VoteResponse<FlockRaft>, RPCError<FlockRaft>> {
        self.rpc(Request::PreVote(rpc), &option, vote_response)
            .await
    }

    async fn transfer_leader(
        &mut self,
        req: TransferLeaderRequest<FlockRaft>,
        option: RPCOption,
    ) -> Result<TransferLeaderResponse<FlockRaft>, RPCError<FlockRaft>> {
        self.rpc(Request::TransferLeader(req), &option, |r| match r {
            Response::TransferLeader(response) => Ok(response),
            other => Err(other),
        })
        .await
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: openraft::alias::SnapshotOf<FlockRaft, SnapshotData>,
        cancel: impl std::future::Future<Output = ReplicationClosed> + OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<FlockRaft>, StreamingError<FlockRaft>> {
        let stream_err = |e: NetError| StreamingError::Unreachable(Unreachable::new(&e));
        let transfer = self.transfers.fetch_add(1, Ordering::Relaxed);
        let mut file = tokio::fs::File::open(&snapshot.snapshot.path)
            .await
            .map_err(|e| StreamingError::Unreachable(Unreachable::new(&e)))?;
        let chunk_timeout = option.hard_ttl().max(Duration::from_secs(5));
        let mut cancel = std::pin::pin!(cancel);
        let begin = Request::SnapshotBegin { transfer };
        match self.client.call_in(self.group, begin, chunk_timeout).await {
            Ok(Response::SnapshotChunk) => {}
            Ok(other) => return Err(stream_err(unexpected(other))),
            Err(e) => return Err(stream_err(e)),
        }
        let mut offset = 0u64;
        loop {
            let mut data = vec![0u8; SNAPSHOT_CHUNK];
            let mut filled = 0;
            while filled < data.len() {
                let n = file
                    .read(&mut data[filled..])
                    .await
                    .map_err(|e| StreamingError::Unreachable(Unreachable::new(&e)))?;
                if n == 0 {
                    break;
                }
                filled += n;
            }
            if filled == 0 {
                break;
            }
            data.truncate(filled);
            let chunk = Request::SnapshotChunk {
                transfer,
                offset,
                data,
            };
            tokio::select! {
                closed = &mut cancel => return Err(StreamingError::Closed(closed)),
                sent = self.client.call_in(self.group, chunk, chunk_timeout) => match sent {
                    Ok(Response::SnapshotChunk) => {}
                    Ok(other) => return Err(stream_err(unexpected(other))),
                    Err(e) => return Err(stream_err(e)),
                },
            }
            offset += filled as u64;
        }
        let end = Request::SnapshotEnd {
            transfer,
            len: offset,
            vote,
            meta: snapshot.meta,
            dedup: snapshot.snapshot.dedup,
        };
        // Loading a large snapshot takes a while on the other side.
        match self
            .client
            .call_in(self.group, end, chunk_timeout * 12)
            .await
        {
            Ok(Response::Snapshot(response)) => Ok(response),
            Ok(other) => Err(stream_err(unexpected(other))),
            Err(e) => Err(stream_err(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_down_is_told_once_then_once_a_minute_and_once_back() {
        let mut health = Health::default();
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        assert_eq!(health.reached(at(0)), None, "up, and never said otherwise");
        // a blip shorter than DOWN_AFTER says nothing, before or after
        assert_eq!(health.missed(at(100)), None);
        assert_eq!(health.missed(at(600)), None);
        assert_eq!(health.reached(at(700)), None);
        // down for 130 s, a try every 100 ms
        let mut said = Vec::new();
        for tick in 0..=1300u64 {
            if let Some(say) = health.missed(at(1000 + tick * 100)) {
                said.push((tick * 100, say));
            }
        }
        assert_eq!(
            said,
            vec![
                (1000, Say::Down),
                (
                    61_000,
                    Say::StillDown {
                        down_for: Duration::from_millis(61_000),
                        failures: 611
                    }
                ),
                (
                    121_000,
                    Say::StillDown {
                        down_for: Duration::from_millis(121_000),
                        failures: 1211
                    }
                ),
            ]
        );
        assert_eq!(
            health.reached(at(132_000)),
            Some(Say::Back {
                down_for: Duration::from_millis(131_000),
                failures: 1301
            })
        );
        assert_eq!(health.reached(at(132_100)), None, "back is said once");
        assert_eq!(for_humans(Duration::from_millis(850)), "850 ms");
        assert_eq!(for_humans(Duration::from_millis(12_340)), "12.3 s");
        assert_eq!(for_humans(Duration::from_secs(250)), "4 min 10 s");
    }
}
