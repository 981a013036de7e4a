//! FLOCK.ACQUIRE name lease-ms [SHARED | LIMIT n] [WAIT ms] [OWNER id] [SESSION]
//! [LOCKDELAY ms]: take a holding of the lock and get its next fencing token; null when it is
//! not admitted (at once, or after WAIT ms in the FIFO queue).

use bytes::Bytes;
use flockd_core::{AcquireResult, CancelResult, Conditions, Mode, Op, OpResult, Wait, WaitId};
use flockd_proto::Reply;

use super::args::Args;
use super::context::{Blocking, BlockingHook};
use super::error::CommandError;
use super::kinds::{CommandDef, OpCommand, unexpected};
use super::meta::{CommandFlags, Meta};

#[derive(Debug)]
pub struct FlockAcquire {
    name: Bytes,
    lease_ms: u64,
    wait_ms: u64,
    owner: Option<Bytes>,
    /// The conditions but the session, which is the connection's (SESSION).
    conditions: Conditions,
    session: bool,
}

/// The op that ends the SESSION holdings of connection `client_id` on `names` when it closes.
pub fn end_session(client_id: u64, names: Vec<Bytes>) -> Op {
    Op::EndSession {
        session: client_id,
        names,
    }
}

/// The conditions with the session of connection `client_id` if the command asked for SESSION.
pub(super) fn with_session(conditions: Conditions, session: bool, client_id: u64) -> Conditions {
    Conditions {
        session: session.then_some(client_id),
        ..conditions
    }
}

/// A queued FLOCK.ACQUIRE: parked by the connection until the grant comes or the wait ends; a
/// wait that ends with no grant is null, like a busy lock.
static WAIT: BlockingHook = BlockingHook {
    queued: |result| match result {
        OpResult::Acquire(AcquireResult::Queued(wait)) => Some(*wait),
        _ => None,
    },
    cancel: |op: &Op, wait: WaitId, release_if_granted| Op::CancelWait {
        name: op.key().cloned().unwrap_or_default(),
        wait,
        release_if_granted,
    },
    cancelled: |result| match result {
        OpResult::CancelWait(CancelResult::AlreadyGranted(token)) => Reply::Integer(token as i64),
        _ => Reply::Null,
    },
    nothing: || Reply::Null,
    granted: |tokens| {
        tokens
            .first()
            .map_or(Reply::Null, |&t| Reply::Integer(t as i64))
    },
};

/// The options FLOCK.ACQUIRE and FLOCK.ACQUIREALL share, each at most once.
#[derive(Default)]
pub(super) struct AcquireOptions {
    pub wait_ms: Option<u64>,
    pub owner: Option<Bytes>,
    pub session: bool,
    pub mode: Option<Mode>,
    pub lock_delay_ms: Option<u64>,
}

impl AcquireOptions {
    /// Reads options to the end of the arguments. `modes`: whether SHARED, LIMIT and LOCKDELAY
    /// are allowed (FLOCK.ACQUIREALL takes only WAIT, OWNER and SESSION).
    pub fn parse(
        args: &mut Args,
        command: &'static str,
        expected: &'static str,
        modes: bool,
    ) -> Result<Self, CommandError> {
        let mut o = AcquireOptions::default();
        while let Some(option) = args.next_keyword() {
            match option.as_str() {
                "WAIT" if o.wait_ms.is_none() => {
                    o.wait_ms = Some(args.next_int("WAIT", 0..=args.limits.max_wait_ms)?)
                }
                "OWNER" if o.owner.is_none() => o.owner = Some(args.next_lock_name("OWNER id")?),
                "SESSION" if !o.session => o.session = true,
                "SHARED" | "LIMIT" if modes && o.mode.is_some() => {
                    return Err(CommandError::SharedWithLimit);
                }
                "SHARED" if modes => o.mode = Some(Mode::Shared),
                "LIMIT" if modes => {
                    let n = args.next_int("LIMIT", 1..=u64::from(u16::MAX))?;
                    o.mode = Some(match n {
                        1 => Mode::Exclusive,
                        n => Mode::Limit(n as u16),
                    });
                }
                "LOCKDELAY" if modes && o.lock_delay_ms.is_none() => {
                    o.lock_delay_ms =
                        Some(args.next_int("LOCKDELAY", 0..=args.limits.max_lease_ms)?)
                }
                "WAIT" | "OWNER" | "SESSION" | "LOCKDELAY" if modes || option != "LOCKDELAY" => {
                    return Err(CommandError::Syntax);
                }
                _ => {
                    return Err(CommandError::UnknownOption {
                        command,
                        option: flockd_proto::printable(option.as_bytes(), 64),
                        expected,
                    });
                }
            }
        }
        Ok(o)
    }

    /// The conditions but the session (see [`with_session`]).
    pub fn conditions(&self) -> Conditions {
        Conditions {
            mode: self.mode.unwrap_or_default(),
            session: None,
            lock_delay_ms: self.lock_delay_ms.unwrap_or(0),
        }
    }
}

impl CommandDef for FlockAcquire {
    const META: Meta = Meta {
        syntax: "FLOCK.ACQUIRE name lease-ms [SHARED | LIMIT n] [WAIT ms] [OWNER id] [SESSION] [LOCKDELAY ms]",
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
        let options = AcquireOptions::parse(
            args,
            "flock.acquire",
            "SHARED, LIMIT n, WAIT ms, OWNER id, SESSION or LOCKDELAY ms",
            true,
        )?;
        Ok(FlockAcquire {
            name,
            lease_ms,
            wait_ms: options.wait_ms.unwrap_or(0),
            conditions: options.conditions(),
            session: options.session,
            owner: options.owner,
        })
    }
}

impl OpCommand for FlockAcquire {
    fn into_op(self, client_id: u64) -> Op {
        Op::Acquire {
            name: self.name,
            lease_ms: self.lease_ms,
            owner: self.owner,
            // The deadline goes into the log too: a waiter whose node dies is dropped there.
            wait: if self.wait_ms > 0 {
                Wait::For {
                    ms: self.wait_ms,
                    node: 0,
                }
            } else {
                Wait::No
            },
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
            true => vec![self.name.clone()],
            false => Vec::new(),
        }
    }

    fn reply(result: OpResult) -> Result<Reply, CommandError> {
        match result {
            OpResult::Acquire(AcquireResult::Granted(token)) => Ok(Reply::Integer(token as i64)),
            OpResult::Acquire(AcquireResult::Busy | AcquireResult::Queued(_)) => Ok(Reply::Null),
            OpResult::Acquire(AcquireResult::CannotUpgrade) => Err(CommandError::CannotUpgrade),
            other => Err(unexpected(&other)),
        }
    }
}
