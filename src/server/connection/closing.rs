//! What a closing connection ends: the holdings it took with SESSION (one op, through the
//! log, built by FLOCK.ACQUIRE's side), its subscriptions, and its place in the client list.

use bytes::Bytes;
use tracing::warn;

use super::Connection;
use crate::commands::{end_session, unsubscribe};
use crate::log::commit;

impl<S> Connection<S> {
    /// Remembers the names a proposal holds for the connection's session, to end at close.
    #[inline]
    pub(super) fn hold_for_session(&mut self, names: &mut Vec<Bytes>) {
        if !names.is_empty() {
            self.holdings.extend(names.drain(..));
        }
    }

    /// Ends what the connection held; it is gone from the server afterwards.
    pub(super) async fn close(mut self) {
        // Calls answered whose replies were never written (the client went first) count too.
        self.tally.settle(&self.shared.stats);
        let id = self.conn.handle.id;
        let names = std::mem::take(&mut self.holdings);
        // One op per group that holds some of them (a multi-group node's names may be in
        // several).
        let mut by_group: Vec<Vec<Bytes>> = vec![Vec::new(); self.shared.groups.len()];
        for name in names {
            by_group[self.shared.group_index(&name)].push(name);
        }
        for names in by_group.into_iter().filter(|n| !n.is_empty()) {
            let op = end_session(id, names);
            if let Err(e) = commit(&*self.shared.log, vec![op]).await {
                // The holdings then end with their leases.
                warn!(
                    client = id,
                    "could not end the connection's SESSION holdings: {e}"
                );
            }
        }
        unsubscribe::leave_all(&self.shared.applied.pubsub, &mut self.conn);
        self.shared.clients.unregister(id);
    }
}
