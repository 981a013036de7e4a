//! A single node's log: the append-only file, with group commit (`flockd-aof`). Its state is
//! always current, it always leads, and it is the only log with a file to rewrite.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use flockd_aof::{Aof, AofOptions, ReplayReport};
use flockd_core::{Millis, Op, StateMachine};
use flockd_metrics::{HistogramData, MetricsSnapshot};
use tokio::sync::watch;
use tracing::{info, warn};

use super::{
    BoxFuture, Committing, Fields, Group, Log, LogMember, LogRole, LogView, Membership, OpenError,
    Opened, ProposeError, ReadWait, Route, commit,
};
use crate::config::Config;
use crate::services::applied::AppliedState;
use crate::services::clock::Clock;

pub struct AofLog {
    aof: Arc<Aof>,
    clock: Arc<Clock>,
    /// Always true: a single node runs its own lease clock.
    lease_duty: watch::Sender<bool>,
    /// What loading the file at start found (INFO persistence).
    replayed: ReplayReport,
    /// The client port's address: the one member ROLE and the console show.
    addr: SocketAddr,
    /// The applied state, whose position is the log's (ROLE's offset).
    applied: Arc<AppliedState>,
}

/// Loads the AOF into a new state machine, opens it for appending and re-arms the leases that
/// were live at the last stop; `bump_tokens` (`--bump-tokens`) then raises every counter.
pub async fn open(
    config: &Config,
    bump_tokens: Option<u64>,
    addr: SocketAddr,
    new_applied: impl FnOnce(StateMachine) -> Arc<AppliedState>,
) -> Result<Opened, OpenError> {
    let aof_path = config.aof_path();
    let mut machine = StateMachine::new();
    let replayed = tokio::task::block_in_place(|| flockd_aof::load(&aof_path, &mut machine))
        .map_err(flockd_aof::AofError::from)?;
    // INFO counts what this run does, not the replayed history.
    machine.reset_stats();
    info!(
        file = %aof_path.display(),
        records = replayed.records,
        bytes = replayed.bytes,
        ms = replayed.elapsed.as_millis() as u64,
        "AOF loaded"
    );
    let (position, last_at) = (machine.position(), machine.time());
    let rearm = machine.has_holdings_or_waiters();
    let end_sessions = machine.has_session_holdings();
    let clock = Arc::new(Clock::continuing_from(last_at));
    let applied = new_applied(machine);
    let aof = tokio::task::block_in_place(|| {
        Aof::open(
            AofOptions {
                path: aof_path,
                fsync: config.appendfsync,
                rewrite_min_size: config.auto_aof_rewrite_min_size,
                rewrite_percentage: config.auto_aof_rewrite_percentage,
            },
            applied.clone(),
            position,
            last_at,
        )
    })?;
    if rearm {
        // Leases that were live at the stop get their full length from now (a restart never
        // shortens one); waits died with their connections, and so did every SESSION holding
        // (after the re-arm, so no waiter of the last run is handed what they free). Applied
        // now, logged in front of the next entry written (see `Aof::prepend_applied`).
        let mut ops = vec![Op::Rearm { extra_ms: 0 }];
        if end_sessions {
            ops.push(Op::EndAllSessions);
        }
        let entry = flockd_log::Entry {
            position: position + 1,
            at: clock.now(),
            ops,
        };
        let mut results = Vec::new();
        flockd_log::Apply::apply(&*applied, std::slice::from_ref(&entry), true, &mut results);
        aof.prepend_applied(entry);
        info!("re-armed live leases, ended the last run's sessions: {results:?}");
    }
    let log = AofLog {
        aof,
        clock: clock.clone(),
        lease_duty: watch::channel(true).0,
        replayed,
        addr,
        applied: applied.clone(),
    };
    if let Some(by) = bump_tokens {
        let results = commit(&log, vec![Op::BumpAll { by }])
            .await
            .map_err(|source| OpenError::Start {
                what: "--bump-tokens",
                source,
            })?;
        warn!(
            by,
            floor = applied.read().token_floor(),
            "raised every token counter (--bump-tokens): {results:?}"
        );
    }
    let log: Arc<dyn Log> = Arc::new(log);
    Ok(Opened {
        groups: vec![Group {
            applied: applied.clone(),
            log: log.clone(),
            clock,
        }],
        applied,
        log,
    })
}

impl Log for AofLog {
    fn propose(&self, ops: Vec<Op>) -> Committing {
        Committing::new(
            self.aof.propose(self.clock.now(), ops),
            ProposeError::Stopped,
        )
    }

    fn write_now(&self) {
        self.aof.write_now();
    }

    fn check_serving(&self) -> Result<(), ProposeError> {
        Ok(())
    }

    fn check_writable(&self) -> Result<(), ProposeError> {
        self.aof.check_writable()
    }

    fn now(&self) -> Millis {
        self.clock.now()
    }

    fn lease_duty(&self) -> watch::Receiver<bool> {
        self.lease_duty.subscribe()
    }

    fn read_point(&self) -> Option<ReadWait> {
        None
    }

    fn route(&self, _slot: u16) -> Route {
        Route::Here
    }

    fn view(&self) -> LogView {
        let position = self.applied.read().position();
        LogView {
            node_id: None,
            role: LogRole::Single,
            leader_id: None,
            term: 0,
            commit_index: position,
            applied_index: position,
            members: vec![LogMember {
                id: None,
                host: self.addr.ip().to_string(),
                port: self.addr.port(),
                addr: self.addr.to_string(),
                role: LogRole::Single.as_str(),
                index: Some(position),
                up: true,
                is_me: true,
            }],
            removed: None,
        }
    }

    fn persistence_info(&self, field: Fields<'_>) {
        let a = self.aof.stats();
        field("loading", &0);
        field("rdb_bgsave_in_progress", &0);
        field("aof_enabled", &1);
        field("aof_fsync", &a.fsync_policy);
        field("aof_rewrite_in_progress", &u8::from(a.rewrite_in_progress));
        field("aof_rewrites", &a.rewrites);
        field(
            "aof_last_rewrite_time_ms",
            &a.last_rewrite_duration.map_or(-1, |d| d.as_millis() as i64),
        );
        field(
            "aof_last_bgrewrite_status",
            &if a.last_rewrite_ok { "ok" } else { "err" },
        );
        field(
            "aof_last_write_status",
            &if a.write_failed { "err" } else { "ok" },
        );
        field("aof_last_error", &a.last_error.as_deref().unwrap_or(""));
        field("aof_write_errors", &a.write_errors);
        field("aof_current_size", &a.file_size);
        field("aof_base_size", &a.size_at_last_rewrite);
        field("aof_records_written", &a.records_written);
        field("aof_fsyncs", &a.fsyncs);
        field("aof_acks_per_fsync", &format!("{:.2}", a.acks_per_fsync));
        field(
            "aof_last_fsync_unix_ms",
            &a.last_fsync_unix_ms.map_or(-1, |ms| ms as i64),
        );
        field("aof_batches", &a.batches);
        field("aof_loaded_records", &self.replayed.records);
        field("aof_load_time_ms", &self.replayed.elapsed.as_millis());
    }

    fn replication_info(&self, _field: Fields<'_>) {}

    fn metrics(&self, snapshot: &mut MetricsSnapshot) {
        let a = self.aof.stats();
        snapshot.aof_fsync_duration = HistogramData::from_histogram(&a.fsync_seconds);
        snapshot.aof_records_per_fsync = HistogramData::from_histogram(&a.records_per_fsync);
        snapshot.aof_size_bytes = a.file_size;
        snapshot.aof_rewrites = a.rewrites;
        snapshot.aof_write_errors = a.write_errors;
    }

    fn rewrite(&self) -> Result<(), String> {
        self.aof.rewrite().map_err(|e| e.to_string())
    }

    fn membership(&self) -> Option<Box<dyn Membership>> {
        None
    }

    fn reconfigure(&self, old: &Config, next: &Config) {
        if next.appendfsync != old.appendfsync {
            self.aof.set_fsync_policy(next.appendfsync);
        }
        if (
            next.auto_aof_rewrite_min_size,
            next.auto_aof_rewrite_percentage,
        ) != (
            old.auto_aof_rewrite_min_size,
            old.auto_aof_rewrite_percentage,
        ) {
            self.aof.set_auto_rewrite(
                next.auto_aof_rewrite_min_size,
                next.auto_aof_rewrite_percentage,
            );
        }
    }

    fn hand_over(&self, _limit: Duration) -> BoxFuture<'_, bool> {
        Box::pin(async { false })
    }

    fn leader_changed(&self, _known: Option<u64>) -> BoxFuture<'_, Option<u64>> {
        Box::pin(std::future::pending())
    }

    fn refusals(&self) -> Option<watch::Receiver<Option<String>>> {
        None
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        let aof = self.aof.clone();
        Box::pin(async move {
            if let Err(e) = tokio::task::spawn_blocking(move || aof.shutdown()).await {
                tracing::error!("AOF shutdown failed: {e}");
            }
            info!("AOF flushed and synced; bye");
        })
    }
}
