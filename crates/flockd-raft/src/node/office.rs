//! A leader's first duties (see every earlier entry applied, move its clock on, re-arm the
//! leases) and the count of leader changes the metrics show.

use super::*;

/// What a new leader does before its expiry task runs: see every entry of earlier terms
/// applied, move its clock past their times, and re-arm every live lease for its full length
/// plus the longest election timeout (a failover lengthens a lease, never shortens it).
pub(super) async fn take_office(node: Arc<Node>) {
    let term = node.raft.metrics().borrow_watched().current_term;
    debug!(node = node.me.node, term, "elected: taking office");
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
            // Elected, but another node leads by now (a restarted ex-leader that won an old
            // term's vote, say): not a second leader, one that never took office.
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => {
                let leader = f
                    .leader_id
                    .map_or_else(|| "none known yet".to_owned(), |id| format!("node {id}"));
                info!(
                    node = node.me.node,
                    term, "did not take office: another node leads now ({leader}); following it"
                );
                return;
            }
            Err(e) => {
                warn!(node = node.me.node, term, "could not take office: {e}");
                return;
            }
        }
    }
    info!(node = node.me.node, term, "took office as the leader");
    // This node's clock ran on from its own start: it may be far ahead of the log's time
    // (it started before the last leader did), and stamping with it would end every lease at
    // once. Nothing was stamped with it as leader yet, so it continues from the log's time.
    node.clock.continue_from(node.host.time());
    node.stamping
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
        node.lease_duty.send_replace(true);
    }
}

/// Counts every new leader this node hears of (not the gaps without one), until it shuts down.
pub(super) async fn count_leader_changes(node: Arc<Node>) {
    let mut metrics = node.raft.server_metrics();
    let mut known = metrics.borrow_watched().current_leader;
    while metrics.changed().await.is_ok() {
        let current = metrics.borrow_watched().current_leader;
        if current.is_some() && current != known {
            node.counters.leader_changed();
            known = current;
        }
    }
}
