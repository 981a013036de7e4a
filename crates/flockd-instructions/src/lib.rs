//! flockd-instructions: the work that the instruction-count benchmarks (`benches/op_path.rs`) measure,
//! and the fixed inputs they measure it on. The benches run it under valgrind (gungraun), and
//! `tests/instruction_guard.sh` fails CI when a count grows by more than 10% against
//! `baseline.toml`.
//!
//! What is covered, and what is not:
//! * [`OpPath::run`]: request bytes -> flockd-proto's parser -> the daemon's own command layer
//!   (`flockd::commands`: the table lookup, the command's argument parsing with the default
//!   configuration's limits, the op it proposes) -> `StateMachine::apply` -> the command's own
//!   reply -> RESP2 bytes. Not measured: the rest of admission (ACL, which the default user
//!   skips; the sentinel, subscribed-mode and removed-node checks; MISCONF), which reads the
//!   running server's shared state; the proposal through the AOF writer or Raft; the
//!   per-command bookkeeping (SLOWLOG, LATENCY, HOT, metrics). A regression there needs the
//!   wall-clock comparison (`perf-guard`).
//! * [`encode_aof_entries`]: flockd-aof's record encoding of log entries (framing, checksum);
//!   not the writer's queueing, its `write` or its sync.
//! * [`encode_raft_payloads`] and [`decode_raft_payloads`]: the Raft log store's codec for an
//!   entry's payload (postcard around the AOF entry record), the same calls as
//!   `log_store`'s `encode_payload` / `decode_entry`, which are private there; not the segments'
//!   framing, the peer messages or openraft itself.
//! * [`expire_due`]: the expiry task's loop body (`src/server/expiry.rs`): take the due leases
//!   from the core's deadline index, apply them as `Op::Expire` batches; not the task's timer
//!   or the proposal through the log.

use bytes::{Bytes, BytesMut};
use flockd::commands::{self, ArgLimits, Command};
use flockd_aof::record::{RecordTooLarge, encode_entry};
use flockd_core::{Conditions, Millis, Op, OpResult, StateMachine, Wait};
use flockd_proto::{Limits, ProtocolError, ProtocolVersion, Reply, Request, RequestParser, encode};
use flockd_raft::types::{EntryPayload, Origin, RaftProposal};

/// The connection the guarded commands come from (it owns their holdings).
pub const CLIENT_ID: u64 = 1;
/// The lease every guarded acquire asks for, in ms.
pub const LEASE_MS: u64 = 30_000;
/// The log time the guarded ops are stamped with.
pub const START: Millis = Millis(1_000);
/// Leases expired by one op at most: the expiry task's batch (`src/server/expiry.rs`, `BATCH`).
pub const EXPIRY_BATCH: usize = 4096;

/// Why the guarded path stopped.
#[derive(Debug, thiserror::Error)]
pub enum GuardError {
    #[error("protocol error: {0}")]
    Protocol(#[from] ProtocolError),
    #[error("AOF record: {0}")]
    Record(#[from] RecordTooLarge),
    #[error("Raft payload codec: {0}")]
    Postcard(#[from] postcard::Error),
}

/// The fixed batch of requests for [`OpPath::run`], as a client would pipeline it: for each of
/// `names` locks, an acquire (granted), a second acquire (busy: null), a fenced write under the
/// lock, a renewal and a release. Every name is fresh, so every token is 1.
pub fn op_path_requests(names: usize) -> BytesMut {
    let mut out = BytesMut::new();
    for i in 0..names {
        let name = format!("lock:{i:05}");
        let owner = format!("worker:{i:05}");
        let key = format!("fence:{i:05}");
        let value = format!("value-{i:05}");
        let lease = LEASE_MS.to_string();
        let requests: [&[&str]; 5] = [
            &["FLOCK.ACQUIRE", &name, &lease, "OWNER", &owner],
            &["FLOCK.ACQUIRE", &name, &lease],
            &["FENCE.SET", &key, "1", &value, "LOCK", &name],
            &["FLOCK.RENEW", &name, "1", &lease],
            &["FLOCK.RELEASE", &name, "1"],
        ];
        for args in requests {
            out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
            for arg in args {
                out.extend_from_slice(format!("${}\r\n{arg}\r\n", arg.len()).as_bytes());
            }
        }
    }
    out
}

/// One connection's in-process path, with its own state machine: what [`OpPath::run`] needs
/// and keeps between requests.
pub struct OpPath {
    parser: RequestParser,
    limits: Limits,
    arg_limits: ArgLimits,
    pub machine: StateMachine,
    position: u64,
    /// The RESP2 replies written so far, as the connection would send them.
    pub out: BytesMut,
}

impl Default for OpPath {
    fn default() -> Self {
        Self::new()
    }
}

impl OpPath {
    pub fn new() -> Self {
        OpPath {
            parser: RequestParser::new(),
            limits: Limits::default(),
            arg_limits: ArgLimits::of(&flockd::config::Config::default()),
            machine: StateMachine::new(),
            position: 0,
            out: BytesMut::with_capacity(64 * 1024),
        }
    }

    /// Parses every complete request in `input`, applies each as one log entry at [`START`],
    /// and appends its RESP2 reply to `self.out`. Returns how many requests it served.
    pub fn run(&mut self, input: &mut BytesMut) -> Result<usize, GuardError> {
        let mut served = 0;
        while let Some(request) = self.parser.parse(input, &self.limits)? {
            let reply = match proposal_of(request, self.arg_limits) {
                Ok(proposal) => {
                    self.position += 1;
                    let applied = self.machine.apply(self.position, START, &proposal.op);
                    (proposal.reply)(applied.result).unwrap_or_else(|e| Reply::error(e.to_string()))
                }
                Err(reply) => reply,
            };
            encode(&reply, ProtocolVersion::Resp2, &mut self.out);
            served += 1;
        }
        Ok(served)
    }
}

/// The daemon's own steps from a request to what a state command proposes: the table lookup,
/// the command's parse, its op and reply. `Err`: the reply the daemon gives instead.
pub fn proposal_of(
    request: Request,
    limits: ArgLimits,
) -> Result<commands::context::Proposal, Reply> {
    let Some(index) = commands::lookup(&request.args[0]) else {
        return Err(commands::unknown_command(&request.args));
    };
    let command =
        commands::parse(index, &request.args, limits).map_err(|e| Reply::error(e.to_string()))?;
    command
        .into_proposal(CLIENT_ID)
        .map_err(|other: Command| Reply::error(format!("ERR {other:?} proposes nothing")))
}

/// The ops of the guarded batch, as the daemon would propose them for [`op_path_requests`]
/// (the busy acquire included: it is proposed and logged too).
pub fn batch_ops(names: usize) -> Vec<Op> {
    let mut parser = RequestParser::new();
    let mut input = op_path_requests(names);
    let mut ops = Vec::with_capacity(names * 5);
    let limits = ArgLimits::of(&flockd::config::Config::default());
    while let Ok(Some(request)) = parser.parse(&mut input, &Limits::default()) {
        if let Ok(proposal) = proposal_of(request, limits) {
            ops.push(proposal.op);
        }
    }
    ops
}

/// One log entry as the AOF writer gets it: position, time, the proposal's ops.
pub type AofEntry = (u64, Millis, Vec<Op>);

/// One entry per op of [`batch_ops`], one op each (what a pipelined client's commands become).
pub fn aof_entries(names: usize) -> Vec<AofEntry> {
    batch_ops(names)
        .into_iter()
        .enumerate()
        .map(|(i, op)| (i as u64 + 1, START, vec![op]))
        .collect()
}

/// Appends every entry's framed record to `out`, as the AOF writer does for a batch.
pub fn encode_aof_entries(entries: &[AofEntry], out: &mut Vec<u8>) -> Result<(), GuardError> {
    for (position, at, ops) in entries {
        encode_entry(*position, *at, ops, out)?;
    }
    Ok(())
}

/// One Raft entry payload per op of [`batch_ops`], proposed by node 1.
pub fn raft_payloads(names: usize) -> Vec<EntryPayload> {
    batch_ops(names)
        .into_iter()
        .enumerate()
        .map(|(i, op)| {
            EntryPayload::Normal(RaftProposal {
                origin: Origin {
                    node: 1,
                    incarnation: 7,
                    seq: i as u64 + 1,
                    floor: i as u64,
                },
                at: START,
                ops: vec![op],
            })
        })
        .collect()
}

/// Each payload in the log store's bytes (`log_store::encode_payload`: postcard).
pub fn encode_raft_payloads(payloads: &[EntryPayload]) -> Result<Vec<Vec<u8>>, GuardError> {
    payloads
        .iter()
        .map(|p| postcard::to_allocvec(p).map_err(GuardError::from))
        .collect()
}

/// The payloads back from the log store's bytes (`log_store::decode_entry`: postcard).
pub fn decode_raft_payloads(encoded: &[Vec<u8>]) -> Result<Vec<EntryPayload>, GuardError> {
    encoded
        .iter()
        .map(|bytes| postcard::from_bytes(bytes).map_err(GuardError::from))
        .collect()
}

/// A state machine holding `leases` leases of `lease_ms`, all granted at [`START`].
pub fn granted_machine(leases: usize, lease_ms: u64) -> StateMachine {
    let mut machine = StateMachine::new();
    for i in 0..leases {
        let op = Op::Acquire {
            name: Bytes::from(format!("lease:{i:06}")),
            lease_ms,
            owner: None,
            wait: Wait::No,
            conditions: Conditions::default(),
        };
        machine.apply(i as u64 + 1, START, &op);
    }
    machine
}

/// What the expiry task does at `now` until nothing is due: take at most [`EXPIRY_BATCH`] due
/// leases from the deadline index and apply them as one `Op::Expire`. Returns how many expired.
pub fn expire_due(machine: &mut StateMachine, now: Millis) -> usize {
    let mut expired = 0;
    loop {
        let due = machine.due_leases(now, EXPIRY_BATCH);
        if due.is_empty() {
            return expired;
        }
        let position = machine.position() + 1;
        if let OpResult::Expire(n) = machine
            .apply(position, now, &Op::Expire { leases: due })
            .result
        {
            expired += n;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flockd_aof::Version;
    use flockd_aof::record::{Payload, Record, decode_record};

    /// The batch measures the intended path: every request is served and answered as the
    /// daemon answers it (a grant, a busy null, a stored write, a renewal, a release).
    #[test]
    fn the_op_path_batch_gets_the_daemons_replies() {
        let mut path = OpPath::new();
        let mut input = op_path_requests(3);
        assert_eq!(path.run(&mut input).unwrap(), 15);
        assert!(input.is_empty());
        let expected = ":1\r\n$-1\r\n:1\r\n:1\r\n:1\r\n".repeat(3);
        assert_eq!(&path.out[..], expected.as_bytes());
    }

    #[test]
    fn the_daemons_own_commands_refuse_with_its_own_errors() {
        let request = |args: &[&str]| Request {
            args: args.iter().map(|a| Bytes::from(a.to_string())).collect(),
        };
        let limits = ArgLimits::of(&flockd::config::Config::default());
        let refusal = |args: &[&str]| match proposal_of(request(args), limits) {
            Err(Reply::Error(text)) => text.to_string(),
            Err(other) => panic!("{args:?}: {other:?}"),
            Ok(proposal) => panic!("{args:?} proposed {:?}", proposal.op),
        };
        assert_eq!(
            refusal(&["FLOCK.RELEASE", "x"]),
            "ERR wrong number of arguments for 'flock.release' command"
        );
        assert!(refusal(&["FLOCK.RENEW", "x", "-1", "5"]).starts_with("ERR "));
        assert_eq!(
            refusal(&["FLOCK.ACQUIRE", "x", "5", "OWNER"]),
            "ERR syntax error"
        );
        assert!(refusal(&["NOPE"]).starts_with("ERR unknown command"));
    }

    #[test]
    fn aof_records_decode_to_the_batch() {
        let entries = aof_entries(2);
        let mut out = Vec::new();
        encode_aof_entries(&entries, &mut out).unwrap();
        let mut rest = &out[..];
        for (position, at, ops) in &entries {
            let (payload, used) = decode_record(Version::V2, rest).unwrap();
            let expected = Record::Entry {
                position: *position,
                at: *at,
                ops: ops.clone(),
            };
            assert_eq!(payload, Payload::V2(expected));
            rest = &rest[used..];
        }
        assert!(rest.is_empty());
    }

    #[test]
    fn raft_payloads_round_trip() {
        let payloads = raft_payloads(2);
        let encoded = encode_raft_payloads(&payloads).unwrap();
        assert_eq!(decode_raft_payloads(&encoded).unwrap(), payloads);
    }

    #[test]
    fn every_lease_expires_at_its_deadline_and_not_before() {
        let mut machine = granted_machine(5000, 100);
        assert_eq!(expire_due(&mut machine, START.plus(99)), 0);
        assert_eq!(expire_due(&mut machine, START.plus(100)), 5000);
        assert!(!machine.has_holdings_or_waiters());
    }
}
