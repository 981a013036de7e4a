//! What a command sees: the server's services, its own connection's state and the time it
//! runs at; and what it hands back to the connection: an outcome, or a proposal (an op, how to
//! answer from its result, and whether it blocks).

use std::collections::BTreeSet;
use std::sync::Arc;

use bytes::Bytes;
use flockd_core::{Op, OpResult, StateMachine, WaitId};
use flockd_proto::{ProtocolVersion, Reply};
use parking_lot::RwLockReadGuard;

use super::error::CommandError;
use super::server::Server;
use crate::services::clients::ClientHandle;
use crate::services::pubsub::{Delivery, Mailbox, SubscriptionKind};

/// Per-connection state that commands read and change.
pub struct ConnState {
    pub handle: Arc<ClientHandle>,
    pub authenticated: bool,
    /// Who the connection is (`default` until AUTH), as of ACL generation `acl_generation`.
    pub user: std::sync::Arc<flockd_acl::User>,
    pub acl_generation: u64,
    /// Between MULTI and EXEC (or DISCARD): the connection, which queues the commands, sets and
    /// clears it on the [`Outcome`]s of MULTI, EXEC, DISCARD and RESET.
    pub in_transaction: bool,
    pub subscriptions: Subscriptions,
    /// READONLY: on a cluster node, reads for names it does not lead run here (current, as
    /// any read here) rather than being redirected. READWRITE and RESET clear it.
    pub readonly: bool,
}

impl ConnState {
    /// A new connection's state: as in Redis, it starts as `default`, logged in if that user
    /// needs no password.
    pub fn new(server: &dyn Server, handle: Arc<ClientHandle>) -> ConnState {
        let user = server
            .acl()
            .user("default")
            .expect("the default user always exists");
        ConnState {
            handle,
            authenticated: user.enabled && user.nopass,
            acl_generation: server.acl().generation(),
            user,
            in_transaction: false,
            subscriptions: Subscriptions::default(),
            readonly: false,
        }
    }

    /// The protocol the connection speaks (HELLO's; kept in its [`ClientHandle`] alone).
    pub fn protocol(&self) -> ProtocolVersion {
        self.handle.protocol()
    }

    /// Who the connection is now: for its own checks, and as CLIENT LIST shows it.
    pub fn set_user(&mut self, user: Arc<flockd_acl::User>) {
        self.handle.names.lock().user = Some(Bytes::from(user.name.clone()));
        self.user = user;
    }

    /// Whether this connection came in on the sentinel port, where the node is a Sentinel.
    pub fn on_sentinel_port(&self, server: &dyn Server) -> bool {
        server
            .sentinel_addr()
            .is_some_and(|a| a.port() == self.handle.laddr.port())
    }
}

/// The connection's pub/sub subscriptions, and its mailbox once it has subscribed.
#[derive(Default)]
pub struct Subscriptions {
    pub channels: BTreeSet<Bytes>,
    pub patterns: BTreeSet<Bytes>,
    pub shard_channels: BTreeSet<Bytes>,
    pub mailbox: Option<Arc<Mailbox>>,
    /// Drained by the connection loop into the socket.
    pub inbox: Option<tokio::sync::mpsc::UnboundedReceiver<Delivery>>,
}

impl Subscriptions {
    /// The set of subscriptions of `kind`.
    pub fn of(&mut self, kind: SubscriptionKind) -> &mut BTreeSet<Bytes> {
        match kind {
            SubscriptionKind::Channel => &mut self.channels,
            SubscriptionKind::Pattern => &mut self.patterns,
            SubscriptionKind::Shard => &mut self.shard_channels,
        }
    }

    /// The count a frame of `kind` carries, as in Redis: channels and patterns together, or
    /// the shard channels alone.
    pub fn count(&self, kind: SubscriptionKind) -> usize {
        match kind {
            SubscriptionKind::Channel | SubscriptionKind::Pattern => {
                self.channels.len() + self.patterns.len()
            }
            SubscriptionKind::Shard => self.shard_channels.len(),
        }
    }

    /// Whether the connection is in subscribed mode.
    pub fn active(&self) -> bool {
        !(self.channels.is_empty() && self.patterns.is_empty() && self.shard_channels.is_empty())
    }

    /// The next batch of messages published to the connection; never, if it has not subscribed.
    pub async fn next_delivery(&mut self) -> Option<Delivery> {
        match &mut self.inbox {
            Some(inbox) => inbox.recv().await,
            None => std::future::pending().await,
        }
    }
}

pub struct Ctx<'a> {
    /// What the command may use of the server.
    pub server: &'a dyn Server,
    pub conn: &'a mut ConnState,
}

impl Ctx<'_> {
    /// The applied state of the group that serves `name`, for read commands.
    pub fn machine_of(&self, name: &[u8]) -> RwLockReadGuard<'_, StateMachine> {
        self.server.group_of(name).applied.read()
    }
}

/// What the connection loop does after a connection or read command.
pub enum Outcome {
    Reply(Reply),
    /// Send the reply, then close the connection (QUIT).
    ReplyAndClose(Reply),
    /// Close without a reply (SHUTDOWN, as Redis does when it goes down).
    Close,
    /// MULTI: queue the connection's next commands, and reply +OK.
    BeginTransaction,
    /// EXEC: run the queued commands.
    Exec,
    /// Drop the queued commands if any, then send the reply (DISCARD; RESET, which drops
    /// everything).
    Discard(Reply),
    /// Send the reply, then enter monitor mode (MONITOR).
    Monitor(Reply),
    /// Several replies to one command, each its own frame ((P)SUBSCRIBE, (P)UNSUBSCRIBE).
    Replies(Vec<Reply>),
    /// The reply once this finishes (FLOCK.CLUSTER ADD waits for Raft); the connection's
    /// later commands wait for it, as behind a blocking command.
    Await(std::pin::Pin<Box<dyn std::future::Future<Output = Reply> + Send>>),
}

impl From<Reply> for Outcome {
    fn from(reply: Reply) -> Outcome {
        Outcome::Reply(reply)
    }
}

pub type CommandResult = Result<Outcome, CommandError>;

pub fn reply(reply: Reply) -> CommandResult {
    Ok(Outcome::Reply(reply))
}

/// A state command turned into what the log carries, and how to answer from the result.
pub struct Proposal {
    pub op: Op,
    pub reply: fn(OpResult) -> Result<Reply, CommandError>,
    /// Set when the connection blocks like BLPOP if the op queues (FLOCK.ACQUIRE ... WAIT).
    pub blocking: Option<Blocking>,
    /// The names the op holds for the connection's session (SESSION): they end when it closes.
    pub session_names: Vec<Bytes>,
}

/// A state command that blocks when its op queues, like BLPOP: for how long, and how.
#[derive(Clone, Copy)]
pub struct Blocking {
    pub wait_ms: u64,
    pub hook: &'static BlockingHook,
}

impl Blocking {
    /// How a command with `WAIT wait_ms` blocks: not at all without one.
    pub fn for_wait(wait_ms: u64, hook: &'static BlockingHook) -> Option<Blocking> {
        (wait_ms > 0).then_some(Blocking { wait_ms, hook })
    }
}

/// What the connection's blocking code asks of a blocking command, so that it names no op or
/// result of its own: whether the op queued, how to leave the queue, and the replies.
pub struct BlockingHook {
    /// The wait the op's result is queued as, if it queued.
    pub queued: fn(&OpResult) -> Option<WaitId>,
    /// The op that takes a wait of the command's op out of its queue; with `true` it also
    /// gives back a grant that won the race (the client is gone).
    pub cancel: fn(&Op, WaitId, bool) -> Op,
    /// The reply to the result of that cancel: the grant that won the race, or `nothing`.
    pub cancelled: fn(OpResult) -> Reply,
    /// The reply of a wait that got nothing.
    pub nothing: fn() -> Reply,
    /// The reply to a grant: its tokens, in the order of the names.
    pub granted: fn(&[u64]) -> Reply,
}
