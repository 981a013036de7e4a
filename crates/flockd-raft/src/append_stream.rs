//! Appends to a follower, pipelined over the peer connection. openraft hands the leader's
//! replication (and each heartbeat) to the network as a stream of AppendEntries; sent one at a
//! time, each waited a round trip for the answer to the one before: after every commit the
//! entry-less message that tells the follower the new commit index held up the next client's
//! entry for a round trip (strace of the leader, one client, issue 36).
//!
//! Here the leader sends each request as soon as openraft yields it, and the answers are matched
//! in order. The follower feeds a connection's requests, in the order they arrived, to openraft's
//! [`Raft::stream_append`](openraft::Raft::stream_append), which submits each without waiting
//! for the one before (so consecutive entries share a flush there too), and answers each in
//! order. Order matters: an append that overtook the one before it would find a gap in the log.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use openraft::error::RPCError;
use openraft::raft::{AppendEntriesRequest, StreamAppendResult};
use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, mpsc, oneshot};
use tokio::time::Instant;

use crate::network::{
    Connection, NetError, PeerClient, Request, Response, send_reply, unreachable,
};
use crate::types::FlockRaft;

/// What openraft's replication reads: each request's result, in order.
pub type Answers = futures_util::stream::BoxStream<
    'static,
    Result<StreamAppendResult<FlockRaft>, RPCError<FlockRaft>>,
>;

/// Requests sent and not yet read back by openraft, at most (then the sender waits).
const UNANSWERED: usize = 64;

/// A request sent, waiting for its answer.
struct Sent {
    id: u64,
    at: Instant,
    answer: oneshot::Receiver<Response>,
}

/// The leader's side of one stream, as openraft reads it: the requests sent, in order, and the
/// task that sends them.
struct Receiving {
    client: Arc<PeerClient>,
    connection: Arc<Connection>,
    sent: mpsc::Receiver<Result<Sent, NetError>>,
    /// How long a request may wait for its answer (openraft's per-RPC limit).
    ttl: Duration,
    sender: tokio::task::AbortHandle,
}

impl Drop for Receiving {
    /// openraft drops a stream it is done with (after an error, or when it stops leading): its
    /// requests must stop with it, or two streams would share one replication's requests.
    fn drop(&mut self) {
        self.sender.abort();
    }
}

/// The leader's side: a task sends every request `requests` yields as it comes (openraft's
/// request stream is awaited there alone, never dropped midway but at the end); the stream
/// returned yields the answers in the same order, and ends after the first error (openraft
/// then starts another).
pub fn send_appends<S>(
    client: Arc<PeerClient>,
    connection: Arc<Connection>,
    mut requests: S,
    ttl: Duration,
) -> Answers
where
    S: Stream<Item = AppendEntriesRequest<FlockRaft>> + Send + Unpin + 'static,
{
    let (sent_tx, sent) = mpsc::channel(UNANSWERED);
    let sender = {
        let client = client.clone();
        let connection = connection.clone();
        tokio::spawn(async move {
            while let Some(rpc) = requests.next().await {
                let sent = client
                    .send_on(&connection, &Request::StreamAppend(rpc), ttl)
                    .await
                    .map(|(id, answer)| Sent {
                        id,
                        at: Instant::now(),
                        answer,
                    });
                let failed = sent.is_err();
                if sent_tx.send(sent).await.is_err() || failed {
                    return;
                }
            }
        })
    };
    let receiving = Receiving {
        client,
        connection,
        sent,
        ttl,
        sender: sender.abort_handle(),
    };
    Box::pin(futures_util::stream::unfold(
        Some(receiving),
        |state| async move {
            let mut r = state?;
            let outcome = match r.sent.recv().await? {
                Ok(sent) => answer_of(sent, &r).await,
                Err(e) => {
                    r.client.missed(&e);
                    Err(e)
                }
            };
            match outcome {
                Ok(result) => Some((Ok(result), Some(r))),
                Err(e) => Some((Err(unreachable(e)), None)),
            }
        },
    ))
}

/// A request's answer, as openraft takes it.
async fn answer_of(sent: Sent, r: &Receiving) -> Result<StreamAppendResult<FlockRaft>, NetError> {
    let answered = tokio::time::timeout_at(sent.at + r.ttl, sent.answer).await;
    let outcome = match answered {
        Ok(Ok(Response::Appended(result))) => Ok(result),
        Ok(Ok(Response::Failed(why))) => Err(NetError::Remote(why)),
        Ok(Ok(other)) => Err(NetError::Remote(format!("unexpected response {other:?}"))),
        Ok(Err(_)) => Err(NetError::Lost(r.client.addr().to_owned())),
        Err(_) => {
            r.connection.waiting.lock().remove(&sent.id);
            // A peer that does not answer may be gone: the next call connects afresh.
            r.connection.set_dead();
            Err(NetError::Timeout {
                addr: r.client.addr().to_owned(),
                after: r.ttl,
            })
        }
    };
    r.client.observe(&outcome);
    outcome
}

/// A follower's stream of answers, as openraft yields them (its error as text).
pub type Results =
    futures_util::stream::BoxStream<'static, Result<StreamAppendResult<FlockRaft>, String>>;

/// The requests of one connection's pipeline, in arrival order, for openraft.
pub type Requests = futures_util::stream::BoxStream<'static, AppendEntriesRequest<FlockRaft>>;

/// The ids of the requests in a pipeline not yet answered, oldest first, each with its place
/// among the connection's requests in flight.
struct Unanswered {
    ids: VecDeque<(u64, OwnedSemaphorePermit)>,
    /// Set once the results ended: requests pushed after it go to a new pipeline.
    ended: bool,
}

/// The follower's side on one connection: the requests go to openraft in the order they
/// arrived; each answer goes back, in the same order, under its request's id.
pub struct Pipeline {
    requests: mpsc::UnboundedSender<AppendEntriesRequest<FlockRaft>>,
    unanswered: Arc<Mutex<Unanswered>>,
}

impl Pipeline {
    /// Starts a pipeline: `appender` turns requests into openraft's results; each answer frame
    /// is sent to `replies`.
    pub fn start(
        appender: impl FnOnce(Requests) -> Results,
        replies: mpsc::Sender<Vec<u8>>,
    ) -> Pipeline {
        let (requests, queued) = mpsc::unbounded_channel();
        let unanswered = Arc::new(Mutex::new(Unanswered {
            ids: VecDeque::new(),
            ended: false,
        }));
        let requests_stream = Box::pin(futures_util::stream::unfold(queued, |mut queued| async {
            queued.recv().await.map(|rpc| (rpc, queued))
        }));
        let mut results = appender(requests_stream);
        let answering = unanswered.clone();
        tokio::spawn(async move {
            while let Some(result) = results.next().await {
                let Some((id, permit)) = answering.lock().ids.pop_front() else {
                    break;
                };
                let response = match result {
                    Ok(result) => Response::Appended(result),
                    Err(fatal) => Response::Failed(fatal),
                };
                let sent = send_reply(&replies, id, &response).await;
                drop(permit);
                if !sent {
                    break;
                }
            }
            // openraft ends a stream after a conflict or a higher vote: what was queued behind
            // it gets no result there. Its sender has dropped that stream by then; each still
            // gets an answer so that nothing waits for one.
            let left = {
                let mut unanswered = answering.lock();
                unanswered.ended = true;
                std::mem::take(&mut unanswered.ids)
            };
            for (id, _permit) in left {
                let why = "the append stream ended before this request".to_owned();
                if !send_reply(&replies, id, &Response::Failed(why)).await {
                    break;
                }
            }
        });
        Pipeline {
            requests,
            unanswered,
        }
    }

    /// Queues a request; gives it back if this pipeline has ended (start another).
    pub fn push(&self, queued: Queued) -> Result<(), Box<Queued>> {
        let mut unanswered = self.unanswered.lock();
        if unanswered.ended {
            return Err(Box::new(queued));
        }
        let Queued { id, rpc, permit } = queued;
        match self.requests.send(rpc) {
            Ok(()) => {
                unanswered.ids.push_back((id, permit));
                Ok(())
            }
            Err(mpsc::error::SendError(rpc)) => {
                unanswered.ended = true;
                Err(Box::new(Queued { id, rpc, permit }))
            }
        }
    }
}

/// An append as the follower's connection read it: its id, and its place among the
/// connection's requests in flight.
pub struct Queued {
    pub id: u64,
    pub rpc: AppendEntriesRequest<FlockRaft>,
    pub permit: OwnedSemaphorePermit,
}
