//! FLOCK.SCAN cursor [MATCH pattern] [COUNT count] [HELD]: the lock names, a few per call, as
//! Redis's SCAN walks keys: `[next-cursor, [name ...]]`, cursor 0 starts and ends a walk, and
//! every name present for the whole walk is returned (see the core's `table::scan`). COUNT is
//! how many names a call looks at (10 by default); MATCH and HELD filter those, so a call may
//! return fewer, or none, before the walk is over. As in Redis, key permissions do not filter
//! the names listed.

use bytes::Bytes;
use flockd_core::ScanFilter;
use flockd_proto::Reply;

use super::args::Args;
use super::context::{CommandResult, Ctx, reply};
use super::error::CommandError;
use super::kinds::{CommandDef, LocalCommand};
use super::meta::{CommandFlags, Meta};

/// The most names one call looks at: a call holds the state's read lock while it looks.
pub(super) const MAX_COUNT: u64 = 100_000;

#[derive(Debug)]
pub struct FlockScan {
    cursor: u64,
    pattern: Option<Bytes>,
    count: usize,
    held: bool,
}

impl CommandDef for FlockScan {
    const META: Meta = Meta {
        syntax: "FLOCK.SCAN cursor [MATCH pattern] [COUNT count] [HELD]",
        group: "flock",
        complexity: "O(COUNT) per call, O(N) for a full walk",
        ..Meta::new(
            "flock.scan",
            -2,
            CommandFlags::READ,
            "Walks the lock names a few per call, as SCAN walks keys.",
        )
    };

    fn parse(args: &mut Args) -> Result<Self, CommandError> {
        let cursor = args.next_cursor()?;
        let mut scan = FlockScan {
            cursor,
            pattern: None,
            count: 10,
            held: false,
        };
        // Options may repeat; the last one counts, as in Redis.
        while let Some(option) = args.next_keyword() {
            match option.as_str() {
                "MATCH" if args.remaining() > 0 => scan.pattern = Some(args.next_owned_bytes()?),
                "COUNT" if args.remaining() > 0 => {
                    scan.count = args.next_int("COUNT", 1..=MAX_COUNT)? as usize
                }
                "HELD" => scan.held = true,
                _ => return Err(CommandError::Syntax),
            }
        }
        Ok(scan)
    }
}

impl LocalCommand for FlockScan {
    fn run(self, ctx: &mut Ctx<'_>) -> CommandResult {
        let held = self.held;
        let count = self.count;
        let (next, mut names) =
            crate::log::groups::walk_groups(ctx.server.groups(), self.cursor, |m, at, now| {
                let filter = if held {
                    ScanFilter::HeldAt(now)
                } else {
                    ScanFilter::All
                };
                m.scan(at, count, filter)
            });
        if let Some(pattern) = &self.pattern {
            names.retain(|name| flockd_acl::glob_match(pattern, name));
        }
        reply(Reply::Array(vec![
            Reply::Bulk(Bytes::from(next.to_string())),
            Reply::Array(names.into_iter().map(Reply::Bulk).collect()),
        ]))
    }
}
