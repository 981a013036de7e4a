//! The serving side of the cluster port: one task per connection reads requests and answers
//! each as soon as it is done (concurrently: a slow append does not hold up a vote), with at
//! most [`IN_FLIGHT`] unanswered at a time. A snapshot arrives as chunks written in order to a
//! file, then installed as a whole. The groups of a multi-group node share the connection: each
//! request goes to its group's [`PeerHandler`], and each group may receive a snapshot at once.

use std::io;
use std::sync::Arc;

use tokio::io::AsyncWriteExt;
use tokio::sync::{Semaphore, mpsc};

use crate::identity::Identity;
use crate::network::{
    READ_BUFFER, Request, Response, decode_request, frame, read_frame, write_all,
};
use crate::state_machine::{MachineStore, SnapshotData};
use crate::transport::BoxFuture;
use crate::transport::{PeerStream, PeerWriter};
use crate::types::{SnapshotMeta, Vote};

/// Requests one connection may have in flight; more wait to be read (TCP pushes back).
pub const IN_FLIGHT: usize = 256;
/// Answers gathered into one write, in bytes (one more answer may go over).
const WRITE_BATCH: usize = 64 << 10;
/// The largest snapshot a node accepts.
pub const MAX_SNAPSHOT: u64 = 64 << 30;

pub trait PeerHandler: Send + Sync + 'static {
    /// A dialer's hello: this node's identity to answer with, or why the dialer is refused.
    fn greet(&self, peer: Identity) -> Result<Identity, String>;
    /// A peer refused this node, and said why.
    fn refused(&self, why: String);
    fn handle(&self, request: Request) -> BoxFuture<'_, Response>;
    fn install(
        &self,
        vote: Vote,
        meta: SnapshotMeta,
        file: SnapshotData,
    ) -> BoxFuture<'_, Response>;
}

struct Receiving {
    transfer: u64,
    file: tokio::fs::File,
    path: std::path::PathBuf,
    received: u64,
}

impl Receiving {
    /// A transfer that will not be installed: its file goes (else it stays until the next
    /// snapshot or restart sweeps it, each up to [`MAX_SNAPSHOT`]).
    async fn discard(self) {
        drop(self.file);
        let _ = tokio::fs::remove_file(&self.path).await;
    }
}

/// The groups a node serves on its cluster port.
pub trait PeerGroups: Send + Sync + 'static {
    /// Group `group`'s handler and snapshot store; `None`: no such group here (or not started
    /// yet). Group 0 always exists once the port listens.
    fn group(&self, group: u16) -> Option<(Arc<dyn PeerHandler>, MachineStore)>;
}

/// A node of one group.
struct OneGroup(Arc<dyn PeerHandler>, MachineStore);

impl PeerGroups for OneGroup {
    fn group(&self, group: u16) -> Option<(Arc<dyn PeerHandler>, MachineStore)> {
        (group == 0).then(|| (self.0.clone(), self.1.clone()))
    }
}

/// Serves one connection of a node that has one group.
pub async fn serve_connection(
    stream: PeerStream,
    handler: Arc<dyn PeerHandler>,
    store: MachineStore,
) -> io::Result<()> {
    serve_groups(stream, Arc::new(OneGroup(handler, store))).await
}

/// Serves one connection, for every group of the node.
pub async fn serve_groups(stream: PeerStream, groups: Arc<dyn PeerGroups>) -> io::Result<()> {
    let PeerStream { reader, writer, .. } = stream;
    let mut reader = tokio::io::BufReader::with_capacity(READ_BUFFER, reader);
    let (replies, outbox) = mpsc::channel::<Vec<u8>>(IN_FLIGHT);
    let writing = tokio::spawn(write_replies(outbox, writer));
    let permits = Arc::new(Semaphore::new(IN_FLIGHT));
    // A snapshot being received, per group.
    let mut receiving: std::collections::HashMap<u16, Receiving> = Default::default();
    let mut greeted = false;
    let result = loop {
        let (id, body) = match read_frame(&mut reader).await {
            Ok(Some(frame)) => frame,
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        };
        let request = match decode_request(&body) {
            Ok(request) => request,
            Err(e) => {
                // Said, and the connection ends: a frame that does not decode may be a sender's
                // frame cut short with the next one read as its rest, and what follows cannot
                // be trusted to start where a frame starts.
                let _ = send(&replies, id, &Response::Failed(format!("undecodable: {e}"))).await;
                break Ok(());
            }
        };
        // The hello and a refusal are the connection's, never a group's: they come bare, and
        // nothing else is served before a hello is accepted.
        if !greeted || matches!(request, Request::Hello(_) | Request::Refuse(_)) {
            let Some((handler, _)) = groups.group(0) else {
                break Ok(());
            };
            match request {
                Request::Hello(peer) => match handler.greet(peer) {
                    Ok(me) => {
                        greeted = true;
                        send(&replies, id, &Response::Hello(me)).await;
                    }
                    Err(why) => {
                        send(&replies, id, &Response::Refused(why)).await;
                        break Ok(());
                    }
                },
                Request::Refuse(why) => {
                    handler.refused(why);
                    break Ok(());
                }
                _ => {
                    let why = "the cluster port takes a hello first (a flockd of another version?)";
                    send(&replies, id, &Response::Failed(why.to_owned())).await;
                }
            }
            continue;
        }
        let (group, request) = request.group();
        let Some((handler, store)) = groups.group(group) else {
            let why = format!(
                "no group {} here (a node of another cluster-groups?)",
                u32::from(group) + 1
            );
            send(&replies, id, &Response::Failed(why)).await;
            continue;
        };
        match request {
            Request::SnapshotBegin { transfer } => {
                // A transfer begun anew means the sender gave up on the last one.
                if let Some(abandoned) = receiving.remove(&group) {
                    abandoned.discard().await;
                }
                let path = store.receiving_path(transfer);
                let response = match tokio::fs::File::create(&path).await {
                    Ok(file) => {
                        receiving.insert(
                            group,
                            Receiving {
                                transfer,
                                file,
                                path,
                                received: 0,
                            },
                        );
                        Response::SnapshotChunk
                    }
                    Err(e) => Response::Failed(format!("{}: {e}", path.display())),
                };
                send(&replies, id, &response).await;
            }
            Request::SnapshotChunk {
                transfer,
                offset,
                data,
            } => {
                let response = match receiving.get_mut(&group) {
                    Some(r) if r.transfer == transfer && r.received == offset => {
                        if r.received + data.len() as u64 > MAX_SNAPSHOT {
                            Response::Failed("the snapshot is over the size limit".to_owned())
                        } else {
                            match r.file.write_all(&data).await {
                                Ok(()) => {
                                    r.received += data.len() as u64;
                                    Response::SnapshotChunk
                                }
                                Err(e) => Response::Failed(format!("{}: {e}", r.path.display())),
                            }
                        }
                    }
                    _ => Response::Failed("a snapshot chunk out of order".to_owned()),
                };
                send(&replies, id, &response).await;
            }
            Request::SnapshotEnd {
                transfer,
                len,
                vote,
                meta,
                dedup,
            } => {
                let response = match receiving.remove(&group) {
                    Some(mut r) if r.transfer == transfer && r.received == len => match async {
                        r.file.flush().await?;
                        r.file.sync_all().await
                    }
                    .await
                    {
                        Ok(()) => {
                            drop(r.file);
                            let file = SnapshotData {
                                path: r.path,
                                dedup,
                            };
                            handler.install(vote, meta, file).await
                        }
                        Err(e) => {
                            let why = format!("{}: {e}", r.path.display());
                            r.discard().await;
                            Response::Failed(why)
                        }
                    },
                    other => {
                        if let Some(r) = other {
                            r.discard().await;
                        }
                        Response::Failed("a snapshot ended that was not received whole".to_owned())
                    }
                };
                send(&replies, id, &response).await;
            }
            other => {
                let Ok(permit) = permits.clone().acquire_owned().await else {
                    break Ok(());
                };
                let handler = handler.clone();
                let replies = replies.clone();
                tokio::spawn(async move {
                    let response = handler.handle(other).await;
                    send(&replies, id, &response).await;
                    drop(permit);
                });
            }
        }
    };
    drop(replies);
    let _ = writing.await;
    for (_, r) in receiving {
        r.discard().await;
    }
    result
}

/// Writes the answers as they come, every answer ready at the time in one write: the answers
/// to a burst of appends and probes cost one syscall, not one each.
async fn write_replies(mut outbox: mpsc::Receiver<Vec<u8>>, mut writer: PeerWriter) {
    let mut batch = Vec::new();
    while let Some(first) = outbox.recv().await {
        batch.clear();
        batch.extend_from_slice(&first);
        while batch.len() < WRITE_BATCH {
            match outbox.try_recv() {
                Ok(more) => batch.extend_from_slice(&more),
                Err(_) => break,
            }
        }
        if write_all(&mut writer, &batch).await.is_err() {
            break;
        }
        // A snapshot's answers are small; a buffer grown by a rare large one is not kept.
        if batch.capacity() > 4 * WRITE_BATCH {
            batch = Vec::new();
        }
    }
    let _ = writer.shutdown().await;
}

async fn send(replies: &mpsc::Sender<Vec<u8>>, id: u64, response: &Response) -> bool {
    match frame(id, response) {
        Ok(bytes) => replies.send(bytes).await.is_ok(),
        Err(e) => {
            let fallback = Response::Failed(e.to_string());
            match frame(id, &fallback) {
                Ok(bytes) => replies.send(bytes).await.is_ok(),
                Err(_) => false,
            }
        }
    }
}
