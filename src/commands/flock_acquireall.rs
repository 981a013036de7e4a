//! FLOCK.ACQUIREALL numnames name [name ...] lease-ms [WAIT ms] [OWNER id] [SESSION]: every
//! name exclusively, all at once or none. The reply is the tokens in the order of the names, or
//! a null array (RESP2 `*-1`, RESP3 `_`). While it waits it holds nothing and is queued on no name, so it cannot deadlock, and a
//! busy name can starve it.

use bytes::Bytes;
use flockd_core::{AcquireAllResult, Op, OpResult, Terms};
use flockd_proto::Reply;

use super::flock_acquire::AcquireOptions;
use super::{Args, CommandDef, CommandError, CommandFlags, Meta, StateCommand, unexpected};

/// The most names one FLOCK.ACQUIREALL takes.
pub const MAX_NAMES: u64 = 64;

#[derive(Debug)]
pub struct FlockAcquireAll {
    names: Vec<Bytes>,
    lease_ms: u64,
    wait_ms: u64,
    owner: Option<Bytes>,
    terms: Terms,
}

/// The names are arguments 2 to 1 + numnames (argument 1 is numnames).
fn name_keys(args: &[Bytes]) -> Vec<usize> {
    let numnames = args
        .get(1)
        .and_then(|n| std::str::from_utf8(n).ok()?.parse::<usize>().ok())
        .unwrap_or(0)
        .min(MAX_NAMES as usize);
    (2..2 + numnames).filter(|&i| i < args.len()).collect()
}

/// The reply to a grant of several names: their tokens, in the order of the names.
pub fn tokens_reply(tokens: &[u64]) -> Reply {
    Reply::Array(tokens.iter().map(|&t| Reply::Integer(t as i64)).collect())
}

impl CommandDef for FlockAcquireAll {
    const META: Meta = Meta {
        syntax: "FLOCK.ACQUIREALL numnames name [name ...] lease-ms [WAIT ms] [OWNER id] [SESSION]",
        more_keys: Some(name_keys),
        group: "flock",
        complexity: "O(N) where N is the number of names",
        ..Meta::new(
            "flock.acquireall",
            -4,
            CommandFlags {
                blocking: true,
                ..CommandFlags::WRITE
            },
            "Acquires several locks at once, all or none, and returns their fencing tokens.",
        )
    };

    fn parse(args: &mut Args) -> Result<Self, CommandError> {
        let numnames = args.next_int("numnames", 1..=MAX_NAMES)?;
        // The names, then the lease.
        if (args.remaining() as u64) < numnames + 1 {
            return Err(CommandError::NumNamesMismatch(numnames));
        }
        let mut names: Vec<Bytes> = Vec::with_capacity(numnames as usize);
        for _ in 0..numnames {
            let name = args.next_lock_name("lock name")?;
            if names.contains(&name) {
                return Err(CommandError::DuplicateName(super::printable(&name, 128)));
            }
            names.push(name);
        }
        let lease_ms = args.next_lease()?;
        let options = AcquireOptions::parse(
            args,
            "flock.acquireall",
            "WAIT ms, OWNER id or SESSION",
            false,
        )?;
        Ok(FlockAcquireAll {
            names,
            lease_ms,
            wait_ms: options.wait_ms.unwrap_or(0),
            terms: options.terms(),
            owner: options.owner,
        })
    }
}

impl StateCommand for FlockAcquireAll {
    fn wait_ms(&self) -> u64 {
        self.wait_ms
    }

    fn into_op(self) -> Op {
        Op::AcquireAll {
            names: self.names,
            lease_ms: self.lease_ms,
            owner: self.owner,
            wait: self.wait_ms > 0,
            terms: self.terms,
        }
    }

    fn reply(result: OpResult) -> Result<Reply, CommandError> {
        match result {
            OpResult::AcquireAll(AcquireAllResult::Granted(tokens)) => Ok(tokens_reply(&tokens)),
            // An array command's null is a null array, as BLPOP's.
            OpResult::AcquireAll(AcquireAllResult::Busy | AcquireAllResult::Queued(_)) => {
                Ok(Reply::NullArray)
            }
            OpResult::AcquireAll(AcquireAllResult::CannotUpgrade) => {
                Err(CommandError::CannotUpgrade)
            }
            other => Err(unexpected(&other)),
        }
    }
}
