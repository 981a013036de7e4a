//! FENCE.SET key token value [LOCK name]: store `value` if `token` is at least the highest the
//! key accepted (1), else change nothing (0). The guard people write in Lua for Redis, built in.
//! With `LOCK name` the token must also belong to a live holding of that lock, so a stale holder
//! is refused even before a newer one has written.

use bytes::Bytes;
use flockd_proto::Reply;

use super::args::Args;
use super::error::CommandError;
use super::kinds::{CommandDef, OpCommand, unexpected};
use super::meta::{CommandFlags, Meta};
use flockd_core::{Op, OpResult};

#[derive(Debug)]
pub struct FenceSet {
    key: Bytes,
    token: u64,
    value: Bytes,
    lock: Option<Bytes>,
}

/// `FENCE.SET key token value LOCK name`: the lock name is a key too.
fn lock_key(args: &[Bytes]) -> Vec<usize> {
    match args.get(4) {
        Some(word) if word.eq_ignore_ascii_case(b"LOCK") => vec![5],
        _ => Vec::new(),
    }
}

impl CommandDef for FenceSet {
    const META: Meta = Meta {
        syntax: "FENCE.SET key token value [LOCK name]",
        keys: (1, 1, 1),
        more_keys: Some(lock_key),
        group: "fence",
        ..Meta::new(
            "fence.set",
            -4,
            CommandFlags::WRITE,
            "Stores the value if the token is not lower than any the key accepted.",
        )
    };

    fn parse(args: &mut Args) -> Result<Self, CommandError> {
        let key = args.next_lock_name("fence key")?;
        let token = args.next_token()?;
        let value = args.next_owned_bytes()?;
        let lock = match args.next_keyword().as_deref() {
            None => None,
            Some("LOCK") => Some(args.next_lock_name("lock name")?),
            Some(option) => {
                return Err(CommandError::UnknownOption {
                    command: "fence.set",
                    option: flockd_proto::printable(option.as_bytes(), 64),
                    expected: "LOCK name",
                });
            }
        };
        Ok(FenceSet {
            key,
            token,
            value,
            lock,
        })
    }
}

impl OpCommand for FenceSet {
    fn into_op(self, _client_id: u64) -> Op {
        Op::FenceSet {
            key: self.key,
            token: self.token,
            value: self.value,
            lock: self.lock,
        }
    }

    fn reply(result: OpResult) -> Result<Reply, CommandError> {
        match result {
            OpResult::FenceSet(stored) => Ok(Reply::Integer(stored.into())),
            other => Err(unexpected(&other)),
        }
    }
}
