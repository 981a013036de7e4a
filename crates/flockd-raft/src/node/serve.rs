//! The cluster port: one task per peer connection, and what this node answers its peers.

use super::propose::UNACKNOWLEDGED_WRITE;
use super::read::UNCONFIRMED_READ;
use super::*;

/// The cluster port: one task per peer connection, for every group of the node.
pub(super) async fn serve_peers(mut listener: Box<dyn Listener>, groups: Arc<Groups>) {
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
        let groups: Arc<dyn PeerGroups> = groups.clone();
        let peer = stream.peer.clone();
        tokio::spawn(async move {
            if let Err(e) = serve_groups(stream, groups).await {
                tracing::debug!(%peer, "peer connection ended: {e}");
            }
        });
    }
}

/// A peer's answer: the response, or the error's text.
pub(super) fn answer<T, E: std::fmt::Display>(
    result: Result<T, E>,
    wrap: fn(T) -> Response,
) -> Response {
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
                Request::Probe => Response::Probe(self.probe_answer()),
                // Made here only as the leader (no second hop): the sender retries elsewhere.
                Request::Membership(change) => {
                    Response::Membership(self.change_members_here(change).await.err())
                }
                Request::SnapshotBegin { .. }
                | Request::SnapshotChunk { .. }
                | Request::SnapshotEnd { .. }
                | Request::Hello(_)
                | Request::Refuse(_)
                | Request::Group { .. } => {
                    Response::Failed("this message belongs to its connection".to_owned())
                }
            }
        })
    }

    fn install(
        &self,
        vote: crate::types::Vote,
        meta: crate::types::SnapshotMeta,
        file: crate::state_machine::SnapshotData,
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
