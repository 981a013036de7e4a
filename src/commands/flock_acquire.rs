//! FLOCK.ACQUIRE name lease-ms [WAIT ms] [OWNER id]: take the lock and get its next fencing
//! token; null when it is held (at once, or after WAIT ms in the FIFO queue).

use bytes::Bytes;
use flockd_core::{AcquireResult, Op, OpResult};
use flockd_proto::Reply;

use super::{Args, CommandDef, CommandError, CommandFlags, Meta, StateCommand, unexpected};

#[derive(Debug)]
pub struct FlockAcquire {
    name: Bytes,
    lease_ms: u64,
    wait_ms: u64,
    owner: Option<Bytes>,
}

impl CommandDef for FlockAcquire {
    const META: Meta = Meta {
        syntax: "FLOCK.ACQUIRE name lease-ms [WAIT ms] [OWNER id]",
        keys: (1, 1, 1),
        group: "flock",
        complexity: "O(1)",
        ..Meta::new(
            "flock.acquire",
            -3,
            CommandFlags {
                blocking: true,
                ..CommandFlags::WRITE
            },
            "Acquires a lock with a lease and returns its fencing token, or null if it is held.",
        )
    };

    fn parse(args: &mut Args) -> Result<Self, CommandError> {
        let name = args.next_lock_name("lock name")?;
        let lease_ms = args.next_lease()?;
        let (mut wait_ms, mut owner) = (None, None);
        while let Some(option) = args.next_keyword() {
            match option.as_str() {
                "WAIT" if wait_ms.is_none() => {
                    wait_ms = Some(args.next_int("WAIT", 0..=args.limits.max_wait_ms)?)
                }
                "OWNER" if owner.is_none() => owner = Some(args.next_lock_name("OWNER id")?),
                "WAIT" | "OWNER" => return Err(CommandError::Syntax),
                _ => {
                    return Err(CommandError::UnknownOption {
                        command: "flock.acquire",
                        option: super::printable(option.as_bytes(), 64),
                        expected: "WAIT ms or OWNER id",
                    });
                }
            }
        }
        Ok(FlockAcquire {
            name,
            lease_ms,
            wait_ms: wait_ms.unwrap_or(0),
            owner,
        })
    }
}

impl StateCommand for FlockAcquire {
    fn wait_ms(&self) -> u64 {
        self.wait_ms
    }

    fn into_op(self) -> Op {
        Op::Acquire {
            name: self.name,
            lease_ms: self.lease_ms,
            owner: self.owner,
            wait: self.wait_ms > 0,
        }
    }

    /// A queued acquire is parked by the connection until the grant comes or the wait ends; a
    /// wait that ended with no grant is null, like a busy lock.
    fn reply(result: OpResult) -> Result<Reply, CommandError> {
        match result {
            OpResult::Acquire(AcquireResult::Granted(token)) => Ok(Reply::Integer(token as i64)),
            OpResult::Acquire(AcquireResult::Busy | AcquireResult::Queued(_)) => Ok(Reply::Null),
            other => Err(unexpected(&other)),
        }
    }
}
