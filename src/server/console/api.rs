//! The console's JSON: this node and the cluster with the charts' samples (`overview`), the
//! hottest locks (`hot`, FLOCK.HOT's counts) and the held locks by name prefix (`locks`, a
//! FLOCK.SCAN HELD walk with FLOCK.HOLDERS for each name), all filtered by the user's key
//! patterns. Tokens are strings: a token goes up to 2^63-1, past what a JavaScript number
//! holds exactly.

use std::time::Instant;

use bytes::Bytes;
use flockd_acl::User;
use flockd_core::{OpResult, Read, ScanFilter};
use serde_json::{Value, json};

use super::error::ConsoleError;
use super::history::{self, History};
use super::query;
use crate::server::shared::Shared;
use crate::services::applied::Totals;

/// Names one search looks at, at most, while it holds the lock table for reading: a search
/// over a big table goes on from its cursor in the next request.
pub const SEARCH_BUDGET: usize = 2048;
/// Names the walk looks at per step.
const SEARCH_STEP: usize = 128;
/// FLOCK.HOT entries looked at before the user's key patterns filter them.
const HOT_CANDIDATES: usize = 1000;

/// A name as the page shows it (lossy UTF-8) and as it sends it back (percent-encoded bytes).
fn name_fields(name: &[u8]) -> (String, String) {
    (
        String::from_utf8_lossy(name).into_owned(),
        query::encode(name),
    )
}

pub fn overview(shared: &Shared, history: &History) -> Value {
    let config = shared.config.load();
    let locks = Totals::of(shared.groups.iter().map(|g| &*g.applied)).locks;
    let node = json!({
        "version": env!("CARGO_PKG_VERSION"),
        "address": shared.local_addr.to_string(),
        "uptime_s": shared.started.elapsed().as_secs(),
        "connected_clients": shared.clients.connected(),
        "blocked_clients": shared.clients.blocked(),
        "lock_names": locks.names,
        "locks_held": locks.locks_held,
        "waiters": locks.waiters,
        "events": config.notify_flock_events,
    });
    let view = shared.log.view();
    let single = view.node_id.is_none();
    let members: Vec<Value> = view
        .members
        .iter()
        .map(|m| {
            // What a member lags by is known on the leader (what each acknowledged) and,
            // elsewhere, for this node only (its applied index).
            let lag = match m.index {
                Some(index) if view.role.leads() || m.is_me => {
                    Some(view.commit_index.saturating_sub(index))
                }
                _ => None,
            };
            json!({
                "id": m.id,
                "address": m.addr,
                "role": m.role,
                "index": m.index,
                "lag": lag,
                "up": m.up,
            })
        })
        .collect();
    // A multi-group node's groups: each one's slots, leader, term, indexes and lag here.
    let groups: Vec<Value> = shared
        .log
        .shards()
        .filter(|shards| shards.len() > 1)
        .unwrap_or_default()
        .iter()
        .zip(1..)
        .map(|(shard, number): (&crate::log::Shard, u16)| {
            let v = &shard.view;
            json!({
                "group": number,
                "slots": format!("{}-{}", shard.slots.start(), shard.slots.end()),
                "leader": v.leader_id,
                "role": v.role.as_str(),
                "term": v.term,
                "commit_index": v.commit_index,
                "applied_index": v.applied_index,
                "lag": v.commit_index.saturating_sub(v.applied_index),
            })
        })
        .collect();
    let cluster = json!({
        "mode": if single { "single" } else { "cluster" },
        "groups": groups,
        "node_id": view.node_id,
        "role": view.role.as_str(),
        "leader": view.leader_id,
        "term": (!single).then_some(view.term),
        "commit_index": view.commit_index,
        "applied_index": view.applied_index,
        "members": members,
        // Why this node serves nothing, once it was taken out of the cluster.
        "removed": view.removed,
    });
    let samples = history.samples();
    json!({
        "node": node,
        "cluster": cluster,
        "history": {
            "interval_s": history::INTERVAL.as_secs(),
            "at_ms": samples.iter().map(|s| s.at_ms).collect::<Vec<_>>(),
            "ops_per_s": samples.iter().map(|s| (s.ops_per_s * 10.0).round() / 10.0).collect::<Vec<_>>(),
            "p99_ms": samples.iter().map(|s| s.p99_ms).collect::<Vec<_>>(),
        },
    })
}

pub fn hot(shared: &Shared, user: &User, count: u64) -> Value {
    let lines: Vec<Value> = shared
        .applied
        .hot
        .top(HOT_CANDIDATES, Instant::now())
        .into_iter()
        .filter(|hot| user.can_access_key(&hot.name))
        .take(count as usize)
        .map(|hot| {
            let (name, name_query) = name_fields(&hot.name);
            let c = hot.counts;
            json!({
                "name": name,
                "name_query": name_query,
                "waits": c.waits,
                "wait_ms": c.wait_ms,
                "expiries": c.expiries,
                "busy": c.busy,
            })
        })
        .collect();
    json!({ "window_s": 60, "locks": lines })
}

/// Where a search goes on: a FLOCK.SCAN cursor, and how many matching names of that cursor's
/// first step the last page returned already (a page can end inside a step). Written `C` or
/// `C.S`; `0` starts (and ends) a walk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SearchCursor {
    pub scan: u64,
    pub skip: usize,
}

impl SearchCursor {
    pub fn parse(text: &str) -> Result<SearchCursor, ConsoleError> {
        if text.is_empty() {
            return Ok(SearchCursor::default());
        }
        let bad = || ConsoleError::BadRequest("cursor: as the last page returned it".into());
        let (scan, skip) = text.split_once('.').unwrap_or((text, "0"));
        Ok(SearchCursor {
            scan: scan.parse().map_err(|_| bad())?,
            skip: skip.parse().map_err(|_| bad())?,
        })
    }

    fn text(self) -> String {
        match self.skip {
            0 => self.scan.to_string(),
            skip => format!("{}.{skip}", self.scan),
        }
    }
}

pub fn locks(
    shared: &Shared,
    user: &User,
    prefix: &[u8],
    from: SearchCursor,
    limit: usize,
) -> Value {
    let mut found: Vec<Value> = Vec::new();
    let mut cursor = from.scan;
    let mut skip = from.skip;
    let mut looked = 0;
    let next = loop {
        // Every group's names, one group after another (one, but on a multi-group node).
        let (next, names) =
            crate::log::groups::walk_groups(&shared.groups, cursor, |m, at, now| {
                m.scan(at, SEARCH_STEP, ScanFilter::HeldAt(now))
            });
        looked += SEARCH_STEP;
        let mut matched = 0;
        let mut full = false;
        for name in names {
            if !name.starts_with(prefix) || !user.can_access_key(&name) {
                continue;
            }
            matched += 1;
            if matched <= skip {
                continue;
            }
            if found.len() == limit {
                full = true;
                break;
            }
            let group = shared.group_of(&name);
            let now = group.log.now();
            found.push(describe(&group.applied.read(), name, now));
        }
        if full {
            break SearchCursor {
                scan: cursor,
                skip: matched - 1,
            };
        }
        skip = 0;
        if next == 0 {
            break SearchCursor::default();
        }
        cursor = next;
        if looked >= SEARCH_BUDGET {
            break SearchCursor {
                scan: cursor,
                skip: 0,
            };
        }
    };
    json!({
        "cursor": next.text(),
        "looked_at": looked,
        "limit": limit,
        "locks": found,
    })
}

fn describe(machine: &flockd_core::StateMachine, name: Bytes, now: flockd_core::Millis) -> Value {
    let status = machine.status(&name, now);
    let holdings: Vec<Value> = match machine.read(&Read::Holders { name: name.clone() }, now) {
        OpResult::Holders(holders) => holders
            .into_iter()
            .map(|h| {
                json!({
                    "token": h.token.to_string(),
                    "owner": h.owner.as_ref().map(|o| String::from_utf8_lossy(o).into_owned()),
                    "ttl_ms": h.ttl_ms,
                    "holds": h.holds,
                    "mode": h.mode.label(),
                    "limit": h.mode.reported_limit(),
                    "session": h.session,
                })
            })
            .collect(),
        _ => Vec::new(),
    };
    let (display, name_query) = name_fields(&name);
    json!({
        "name": display,
        "name_query": name_query,
        "waiters": status.waiters,
        "last_token": status.last_token.to_string(),
        "holdings": holdings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn search_cursors_read_back() {
        for text in ["0", "17", "17.3"] {
            assert_eq!(SearchCursor::parse(text).unwrap().text(), text);
        }
        assert_eq!(SearchCursor::parse("").unwrap(), SearchCursor::default());
        assert!(SearchCursor::parse("x").is_err());
        assert!(SearchCursor::parse("1.y").is_err());
    }
}
