//! SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]: Redis's SCAN over flockd's keys, the
//! lock names and then the fence keys, for `redis-cli --scan` and the GUI tools that browse
//! with it. Replies `[next-cursor, [key ...]]`; cursor 0 starts and ends a walk, and a key
//! present for the whole walk comes back once (see `flockd_core::keyspace`). COUNT is how many keys
//! a call looks at (10 by default, at most FLOCK.SCAN's maximum); MATCH and TYPE filter those.
//! As in Redis, key permissions do not filter the keys listed.

use bytes::Bytes;
use flockd_core::KeyType;
use flockd_proto::{Reply, parse_int};

use super::args::Args;
use super::context::{CommandResult, Ctx, reply};
use super::error::CommandError;
use super::flock_scan::MAX_COUNT;
use super::kinds::{CommandDef, LocalCommand};
use super::meta::{CommandFlags, Meta};

/// Which keys SCAN's TYPE option keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TypeFilter {
    Any,
    Only(KeyType),
    /// A type no flockd key has (`string`, `hash`): nothing matches. Redis 7.2 answers such a
    /// name with an empty walk, not an error, and so does flockd.
    NoKey,
}

#[derive(Debug)]
pub struct Scan {
    cursor: u64,
    pattern: Option<Bytes>,
    count: usize,
    only: TypeFilter,
}

impl CommandDef for Scan {
    const META: Meta = Meta {
        syntax: "SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]",
        group: "generic",
        complexity: "O(COUNT) per call, O(N) for a full walk",
        ..Meta::new(
            "scan",
            -2,
            // A call may look at many keys: @slow, as Redis's SCAN.
            CommandFlags {
                fast: false,
                ..CommandFlags::READ
            },
            "Walks the lock names and fence keys a few per call.",
        )
    };

    fn parse(args: &mut Args) -> Result<Self, CommandError> {
        let cursor = args.next_cursor()?;
        let mut scan = Scan {
            cursor,
            pattern: None,
            count: 10,
            only: TypeFilter::Any,
        };
        // Options may repeat; the last one counts, as in Redis.
        while let Some(option) = args.next_keyword() {
            match option.as_str() {
                "MATCH" if args.remaining() > 0 => scan.pattern = Some(args.next_owned_bytes()?),
                "COUNT" if args.remaining() > 0 => scan.count = parse_count(&args.next_bytes()?)?,
                "TYPE" if args.remaining() > 0 => {
                    scan.only = KeyType::from_name(&args.next_bytes()?)
                        .map_or(TypeFilter::NoKey, TypeFilter::Only)
                }
                _ => return Err(CommandError::Syntax),
            }
        }
        Ok(scan)
    }
}

/// Redis's COUNT: an integer (else its integer error), at least 1 (else `-ERR syntax error`), and
/// a hint: a larger one than a call may look at is capped, not refused.
fn parse_count(raw: &[u8]) -> Result<usize, CommandError> {
    let count = parse_int(raw).ok_or(CommandError::NotInteger)?;
    if count < 1 {
        return Err(CommandError::Syntax);
    }
    Ok(count.unsigned_abs().min(MAX_COUNT) as usize)
}

impl LocalCommand for Scan {
    fn run(self, ctx: &mut Ctx<'_>) -> CommandResult {
        let (cursor, count) = (self.cursor, self.count);
        let (next, mut keys) = match self.only {
            TypeFilter::NoKey => (0, Vec::new()),
            TypeFilter::Any => {
                crate::log::groups::walk_groups(ctx.server.groups(), cursor, |machine, at, _| {
                    machine.scan_keys(at, count, None)
                })
            }
            TypeFilter::Only(kind) => {
                crate::log::groups::walk_groups(ctx.server.groups(), cursor, |machine, at, _| {
                    machine.scan_keys(at, count, Some(kind))
                })
            }
        };
        if let Some(pattern) = &self.pattern {
            keys.retain(|key| flockd_acl::glob_match(pattern, key));
        }
        reply(Reply::Array(vec![
            Reply::Bulk(Bytes::from(next.to_string())),
            Reply::Array(keys.into_iter().map(Reply::Bulk).collect()),
        ]))
    }
}
