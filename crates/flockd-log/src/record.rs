//! The file format: header, record framing, and the codec of the payloads.
//!
//! ```text
//! file    = header record*
//! header  = "FLOCKAO" version               7 bytes of magic, then '2' (or '1', see below)
//! record  = len:u32 LE  crc:u32 LE  payload[len]
//!           crc = crc32 (IEEE, crc32fast) of the 4 length bytes followed by the payload
//! payload = tag:u8 fields                   exactly `len` bytes, 1 <= len <= MAX_PAYLOAD
//! ```
//!
//! The checksum covers the length too, so a damaged length field is caught like a damaged
//! payload. A zero length is invalid (every payload has a tag byte): a region of zeros, what some
//! filesystems leave after a power loss, is never mistaken for records.
//!
//! **Version 2** (written today). A file is an optional snapshot, then log entries:
//! - `16` entry: `position:u64 at:u64 count:u32` then `count` ops, each `op-tag:u8 fields`
//!   (op tags: 1 Acquire, 2 Renew, 3 Release, 4 ForceRelease, 5 Advance, 6 FenceSet,
//!   7 CancelWait, 8 Expire, 9 Rearm, 10 Forget, 11 BumpAll; reads inside a transaction:
//!   12 Status, 13 Token, 14 Ttl, 15 FenceGet, 16 FenceToken; then 17 Acquire with conditions,
//!   18 FenceSet with a lock, 19 EndSession, 20 EndAllSessions, 21 Holders, 22 AcquireAll,
//!   23 CancelWaitAll, 24 DropWaits). One entry is one
//!   proposal: a transaction's ops are one record, so a torn tail drops them together. An
//!   acquire with the plain conditions is written as tag 1, so such files stay what they were.
//! - `32` snapshot begin: `position:u64 at:u64`, the log position the snapshot reflects; replay
//!   skips entries at or below it. Then the snapshot's items: `33` floor, `34` counter,
//!   `35` holding, `36` waiter, `37` fence (fields in the order of `flockd_core::SnapshotItem`),
//!   `38` holding and `39` waiter with conditions other than the plain ones, `40` lock-delay,
//!   `41` FLOCK.ACQUIREALL waiter, `42` waiter with a deadline in log time (its conditions always
//!   written, then `deadline:u64 node:u64`).
//!
//! An acquire's wait is one byte: 0 no wait, 1 until cancelled (the only kinds written before
//! waits had deadlines, so older files read as they were), 2 then `ms:u64 node:u64`: at most
//! that long in log time, for a connection on that cluster node (0: a single node's).
//!
//! AcquireAll and its waiter carry only a session option, not whole conditions: their holdings are
//! always exclusive, without lock-delay.
//!
//! Conditions: `kind:u8` (0 exclusive, 1 shared, 2 limit) `n:u32` (the limit, 1..=65535, 0 unless
//! limit) `session:Option<u64>` (flag byte then the id) `lock_delay_ms:u64`.
//!
//! **Version 1** (read only): one applied change per record, tags 1 Grant, 2 Renew, 3 Release,
//! 4 Expire, 5 ForceRelease, 6 Advance, 7 FenceSet, 8 Floor (`flockd_core::V1Change`).
//!
//! Fields: `u64`/`u32` little-endian, byte strings as a `u32` LE length then the bytes,
//! `Option<bytes>` as a flag byte (0 none, 1 some) then the string, booleans as a byte 0/1.
//! Decoding checks every length against the bytes left before copying, never allocates more than
//! the payload holds, and requires the payload to be consumed exactly; it never panics.

use bytes::Bytes;
use flockd_core::{
    Conditions, HoldingRef, Millis, Mode, Op, Read, SnapshotItem, V1Change, Wait, WaitId,
};

/// The header of the files written today: magic `FLOCKAO` and format version `2`.
pub const HEADER: [u8; 8] = *b"FLOCKAO2";
/// The header of the first format, still read.
pub const HEADER_V1: [u8; 8] = *b"FLOCKAO1";
/// The magic part of the headers (without the version byte).
pub const MAGIC: &[u8] = b"FLOCKAO";
/// Bytes before a record's payload: length and checksum.
pub const FRAME_HEADER_LEN: usize = 8;
/// The largest payload accepted (1 GiB). Far above any record the server's limits allow (names
/// are at most a few KiB, fence values at most the bulk limit, 512 MiB by default); it keeps a
/// damaged length from being believed.
pub const MAX_PAYLOAD: usize = 1 << 30;

/// A file format version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

impl Version {
    /// The version a header names, if it is one of ours.
    pub fn of_header(header: &[u8]) -> Option<Version> {
        if header == HEADER {
            Some(Version::V2)
        } else if header == HEADER_V1 {
            Some(Version::V1)
        } else {
            None
        }
    }
}

mod tag {
    pub const V1_GRANT: u8 = 1;
    pub const V1_RENEW: u8 = 2;
    pub const V1_RELEASE: u8 = 3;
    pub const V1_EXPIRE: u8 = 4;
    pub const V1_FORCE_RELEASE: u8 = 5;
    pub const V1_ADVANCE: u8 = 6;
    pub const V1_FENCE_SET: u8 = 7;
    pub const V1_FLOOR: u8 = 8;

    pub const ENTRY: u8 = 16;
    pub const SNAPSHOT_BEGIN: u8 = 32;
    pub const FLOOR: u8 = 33;
    pub const COUNTER: u8 = 34;
    pub const HOLDING: u8 = 35;
    pub const WAITER: u8 = 36;
    pub const FENCE: u8 = 37;
    pub const HOLDING_WITH_TERMS: u8 = 38;
    pub const WAITER_WITH_TERMS: u8 = 39;
    pub const DELAY: u8 = 40;
    pub const MULTI_WAITER: u8 = 41;
    pub const WAITER_WITH_DEADLINE: u8 = 42;

    pub const OP_ACQUIRE: u8 = 1;
    pub const OP_RENEW: u8 = 2;
    pub const OP_RELEASE: u8 = 3;
    pub const OP_FORCE_RELEASE: u8 = 4;
    pub const OP_ADVANCE: u8 = 5;
    pub const OP_FENCE_SET: u8 = 6;
    pub const OP_CANCEL_WAIT: u8 = 7;
    pub const OP_EXPIRE: u8 = 8;
    pub const OP_REARM: u8 = 9;
    pub const OP_FORGET: u8 = 10;
    pub const OP_BUMP_ALL: u8 = 11;
    pub const OP_READ_STATUS: u8 = 12;
    pub const OP_READ_TOKEN: u8 = 13;
    pub const OP_READ_TTL: u8 = 14;
    pub const OP_READ_FENCE_GET: u8 = 15;
    pub const OP_READ_FENCE_TOKEN: u8 = 16;
    pub const OP_ACQUIRE_WITH_TERMS: u8 = 17;
    pub const OP_FENCE_SET_LOCK: u8 = 18;
    pub const OP_END_SESSION: u8 = 19;
    pub const OP_END_ALL_SESSIONS: u8 = 20;
    pub const OP_READ_HOLDERS: u8 = 21;
    pub const OP_ACQUIRE_ALL: u8 = 22;
    pub const OP_CANCEL_WAIT_ALL: u8 = 23;
    pub const OP_DROP_WAITS: u8 = 24;
}

/// Why a payload could not be encoded.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
#[error("record of {len} bytes is over the {MAX_PAYLOAD}-byte limit")]
pub struct RecordTooLarge {
    pub len: usize,
}

/// Why a payload could not be decoded.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    #[error("empty payload")]
    Empty,
    #[error("unknown record type {0}")]
    UnknownTag(u8),
    #[error("unknown operation type {0}")]
    UnknownOp(u8),
    #[error("payload ends inside a field")]
    Truncated,
    #[error("bad flag byte {0}")]
    BadFlag(u8),
    #[error("bad wait kind {0}")]
    BadWait(u8),
    #[error("bad lock mode {kind} (limit {limit})")]
    BadMode { kind: u8, limit: u32 },
    /// The form with conditions, holding the plain conditions: the encoder writes those in the short
    /// form, and every record has one spelling.
    #[error("plain conditions in the form with conditions")]
    PlainTermsInLongForm,
    #[error("{0} unused bytes after the record's fields")]
    Trailing(usize),
}

/// One decoded payload of a version 2 file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record<'a> {
    /// A log entry: one proposal's ops, at `position`, taking effect at `at`.
    Entry {
        position: u64,
        at: Millis,
        ops: Vec<Op>,
    },
    /// The start of a snapshot reflecting the log up to `position`.
    SnapshotBegin { position: u64, at: Millis },
    /// One item of the snapshot.
    Item(SnapshotItem<'a>),
}

/// A decoded payload of either version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Payload<'a> {
    V1(V1Change),
    V2(Record<'a>),
}

/// Whether a declared payload length can be a record's (before looking at the bytes).
pub fn length_is_sane(len: u32) -> bool {
    len != 0 && len as usize <= MAX_PAYLOAD
}

/// The checksum stored in a record's frame.
pub fn checksum(len: u32, payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&len.to_le_bytes());
    h.update(payload);
    h.finalize()
}

/// Splits a frame header into (payload length, checksum).
pub fn parse_frame_header(h: [u8; FRAME_HEADER_LEN]) -> (u32, u32) {
    let len = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
    let crc = u32::from_le_bytes([h[4], h[5], h[6], h[7]]);
    (len, crc)
}

// ----------------------------------------------------------------------------- encoding

/// Builds one framed record at the end of a buffer.
struct Frame<'a> {
    out: &'a mut Vec<u8>,
    start: usize,
}

impl<'a> Frame<'a> {
    fn begin(out: &'a mut Vec<u8>, tag: u8) -> Frame<'a> {
        let start = out.len();
        out.extend_from_slice(&[0; FRAME_HEADER_LEN]);
        out.push(tag);
        Frame { out, start }
    }

    fn u8(&mut self, v: u8) -> &mut Self {
        self.out.push(v);
        self
    }

    fn u32(&mut self, v: u32) -> &mut Self {
        self.out.extend_from_slice(&v.to_le_bytes());
        self
    }

    fn u64(&mut self, v: u64) -> &mut Self {
        self.out.extend_from_slice(&v.to_le_bytes());
        self
    }

    fn bytes(&mut self, b: &[u8]) -> &mut Self {
        // A longer string makes the payload too large, which `finish` refuses.
        self.u32(u32::try_from(b.len()).unwrap_or(u32::MAX));
        self.out.extend_from_slice(b);
        self
    }

    fn opt_bytes(&mut self, b: Option<&[u8]>) -> &mut Self {
        match b {
            Some(b) => self.u8(1).bytes(b),
            None => self.u8(0),
        }
    }

    fn conditions(&mut self, conditions: &Conditions) -> &mut Self {
        let (kind, limit) = match conditions.mode {
            Mode::Exclusive => (0, 0),
            Mode::Shared => (1, 0),
            Mode::Limit(n) => (2, u32::from(n)),
        };
        self.u8(kind)
            .u32(limit)
            .session(conditions.session)
            .u64(conditions.lock_delay_ms)
    }

    fn wait_kind(&mut self, wait: Wait) -> &mut Self {
        match wait {
            Wait::No => self.u8(0),
            Wait::UntilCancelled => self.u8(1),
            Wait::For { ms, node } => self.u8(2).u64(ms).u64(node),
        }
    }

    fn wait(&mut self, w: WaitId) -> &mut Self {
        self.u64(w.position).u32(w.index)
    }

    fn session(&mut self, session: Option<u64>) -> &mut Self {
        match session {
            Some(id) => self.u8(1).u64(id),
            None => self.u8(0),
        }
    }

    fn names<N: AsRef<[u8]>>(&mut self, names: &[N]) -> &mut Self {
        self.u32(names.len() as u32);
        for name in names {
            self.bytes(name.as_ref());
        }
        self
    }

    /// Fills in length and checksum; on a payload over [`MAX_PAYLOAD`] removes the record.
    fn finish(self) -> Result<(), RecordTooLarge> {
        let payload_start = self.start + FRAME_HEADER_LEN;
        let len = self.out.len() - payload_start;
        if len > MAX_PAYLOAD {
            self.out.truncate(self.start);
            return Err(RecordTooLarge { len });
        }
        let len32 = len as u32;
        let crc = checksum(len32, &self.out[payload_start..]);
        self.out[self.start..self.start + 4].copy_from_slice(&len32.to_le_bytes());
        self.out[self.start + 4..payload_start].copy_from_slice(&crc.to_le_bytes());
        Ok(())
    }
}

fn put_op(f: &mut Frame<'_>, op: &Op) {
    match op {
        Op::Acquire {
            name,
            lease_ms,
            owner,
            wait,
            conditions,
        } => {
            let plain = conditions.is_plain();
            f.u8(if plain {
                tag::OP_ACQUIRE
            } else {
                tag::OP_ACQUIRE_WITH_TERMS
            })
            .bytes(name)
            .u64(*lease_ms)
            .opt_bytes(owner.as_deref())
            .wait_kind(*wait);
            if !plain {
                f.conditions(conditions);
            }
        }
        Op::AcquireAll {
            names,
            lease_ms,
            owner,
            wait,
            conditions,
        } => {
            f.u8(tag::OP_ACQUIRE_ALL)
                .names(names)
                .u64(*lease_ms)
                .opt_bytes(owner.as_deref())
                .u8(u8::from(*wait))
                .session(conditions.session);
        }
        Op::CancelWaitAll {
            names,
            wait,
            release_if_granted,
        } => {
            f.u8(tag::OP_CANCEL_WAIT_ALL)
                .names(names)
                .wait(*wait)
                .u8(u8::from(*release_if_granted));
        }
        Op::Renew {
            name,
            token,
            lease_ms,
        } => {
            f.u8(tag::OP_RENEW).bytes(name).u64(*token).u64(*lease_ms);
        }
        Op::Release { name, token } => {
            f.u8(tag::OP_RELEASE).bytes(name).u64(*token);
        }
        Op::ForceRelease { name } => {
            f.u8(tag::OP_FORCE_RELEASE).bytes(name);
        }
        Op::Advance { name, token } => {
            f.u8(tag::OP_ADVANCE).bytes(name).u64(*token);
        }
        Op::FenceSet {
            key,
            token,
            value,
            lock: None,
        } => {
            f.u8(tag::OP_FENCE_SET).bytes(key).u64(*token).bytes(value);
        }
        Op::FenceSet {
            key,
            token,
            value,
            lock: Some(lock),
        } => {
            f.u8(tag::OP_FENCE_SET_LOCK)
                .bytes(key)
                .u64(*token)
                .bytes(value)
                .bytes(lock);
        }
        Op::EndSession { session, names } => {
            f.u8(tag::OP_END_SESSION)
                .u64(*session)
                .u32(names.len() as u32);
            for name in names {
                f.bytes(name);
            }
        }
        Op::EndAllSessions => {
            f.u8(tag::OP_END_ALL_SESSIONS);
        }
        Op::CancelWait {
            name,
            wait,
            release_if_granted,
        } => {
            f.u8(tag::OP_CANCEL_WAIT)
                .bytes(name)
                .wait(*wait)
                .u8(u8::from(*release_if_granted));
        }
        Op::Expire { leases } => {
            f.u8(tag::OP_EXPIRE).u32(leases.len() as u32);
            for lease in leases {
                f.bytes(&lease.name).u64(lease.first_token);
            }
        }
        Op::Rearm { extra_ms } => {
            f.u8(tag::OP_REARM).u64(*extra_ms);
        }
        Op::Forget { names } => {
            f.u8(tag::OP_FORGET).u32(names.len() as u32);
            for name in names {
                f.bytes(name);
            }
        }
        Op::BumpAll { by } => {
            f.u8(tag::OP_BUMP_ALL).u64(*by);
        }
        Op::DropWaits { node } => {
            f.u8(tag::OP_DROP_WAITS).u64(*node);
        }
        Op::Read(read) => {
            let (t, key) = match read {
                Read::Status { name } => (tag::OP_READ_STATUS, name),
                Read::Holders { name } => (tag::OP_READ_HOLDERS, name),
                Read::Token { name } => (tag::OP_READ_TOKEN, name),
                Read::Ttl { name } => (tag::OP_READ_TTL, name),
                Read::FenceGet { key } => (tag::OP_READ_FENCE_GET, key),
                Read::FenceToken { key } => (tag::OP_READ_FENCE_TOKEN, key),
            };
            f.u8(t).bytes(key);
        }
    }
}

/// Appends the framed record of one log entry to `out`. Fails (leaving `out` unchanged) only
/// if the payload would exceed [`MAX_PAYLOAD`].
pub fn encode_entry(
    position: u64,
    at: Millis,
    ops: &[Op],
    out: &mut Vec<u8>,
) -> Result<(), RecordTooLarge> {
    let mut f = Frame::begin(out, tag::ENTRY);
    f.u64(position).u64(at.0).u32(ops.len() as u32);
    for op in ops {
        put_op(&mut f, op);
    }
    f.finish()
}

/// Appends the record that starts a snapshot of the log up to `position`.
pub fn encode_snapshot_begin(position: u64, at: Millis, out: &mut Vec<u8>) {
    let mut f = Frame::begin(out, tag::SNAPSHOT_BEGIN);
    f.u64(position).u64(at.0);
    f.finish().expect("a small record");
}

/// Appends the record of one snapshot item.
pub fn encode_item(item: &SnapshotItem<'_>, out: &mut Vec<u8>) -> Result<(), RecordTooLarge> {
    let f = match item {
        SnapshotItem::Floor { token } => {
            let mut f = Frame::begin(out, tag::FLOOR);
            f.u64(*token);
            f
        }
        SnapshotItem::Counter { name, token } => {
            let mut f = Frame::begin(out, tag::COUNTER);
            f.bytes(name).u64(*token);
            f
        }
        SnapshotItem::Holding {
            name,
            first_token,
            token,
            holds,
            owner,
            lease_ms,
            deadline,
            grants,
            conditions,
        } => {
            let plain = conditions.is_plain();
            let t = if plain {
                tag::HOLDING
            } else {
                tag::HOLDING_WITH_TERMS
            };
            let mut f = Frame::begin(out, t);
            f.bytes(name)
                .u64(*first_token)
                .u64(*token)
                .u32(*holds)
                .opt_bytes(*owner)
                .u64(*lease_ms)
                .u64(deadline.0)
                .u32(grants.len() as u32);
            for (wait, token) in grants {
                f.wait(*wait).u64(*token);
            }
            if !plain {
                f.conditions(conditions);
            }
            f
        }
        SnapshotItem::Waiter {
            name,
            wait,
            owner,
            lease_ms,
            conditions,
            deadline,
            node,
        } => {
            let plain = conditions.is_plain();
            let t = match (deadline, plain) {
                (Some(_), _) => tag::WAITER_WITH_DEADLINE,
                (None, true) => tag::WAITER,
                (None, false) => tag::WAITER_WITH_TERMS,
            };
            let mut f = Frame::begin(out, t);
            f.bytes(name).wait(*wait).opt_bytes(*owner).u64(*lease_ms);
            if let Some(deadline) = deadline {
                f.conditions(conditions).u64(deadline.0).u64(*node);
            } else if !plain {
                f.conditions(conditions);
            }
            f
        }
        SnapshotItem::MultiWaiter {
            wait,
            names,
            owner,
            lease_ms,
            conditions,
        } => {
            let mut f = Frame::begin(out, tag::MULTI_WAITER);
            f.wait(*wait)
                .names(names)
                .opt_bytes(*owner)
                .u64(*lease_ms)
                .session(conditions.session);
            f
        }
        SnapshotItem::Delay { name, until } => {
            let mut f = Frame::begin(out, tag::DELAY);
            f.bytes(name).u64(until.0);
            f
        }
        SnapshotItem::Fence { key, token, value } => {
            let mut f = Frame::begin(out, tag::FENCE);
            f.bytes(key).u64(*token).bytes(value);
            f
        }
    };
    f.finish()
}

/// Appends the framed record of a first-format change to `out` (for tests and tools that make
/// old files; the server never writes version 1).
pub fn encode_v1(change: &V1Change, out: &mut Vec<u8>) -> Result<(), RecordTooLarge> {
    let f = match change {
        V1Change::Grant {
            name,
            token,
            first_token,
            holds,
            owner,
            lease_ms,
        } => {
            let mut f = Frame::begin(out, tag::V1_GRANT);
            f.bytes(name)
                .u64(*token)
                .u64(*first_token)
                .u32(*holds)
                .opt_bytes(owner.as_deref())
                .u64(*lease_ms);
            f
        }
        V1Change::Renew { name, lease_ms } => {
            let mut f = Frame::begin(out, tag::V1_RENEW);
            f.bytes(name).u64(*lease_ms);
            f
        }
        V1Change::Release { name, holds_left } => {
            let mut f = Frame::begin(out, tag::V1_RELEASE);
            f.bytes(name).u32(*holds_left);
            f
        }
        V1Change::Expire { name } => {
            let mut f = Frame::begin(out, tag::V1_EXPIRE);
            f.bytes(name);
            f
        }
        V1Change::ForceRelease { name } => {
            let mut f = Frame::begin(out, tag::V1_FORCE_RELEASE);
            f.bytes(name);
            f
        }
        V1Change::Advance { name, token } => {
            let mut f = Frame::begin(out, tag::V1_ADVANCE);
            f.bytes(name).u64(*token);
            f
        }
        V1Change::FenceSet { key, token, value } => {
            let mut f = Frame::begin(out, tag::V1_FENCE_SET);
            f.bytes(key).u64(*token).bytes(value);
            f
        }
        V1Change::Floor { token } => {
            let mut f = Frame::begin(out, tag::V1_FLOOR);
            f.u64(*token);
            f
        }
    };
    f.finish()
}

// ----------------------------------------------------------------------------- decoding

/// A bounds-checked reader over a payload.
struct Cursor<'a> {
    rest: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.rest.len() < n {
            return Err(DecodeError::Truncated);
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32, DecodeError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self) -> Result<u64, DecodeError> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(a))
    }

    fn wait_kind(&mut self) -> Result<Wait, DecodeError> {
        match self.u8()? {
            0 => Ok(Wait::No),
            1 => Ok(Wait::UntilCancelled),
            2 => Ok(Wait::For {
                ms: self.u64()?,
                node: self.u64()?,
            }),
            k => Err(DecodeError::BadWait(k)),
        }
    }

    fn flag(&mut self) -> Result<bool, DecodeError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            f => Err(DecodeError::BadFlag(f)),
        }
    }

    /// A string, borrowed from the payload. `take` checks the declared length against what is
    /// left before anything is used.
    fn slice(&mut self) -> Result<&'a [u8], DecodeError> {
        let len = self.u32()? as usize;
        self.take(len)
    }

    fn bytes(&mut self) -> Result<Bytes, DecodeError> {
        Ok(Bytes::copy_from_slice(self.slice()?))
    }

    fn opt_slice(&mut self) -> Result<Option<&'a [u8]>, DecodeError> {
        if self.flag()? {
            Ok(Some(self.slice()?))
        } else {
            Ok(None)
        }
    }

    fn opt_bytes(&mut self) -> Result<Option<Bytes>, DecodeError> {
        Ok(self.opt_slice()?.map(Bytes::copy_from_slice))
    }

    /// Conditions if the tag says they follow, else the plain ones (which a tag that has them in
    /// long form must not carry: a record has one way of writing).
    fn terms_if(&mut self, present: bool) -> Result<Conditions, DecodeError> {
        if !present {
            return Ok(Conditions::default());
        }
        let conditions = self.conditions()?;
        if conditions.is_plain() {
            return Err(DecodeError::PlainTermsInLongForm);
        }
        Ok(conditions)
    }

    /// Conditions in long form, plain ones included.
    fn conditions(&mut self) -> Result<Conditions, DecodeError> {
        let (kind, limit) = (self.u8()?, self.u32()?);
        let mode = match (kind, limit) {
            (0, 0) => Mode::Exclusive,
            (1, 0) => Mode::Shared,
            (2, n @ 1..=0xffff) => Mode::Limit(n as u16),
            _ => return Err(DecodeError::BadMode { kind, limit }),
        };
        Ok(Conditions {
            mode,
            session: self.session()?,
            lock_delay_ms: self.u64()?,
        })
    }

    fn session(&mut self) -> Result<Option<u64>, DecodeError> {
        Ok(if self.flag()? {
            Some(self.u64()?)
        } else {
            None
        })
    }

    /// The conditions of FLOCK.ACQUIREALL: exclusive, no lock-delay, and the session that follows.
    fn exclusive_terms(&mut self) -> Result<Conditions, DecodeError> {
        Ok(Conditions {
            session: self.session()?,
            ..Conditions::default()
        })
    }

    fn wait(&mut self) -> Result<WaitId, DecodeError> {
        Ok(WaitId {
            position: self.u64()?,
            index: self.u32()?,
        })
    }

    /// `count` elements read by `one`. Nothing is reserved for the declared count: a damaged
    /// count runs out of bytes instead of allocating.
    fn many<T>(
        &mut self,
        mut one: impl FnMut(&mut Self) -> Result<T, DecodeError>,
    ) -> Result<Vec<T>, DecodeError> {
        let count = self.u32()?;
        let mut items = Vec::new();
        for _ in 0..count {
            items.push(one(self)?);
        }
        Ok(items)
    }

    fn finish(&self) -> Result<(), DecodeError> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::Trailing(self.rest.len()))
        }
    }
}

fn op(c: &mut Cursor<'_>) -> Result<Op, DecodeError> {
    Ok(match c.u8()? {
        t @ (tag::OP_ACQUIRE | tag::OP_ACQUIRE_WITH_TERMS) => Op::Acquire {
            name: c.bytes()?,
            lease_ms: c.u64()?,
            owner: c.opt_bytes()?,
            wait: c.wait_kind()?,
            conditions: c.terms_if(t == tag::OP_ACQUIRE_WITH_TERMS)?,
        },
        tag::OP_ACQUIRE_ALL => Op::AcquireAll {
            names: c.many(Cursor::bytes)?,
            lease_ms: c.u64()?,
            owner: c.opt_bytes()?,
            wait: c.flag()?,
            conditions: c.exclusive_terms()?,
        },
        tag::OP_CANCEL_WAIT_ALL => Op::CancelWaitAll {
            names: c.many(Cursor::bytes)?,
            wait: c.wait()?,
            release_if_granted: c.flag()?,
        },
        tag::OP_RENEW => Op::Renew {
            name: c.bytes()?,
            token: c.u64()?,
            lease_ms: c.u64()?,
        },
        tag::OP_RELEASE => Op::Release {
            name: c.bytes()?,
            token: c.u64()?,
        },
        tag::OP_FORCE_RELEASE => Op::ForceRelease { name: c.bytes()? },
        tag::OP_ADVANCE => Op::Advance {
            name: c.bytes()?,
            token: c.u64()?,
        },
        t @ (tag::OP_FENCE_SET | tag::OP_FENCE_SET_LOCK) => Op::FenceSet {
            key: c.bytes()?,
            token: c.u64()?,
            value: c.bytes()?,
            lock: if t == tag::OP_FENCE_SET_LOCK {
                Some(c.bytes()?)
            } else {
                None
            },
        },
        tag::OP_END_SESSION => Op::EndSession {
            session: c.u64()?,
            names: c.many(Cursor::bytes)?,
        },
        tag::OP_END_ALL_SESSIONS => Op::EndAllSessions,
        tag::OP_CANCEL_WAIT => Op::CancelWait {
            name: c.bytes()?,
            wait: c.wait()?,
            release_if_granted: c.flag()?,
        },
        tag::OP_EXPIRE => Op::Expire {
            leases: c.many(|c| {
                Ok(HoldingRef {
                    name: c.bytes()?,
                    first_token: c.u64()?,
                })
            })?,
        },
        tag::OP_REARM => Op::Rearm { extra_ms: c.u64()? },
        tag::OP_FORGET => Op::Forget {
            names: c.many(Cursor::bytes)?,
        },
        tag::OP_BUMP_ALL => Op::BumpAll { by: c.u64()? },
        tag::OP_DROP_WAITS => Op::DropWaits { node: c.u64()? },
        tag::OP_READ_STATUS => Op::Read(Read::Status { name: c.bytes()? }),
        tag::OP_READ_HOLDERS => Op::Read(Read::Holders { name: c.bytes()? }),
        tag::OP_READ_TOKEN => Op::Read(Read::Token { name: c.bytes()? }),
        tag::OP_READ_TTL => Op::Read(Read::Ttl { name: c.bytes()? }),
        tag::OP_READ_FENCE_GET => Op::Read(Read::FenceGet { key: c.bytes()? }),
        tag::OP_READ_FENCE_TOKEN => Op::Read(Read::FenceToken { key: c.bytes()? }),
        t => return Err(DecodeError::UnknownOp(t)),
    })
}

/// Decodes one version 2 payload (without its frame header). The whole payload must be used.
pub fn decode_v2(payload: &[u8]) -> Result<Record<'_>, DecodeError> {
    let mut c = Cursor { rest: payload };
    let record = match c.u8().map_err(|_| DecodeError::Empty)? {
        tag::ENTRY => Record::Entry {
            position: c.u64()?,
            at: Millis(c.u64()?),
            ops: c.many(op)?,
        },
        tag::SNAPSHOT_BEGIN => Record::SnapshotBegin {
            position: c.u64()?,
            at: Millis(c.u64()?),
        },
        tag::FLOOR => Record::Item(SnapshotItem::Floor { token: c.u64()? }),
        tag::COUNTER => Record::Item(SnapshotItem::Counter {
            name: c.slice()?,
            token: c.u64()?,
        }),
        t @ (tag::HOLDING | tag::HOLDING_WITH_TERMS) => Record::Item(SnapshotItem::Holding {
            name: c.slice()?,
            first_token: c.u64()?,
            token: c.u64()?,
            holds: c.u32()?,
            owner: c.opt_slice()?,
            lease_ms: c.u64()?,
            deadline: Millis(c.u64()?),
            grants: c.many(|c| Ok((c.wait()?, c.u64()?)))?,
            conditions: c.terms_if(t == tag::HOLDING_WITH_TERMS)?,
        }),
        t @ (tag::WAITER | tag::WAITER_WITH_TERMS) => Record::Item(SnapshotItem::Waiter {
            name: c.slice()?,
            wait: c.wait()?,
            owner: c.opt_slice()?,
            lease_ms: c.u64()?,
            conditions: c.terms_if(t == tag::WAITER_WITH_TERMS)?,
            deadline: None,
            node: 0,
        }),
        tag::WAITER_WITH_DEADLINE => Record::Item(SnapshotItem::Waiter {
            name: c.slice()?,
            wait: c.wait()?,
            owner: c.opt_slice()?,
            lease_ms: c.u64()?,
            conditions: c.conditions()?,
            deadline: Some(Millis(c.u64()?)),
            node: c.u64()?,
        }),
        tag::MULTI_WAITER => Record::Item(SnapshotItem::MultiWaiter {
            wait: c.wait()?,
            names: c.many(Cursor::slice)?,
            owner: c.opt_slice()?,
            lease_ms: c.u64()?,
            conditions: c.exclusive_terms()?,
        }),
        tag::DELAY => Record::Item(SnapshotItem::Delay {
            name: c.slice()?,
            until: Millis(c.u64()?),
        }),
        tag::FENCE => Record::Item(SnapshotItem::Fence {
            key: c.slice()?,
            token: c.u64()?,
            value: c.slice()?,
        }),
        t => return Err(DecodeError::UnknownTag(t)),
    };
    c.finish()?;
    Ok(record)
}

/// Decodes one first-format payload.
pub fn decode_v1(payload: &[u8]) -> Result<V1Change, DecodeError> {
    let mut c = Cursor { rest: payload };
    let change = match c.u8().map_err(|_| DecodeError::Empty)? {
        tag::V1_GRANT => V1Change::Grant {
            name: c.bytes()?,
            token: c.u64()?,
            first_token: c.u64()?,
            holds: c.u32()?,
            owner: c.opt_bytes()?,
            lease_ms: c.u64()?,
        },
        tag::V1_RENEW => V1Change::Renew {
            name: c.bytes()?,
            lease_ms: c.u64()?,
        },
        tag::V1_RELEASE => V1Change::Release {
            name: c.bytes()?,
            holds_left: c.u32()?,
        },
        tag::V1_EXPIRE => V1Change::Expire { name: c.bytes()? },
        tag::V1_FORCE_RELEASE => V1Change::ForceRelease { name: c.bytes()? },
        tag::V1_ADVANCE => V1Change::Advance {
            name: c.bytes()?,
            token: c.u64()?,
        },
        tag::V1_FENCE_SET => V1Change::FenceSet {
            key: c.bytes()?,
            token: c.u64()?,
            value: c.bytes()?,
        },
        tag::V1_FLOOR => V1Change::Floor { token: c.u64()? },
        t => return Err(DecodeError::UnknownTag(t)),
    };
    c.finish()?;
    Ok(change)
}

/// Decodes a payload of a file of `version`.
pub fn decode_payload(version: Version, payload: &[u8]) -> Result<Payload<'_>, DecodeError> {
    match version {
        Version::V1 => decode_v1(payload).map(Payload::V1),
        Version::V2 => decode_v2(payload).map(Payload::V2),
    }
}

/// Whether `tag` starts some payload of `version`: a cheap filter before checksumming a
/// candidate record.
pub(crate) fn tag_is_known(version: Version, t: u8) -> bool {
    match version {
        Version::V1 => (tag::V1_GRANT..=tag::V1_FLOOR).contains(&t),
        Version::V2 => t == tag::ENTRY || (tag::SNAPSHOT_BEGIN..=tag::MULTI_WAITER).contains(&t),
    }
}

/// Why the record at the start of a buffer is not valid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// The buffer ends before the record does (it holds `have` of `need` bytes).
    CutShort { have: usize, need: usize },
    /// The length field is 0 or over [`MAX_PAYLOAD`].
    BadLength(u32),
    /// The checksum does not match.
    Checksum,
    /// The checksum matches but the payload does not decode.
    Payload(DecodeError),
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::CutShort { have, need } => {
                write!(f, "record cut short ({have} of {need} bytes present)")
            }
            FrameError::BadLength(len) => write!(f, "bad record length {len}"),
            FrameError::Checksum => f.write_str("checksum mismatch"),
            FrameError::Payload(e) => write!(f, "bad payload: {e}"),
        }
    }
}

/// Decodes the framed record at the start of `buf`: the payload and the record's total length.
pub fn decode_record(version: Version, buf: &[u8]) -> Result<(Payload<'_>, usize), FrameError> {
    if buf.len() < FRAME_HEADER_LEN {
        return Err(FrameError::CutShort {
            have: buf.len(),
            need: FRAME_HEADER_LEN,
        });
    }
    let mut h = [0u8; FRAME_HEADER_LEN];
    h.copy_from_slice(&buf[..FRAME_HEADER_LEN]);
    let (len, crc) = parse_frame_header(h);
    if !length_is_sane(len) {
        return Err(FrameError::BadLength(len));
    }
    let total = FRAME_HEADER_LEN + len as usize;
    if buf.len() < total {
        return Err(FrameError::CutShort {
            have: buf.len(),
            need: total,
        });
    }
    let payload = &buf[FRAME_HEADER_LEN..total];
    if checksum(len, payload) != crc {
        return Err(FrameError::Checksum);
    }
    let decoded = decode_payload(version, payload).map_err(FrameError::Payload)?;
    Ok((decoded, total))
}

#[cfg(test)]
pub(crate) mod tests;
