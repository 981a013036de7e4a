//! FLOCK.ACQUIREALL numnames name [name ...] lease-ms [WAIT ms] [OWNER id] [SESSION]: every
//! name exclusively, all at once or none. The reply is the tokens in the order of the names, or
//! a null array (RESP2 `*-1`, RESP3 `_`). While it waits it holds nothing and is queued on no name, so it cannot deadlock, and a
//! busy name can starve it.

use bytes::Bytes;
use flockd_core::{AcquireAllResult, CancelAllResult, Conditions, Op, OpResult, WaitId};
use flockd_proto::Reply;

use super::args::Args;
use super::context::{Blocking, BlockingHook};
use super::error::CommandError;
use super::flock_acquire::{AcquireOptions, with_session};
use super::kinds::{CommandDef, OpCommand, unexpected};
use super::meta::{CommandFlags, Meta};

/// The most names one FLOCK.ACQUIREALL takes.
pub const MAX_NAMES: u64 = 64;

#[derive(Debug)]
pub struct FlockAcquireAll {
    names: Vec<Bytes>,
    lease_ms: u64,
    wait_ms: u64,
    owner: Option<Bytes>,
    /// The conditions but the session, which is the connection's (SESSION).
    conditions: Conditions,
    session: bool,
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
fn tokens_reply(tokens: &[u64]) -> Reply {
    Reply::Array(tokens.iter().map(|&t| Reply::Integer(t as i64)).collect())
}

/// A queued FLOCK.ACQUIREALL: parked by the connection until every name is granted or the
/// wait ends; a wait that ends with no grant is a null array.
static WAIT: BlockingHook = BlockingHook {
    queued: |result| match result {
        OpResult::AcquireAll(AcquireAllResult::Queued(wait)) => Some(*wait),
        _ => None,
    },
    cancel: |op: &Op, wait: WaitId, release_if_granted| Op::CancelWaitAll {
        names: match op {
            Op::AcquireAll { names, .. } => names.clone(),
            _ => Vec::new(),
        },
        wait,
        release_if_granted,
    },
    cancelled: |result| match result {
        OpResult::CancelWaitAll(CancelAllResult::AlreadyGranted(tokens)) => tokens_reply(&tokens),
        _ => Reply::NullArray,
    },
    nothing: || Reply::NullArray,
    granted: tokens_reply,
};

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
                return Err(CommandError::DuplicateName(flockd_proto::printable(
                    &name, 128,
                )));
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
            conditions: options.conditions(),
            session: options.session,
            owner: options.owner,
        })
    }
}

impl OpCommand for FlockAcquireAll {
    fn into_op(self, client_id: u64) -> Op {
        Op::AcquireAll {
            names: self.names,
            lease_ms: self.lease_ms,
            owner: self.owner,
            wait: self.wait_ms > 0,
            conditions: with_session(self.conditions, self.session, client_id),
        }
    }

    fn into_transaction_op(mut self, client_id: u64) -> Op {
        self.wait_ms = 0;
        self.into_op(client_id)
    }

    fn blocking(&self) -> Option<Blocking> {
        Blocking::for_wait(self.wait_ms, &WAIT)
    }

    fn session_names(&self) -> Vec<Bytes> {
        match self.session {
            true => self.names.clone(),
            false => Vec::new(),
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
