//! FLOCK.HOT [COUNT n]: the most contended lock names of the last minute (see
//! `services::hot`), most waits first: for each, `name`, `waits`, `wait-ms`, `expiries`, `busy`,
//! as a map (RESP3) or a flat field/value array (RESP2).

use std::time::Instant;

use flockd_proto::Reply;

use super::args::Args;
use super::context::{CommandResult, Ctx, reply};
use super::error::CommandError;
use super::kinds::{CommandDef, LocalCommand};
use super::meta::{CommandFlags, Meta};

/// Names a reply may list at most.
const MAX_COUNT: u64 = 10_000;

#[derive(Debug)]
pub struct FlockHot {
    count: usize,
}

impl CommandDef for FlockHot {
    const META: Meta = Meta {
        syntax: "FLOCK.HOT [COUNT count]",
        group: "flock",
        ..Meta::new(
            "flock.hot",
            -1,
            CommandFlags::READ,
            "Lists the most contended lock names of the last minute.",
        )
    };

    fn parse(args: &mut Args) -> Result<Self, CommandError> {
        let mut count = None;
        while let Some(option) = args.next_keyword() {
            match option.as_str() {
                // A missing count is a syntax error, as in Redis (`SET k v EX`).
                "COUNT" if count.is_none() && args.remaining() > 0 => {
                    count = Some(args.next_int("COUNT", 1..=MAX_COUNT)?)
                }
                _ => return Err(CommandError::Syntax),
            }
        }
        Ok(FlockHot {
            count: count.unwrap_or(10) as usize,
        })
    }
}

impl LocalCommand for FlockHot {
    fn run(self, ctx: &mut Ctx<'_>) -> CommandResult {
        let lines = ctx.server.applied().hot.top(self.count, Instant::now());
        let field = |name: &'static str, value: Reply| (Reply::bulk(name), value);
        reply(Reply::Array(
            lines
                .into_iter()
                .map(|hot| {
                    let c = hot.counts;
                    Reply::Map(vec![
                        field("name", Reply::Bulk(hot.name)),
                        field("waits", Reply::Integer(c.waits as i64)),
                        field("wait-ms", Reply::Integer(c.wait_ms as i64)),
                        field("expiries", Reply::Integer(c.expiries as i64)),
                        field("busy", Reply::Integer(c.busy as i64)),
                    ])
                })
                .collect(),
        ))
    }
}
