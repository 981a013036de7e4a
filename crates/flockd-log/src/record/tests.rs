//! The codec of both formats: version 1 changes and version 2 records (log entries with every
//! kind of op, multi-op entries, snapshot starts and every kind of snapshot item). Round trips,
//! garbage (raw and correctly framed) never panics, any single bit flip is detected, every
//! proper prefix of a record is cut short and of a payload truncated, bad lengths, the decode
//! errors, records of one format are not read as the other, huge declared lengths and counts
//! are refused without allocating, and the byte layout is pinned (the first format must stay
//! the one older releases wrote).

use super::*;
use proptest::prelude::*;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

// ----------------------------------------------------------------------------- allocation count

/// Counts the bytes each thread allocates, so a test can show that decoding a payload that
/// declares a huge count allocates nothing near it. (Test builds of this crate only.)
struct CountingAlloc;

thread_local! {
    static ALLOCATED: Cell<usize> = const { Cell::new(0) };
}

fn count(bytes: usize) {
    // `try_with`: an allocation during the thread's teardown is simply not counted.
    let _ = ALLOCATED.try_with(|a| a.set(a.get().saturating_add(bytes)));
}

unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: the caller's contract is forwarded unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static COUNTING: CountingAlloc = CountingAlloc;

/// Runs `f` and returns its result with the bytes this thread allocated meanwhile.
fn allocated_by<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let before = ALLOCATED.with(Cell::get);
    let r = f();
    let after = ALLOCATED.with(Cell::get);
    (r, after - before)
}

// ----------------------------------------------------------------------------- strategies

fn arb_bytes() -> impl Strategy<Value = Bytes> {
    proptest::collection::vec(any::<u8>(), 0..64).prop_map(Bytes::from)
}

fn arb_vec() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..64)
}

fn arb_wait() -> impl Strategy<Value = WaitId> {
    (any::<u64>(), any::<u32>()).prop_map(|(position, index)| WaitId { position, index })
}

pub(crate) fn arb_v1_change() -> impl Strategy<Value = V1Change> {
    prop_oneof![
        (
            arb_bytes(),
            any::<u64>(),
            any::<u64>(),
            any::<u32>(),
            proptest::option::of(arb_bytes()),
            any::<u64>()
        )
            .prop_map(|(name, token, first_token, holds, owner, lease_ms)| {
                V1Change::Grant {
                    name,
                    token,
                    first_token,
                    holds,
                    owner,
                    lease_ms,
                }
            }),
        (arb_bytes(), any::<u64>()).prop_map(|(name, lease_ms)| V1Change::Renew { name, lease_ms }),
        (arb_bytes(), any::<u32>())
            .prop_map(|(name, holds_left)| V1Change::Release { name, holds_left }),
        arb_bytes().prop_map(|name| V1Change::Expire { name }),
        arb_bytes().prop_map(|name| V1Change::ForceRelease { name }),
        (arb_bytes(), any::<u64>()).prop_map(|(name, token)| V1Change::Advance { name, token }),
        (arb_bytes(), any::<u64>(), arb_bytes())
            .prop_map(|(key, token, value)| V1Change::FenceSet { key, token, value }),
        any::<u64>().prop_map(|token| V1Change::Floor { token }),
    ]
}

/// Any conditions, the plain ones half the time.
pub(crate) fn arb_terms() -> impl Strategy<Value = Conditions> {
    let mode = prop_oneof![
        Just(Mode::Exclusive),
        Just(Mode::Shared),
        (1..=u16::MAX).prop_map(Mode::Limit),
    ];
    prop_oneof![
        Just(Conditions::default()),
        (mode, proptest::option::of(any::<u64>()), any::<u64>()).prop_map(
            |(mode, session, lock_delay_ms)| Conditions {
                mode,
                session,
                lock_delay_ms
            }
        ),
    ]
}

/// Every [`Op`] variant.
pub(crate) fn arb_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (
            arb_bytes(),
            any::<u64>(),
            proptest::option::of(arb_bytes()),
            prop_oneof![
                Just(Wait::No),
                Just(Wait::UntilCancelled),
                (any::<u64>(), any::<u64>()).prop_map(|(ms, node)| Wait::For { ms, node })
            ],
            arb_terms()
        )
            .prop_map(|(name, lease_ms, owner, wait, conditions)| Op::Acquire {
                name,
                lease_ms,
                owner,
                wait,
                conditions
            }),
        (any::<u64>(), proptest::collection::vec(arb_bytes(), 0..4))
            .prop_map(|(session, names)| Op::EndSession { session, names }),
        Just(Op::EndAllSessions),
        (
            proptest::collection::vec(arb_bytes(), 0..4),
            any::<u64>(),
            proptest::option::of(arb_bytes()),
            any::<bool>(),
            proptest::option::of(any::<u64>())
        )
            .prop_map(|(names, lease_ms, owner, wait, session)| Op::AcquireAll {
                names,
                lease_ms,
                owner,
                wait,
                conditions: Conditions {
                    session,
                    ..Conditions::default()
                }
            }),
        (
            proptest::collection::vec(arb_bytes(), 0..4),
            arb_wait(),
            any::<bool>()
        )
            .prop_map(|(names, wait, release_if_granted)| Op::CancelWaitAll {
                names,
                wait,
                release_if_granted
            }),
        (arb_bytes(), any::<u64>(), any::<u64>()).prop_map(|(name, token, lease_ms)| Op::Renew {
            name,
            token,
            lease_ms
        }),
        (arb_bytes(), any::<u64>()).prop_map(|(name, token)| Op::Release { name, token }),
        arb_bytes().prop_map(|name| Op::ForceRelease { name }),
        (arb_bytes(), any::<u64>()).prop_map(|(name, token)| Op::Advance { name, token }),
        (
            arb_bytes(),
            any::<u64>(),
            arb_bytes(),
            proptest::option::of(arb_bytes())
        )
            .prop_map(|(key, token, value, lock)| Op::FenceSet {
                key,
                token,
                value,
                lock
            }),
        (arb_bytes(), arb_wait(), any::<bool>()).prop_map(|(name, wait, release_if_granted)| {
            Op::CancelWait {
                name,
                wait,
                release_if_granted,
            }
        }),
        proptest::collection::vec(
            (arb_bytes(), any::<u64>())
                .prop_map(|(name, first_token)| HoldingRef { name, first_token }),
            0..4
        )
        .prop_map(|leases| Op::Expire { leases }),
        any::<u64>().prop_map(|extra_ms| Op::Rearm { extra_ms }),
        any::<u64>().prop_map(|node| Op::DropWaits { node }),
        proptest::collection::vec(arb_bytes(), 0..4).prop_map(|names| Op::Forget { names }),
        any::<u64>().prop_map(|by| Op::BumpAll { by }),
        (arb_bytes(), 0..6u8).prop_map(|(key, kind)| Op::Read(match kind {
            0 => Read::Status { name: key },
            5 => Read::Holders { name: key },
            1 => Read::Token { name: key },
            2 => Read::Ttl { name: key },
            3 => Read::FenceGet { key },
            _ => Read::FenceToken { key },
        })),
    ]
}

/// A snapshot item with owned fields (a [`SnapshotItem`] borrows them).
#[derive(Clone, Debug)]
pub(crate) enum OwnedItem {
    Floor(u64),
    Counter(Vec<u8>, u64),
    Holding {
        name: Vec<u8>,
        first_token: u64,
        token: u64,
        holds: u32,
        owner: Option<Vec<u8>>,
        lease_ms: u64,
        deadline: u64,
        grants: Vec<(WaitId, u64)>,
        conditions: Conditions,
    },
    Waiter {
        name: Vec<u8>,
        wait: WaitId,
        owner: Option<Vec<u8>>,
        lease_ms: u64,
        conditions: Conditions,
        deadline: Option<u64>,
        node: u64,
    },
    Delay(Vec<u8>, u64),
    Fence {
        key: Vec<u8>,
        token: u64,
        value: Vec<u8>,
    },
    MultiWaiter {
        wait: WaitId,
        names: Vec<Vec<u8>>,
        owner: Option<Vec<u8>>,
        lease_ms: u64,
        session: Option<u64>,
    },
}

impl OwnedItem {
    pub(crate) fn item(&self) -> SnapshotItem<'_> {
        match self {
            OwnedItem::Floor(token) => SnapshotItem::Floor { token: *token },
            OwnedItem::Counter(name, token) => SnapshotItem::Counter {
                name,
                token: *token,
            },
            OwnedItem::Holding {
                name,
                first_token,
                token,
                holds,
                owner,
                lease_ms,
                deadline,
                grants,
                conditions,
            } => SnapshotItem::Holding {
                conditions: *conditions,
                name,
                first_token: *first_token,
                token: *token,
                holds: *holds,
                owner: owner.as_deref(),
                lease_ms: *lease_ms,
                deadline: Millis(*deadline),
                grants: grants.clone(),
            },
            OwnedItem::Waiter {
                name,
                wait,
                owner,
                lease_ms,
                conditions,
                deadline,
                node,
            } => SnapshotItem::Waiter {
                conditions: *conditions,
                name,
                wait: *wait,
                owner: owner.as_deref(),
                lease_ms: *lease_ms,
                deadline: deadline.map(Millis),
                // Only a waiter with a deadline names its node.
                node: if deadline.is_some() { *node } else { 0 },
            },
            OwnedItem::Fence { key, token, value } => SnapshotItem::Fence {
                key,
                token: *token,
                value,
            },
            OwnedItem::Delay(name, until) => SnapshotItem::Delay {
                name,
                until: Millis(*until),
            },
            OwnedItem::MultiWaiter {
                wait,
                names,
                owner,
                lease_ms,
                session,
            } => SnapshotItem::MultiWaiter {
                wait: *wait,
                names: names.iter().map(Vec::as_slice).collect(),
                owner: owner.as_deref(),
                lease_ms: *lease_ms,
                conditions: Conditions {
                    session: *session,
                    ..Conditions::default()
                },
            },
        }
    }
}

/// Every kind of snapshot item.
pub(crate) fn arb_item() -> impl Strategy<Value = OwnedItem> {
    prop_oneof![
        any::<u64>().prop_map(OwnedItem::Floor),
        (arb_vec(), any::<u64>()).prop_map(|(name, token)| OwnedItem::Counter(name, token)),
        (
            arb_vec(),
            (any::<u64>(), any::<u64>(), any::<u32>()),
            proptest::option::of(arb_vec()),
            (any::<u64>(), any::<u64>()),
            proptest::collection::vec((arb_wait(), any::<u64>()), 0..4),
            arb_terms()
        )
            .prop_map(
                |(
                    name,
                    (first_token, token, holds),
                    owner,
                    (lease_ms, deadline),
                    grants,
                    conditions,
                )| {
                    OwnedItem::Holding {
                        name,
                        first_token,
                        token,
                        holds,
                        owner,
                        lease_ms,
                        deadline,
                        grants,
                        conditions,
                    }
                }
            ),
        (
            arb_vec(),
            arb_wait(),
            proptest::option::of(arb_vec()),
            any::<u64>(),
            arb_terms(),
            proptest::option::of(any::<u64>()),
            any::<u64>()
        )
            .prop_map(
                |(name, wait, owner, lease_ms, conditions, deadline, node)| {
                    OwnedItem::Waiter {
                        name,
                        wait,
                        owner,
                        lease_ms,
                        conditions,
                        deadline,
                        node: if deadline.is_some() { node } else { 0 },
                    }
                }
            ),
        (arb_vec(), any::<u64>()).prop_map(|(name, until)| OwnedItem::Delay(name, until)),
        (
            arb_wait(),
            proptest::collection::vec(arb_vec(), 0..4),
            proptest::option::of(arb_vec()),
            any::<u64>(),
            proptest::option::of(any::<u64>())
        )
            .prop_map(
                |(wait, names, owner, lease_ms, session)| OwnedItem::MultiWaiter {
                    wait,
                    names,
                    owner,
                    lease_ms,
                    session
                }
            ),
        (arb_vec(), any::<u64>(), arb_vec()).prop_map(|(key, token, value)| OwnedItem::Fence {
            key,
            token,
            value
        }),
    ]
}

/// A version 2 record, owned.
#[derive(Clone, Debug)]
pub(crate) enum V2 {
    Entry {
        position: u64,
        at: u64,
        ops: Vec<Op>,
    },
    Begin {
        position: u64,
        at: u64,
    },
    Item(OwnedItem),
}

impl V2 {
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        match self {
            V2::Entry { position, at, ops } => {
                encode_entry(*position, Millis(*at), ops, out).expect("small record")
            }
            V2::Begin { position, at } => encode_snapshot_begin(*position, Millis(*at), out),
            V2::Item(item) => encode_item(&item.item(), out).expect("small record"),
        }
    }

    /// What decoding the encoded record gives.
    pub(crate) fn record(&self) -> Record<'_> {
        match self {
            V2::Entry { position, at, ops } => Record::Entry {
                position: *position,
                at: Millis(*at),
                ops: ops.clone(),
            },
            V2::Begin { position, at } => Record::SnapshotBegin {
                position: *position,
                at: Millis(*at),
            },
            V2::Item(item) => Record::Item(item.item()),
        }
    }
}

/// Entries of 0 to 4 ops of any kind (a transaction is one multi-op entry), snapshot starts and
/// snapshot items.
pub(crate) fn arb_v2() -> impl Strategy<Value = V2> {
    prop_oneof![
        3 => (any::<u64>(), any::<u64>(), proptest::collection::vec(arb_op(), 0..5))
            .prop_map(|(position, at, ops)| V2::Entry { position, at, ops }),
        1 => (any::<u64>(), any::<u64>()).prop_map(|(position, at)| V2::Begin { position, at }),
        2 => arb_item().prop_map(V2::Item),
    ]
}

fn v1_bytes(change: &V1Change) -> Vec<u8> {
    let mut buf = Vec::new();
    encode_v1(change, &mut buf).expect("small record");
    buf
}

fn v2_bytes(record: &V2) -> Vec<u8> {
    let mut buf = Vec::new();
    record.encode(&mut buf);
    buf
}

/// `payload` framed with its correct length and checksum.
fn framed(payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut buf = len.to_le_bytes().to_vec();
    buf.extend_from_slice(&checksum(len, payload).to_le_bytes());
    buf.extend_from_slice(payload);
    buf
}

/// Little-endian field builders for hand-made payloads.
fn le32(v: u32) -> [u8; 4] {
    v.to_le_bytes()
}

fn le64(v: u64) -> [u8; 8] {
    v.to_le_bytes()
}

// ----------------------------------------------------------------------------- properties

proptest! {
    #[test]
    fn round_trip_v1(changes in proptest::collection::vec(arb_v1_change(), 1..8)) {
        let mut buf = Vec::new();
        for c in &changes {
            encode_v1(c, &mut buf).expect("small record");
        }
        let mut rest = &buf[..];
        let mut decoded = Vec::new();
        while !rest.is_empty() {
            let (p, n) = decode_record(Version::V1, rest).expect("valid record");
            decoded.push(p);
            rest = &rest[n..];
        }
        let expected: Vec<Payload<'_>> = changes.iter().cloned().map(Payload::V1).collect();
        prop_assert_eq!(decoded, expected);
    }

    #[test]
    fn round_trip_v2(records in proptest::collection::vec(arb_v2(), 1..8)) {
        let mut buf = Vec::new();
        for r in &records {
            r.encode(&mut buf);
        }
        let mut rest = &buf[..];
        let mut decoded = Vec::new();
        while !rest.is_empty() {
            let (p, n) = decode_record(Version::V2, rest).expect("valid record");
            decoded.push(p);
            rest = &rest[n..];
        }
        let expected: Vec<Payload<'_>> = records.iter().map(|r| Payload::V2(r.record())).collect();
        prop_assert_eq!(decoded, expected);
    }

    #[test]
    fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        for version in [Version::V1, Version::V2] {
            let _ = decode_payload(version, &bytes);
            let _ = decode_record(version, &bytes);
        }
    }

    /// Garbage behind a valid frame (and a known tag), so that the payload decoders see it.
    #[test]
    fn framed_garbage_never_panics(
        tag in prop_oneof![1u8..=11, Just(16u8), 32u8..=37],
        rest in proptest::collection::vec(any::<u8>(), 0..256),
    ) {
        let mut payload = vec![tag];
        payload.extend_from_slice(&rest);
        let buf = framed(&payload);
        for version in [Version::V1, Version::V2] {
            match decode_record(version, &buf) {
                Ok((_, n)) => prop_assert_eq!(n, buf.len()),
                Err(e) => prop_assert!(matches!(e, FrameError::Payload(_)), "{:?}", e),
            }
        }
    }

    #[test]
    fn any_single_bit_flip_is_detected_v1(
        change in arb_v1_change(),
        bit in any::<proptest::sample::Index>(),
    ) {
        let mut buf = v1_bytes(&change);
        let i = bit.index(buf.len() * 8);
        buf[i / 8] ^= 1 << (i % 8);
        if let Ok((p, n)) = decode_record(Version::V1, &buf) {
            prop_assert!(n != buf.len() || p != Payload::V1(change), "flip went unnoticed");
        }
    }

    #[test]
    fn any_single_bit_flip_is_detected_v2(
        record in arb_v2(),
        bit in any::<proptest::sample::Index>(),
    ) {
        let mut buf = v2_bytes(&record);
        let i = bit.index(buf.len() * 8);
        buf[i / 8] ^= 1 << (i % 8);
        if let Ok((p, n)) = decode_record(Version::V2, &buf) {
            prop_assert!(
                n != buf.len() || p != Payload::V2(record.record()),
                "flip went unnoticed"
            );
        }
    }

    #[test]
    fn every_proper_prefix_is_cut_short_v1(
        change in arb_v1_change(),
        cut in any::<proptest::sample::Index>(),
    ) {
        let buf = v1_bytes(&change);
        let cut = cut.index(buf.len());
        let is_cut_short = matches!(
            decode_record(Version::V1, &buf[..cut]),
            Err(FrameError::CutShort { have, .. }) if have == cut
        );
        prop_assert!(is_cut_short);
    }

    #[test]
    fn every_proper_prefix_is_cut_short_v2(
        record in arb_v2(),
        cut in any::<proptest::sample::Index>(),
    ) {
        let buf = v2_bytes(&record);
        let cut = cut.index(buf.len());
        let is_cut_short = matches!(
            decode_record(Version::V2, &buf[..cut]),
            Err(FrameError::CutShort { have, .. }) if have == cut
        );
        prop_assert!(is_cut_short);
    }

    /// A payload stops being decodable as soon as a byte is missing: no field is optional.
    #[test]
    fn every_proper_prefix_of_a_payload_is_truncated(
        change in arb_v1_change(),
        record in arb_v2(),
        cut in any::<proptest::sample::Index>(),
    ) {
        for (version, buf) in [(Version::V1, v1_bytes(&change)), (Version::V2, v2_bytes(&record))] {
            let payload = &buf[FRAME_HEADER_LEN..];
            let cut = cut.index(payload.len());
            let expected = if cut == 0 { DecodeError::Empty } else { DecodeError::Truncated };
            prop_assert_eq!(decode_payload(version, &payload[..cut]), Err(expected));
        }
    }
}

// ----------------------------------------------------------------------------- examples

#[test]
fn zero_length_and_huge_length_are_invalid() {
    for version in [Version::V1, Version::V2] {
        let mut buf = vec![0u8; 16];
        assert_eq!(decode_record(version, &buf), Err(FrameError::BadLength(0)));
        buf[..4].copy_from_slice(&(MAX_PAYLOAD as u32 + 1).to_le_bytes());
        assert_eq!(
            decode_record(version, &buf),
            Err(FrameError::BadLength(MAX_PAYLOAD as u32 + 1))
        );
        buf[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(
            decode_record(version, &buf),
            Err(FrameError::BadLength(u32::MAX))
        );
    }
    assert!(!length_is_sane(0));
    assert!(length_is_sane(1));
    assert!(length_is_sane(MAX_PAYLOAD as u32));
    assert!(!length_is_sane(MAX_PAYLOAD as u32 + 1));
}

#[test]
fn a_damaged_checksum_or_length_is_a_checksum_mismatch() {
    let mut buf = v2_bytes(&V2::Begin { position: 3, at: 4 });
    buf[4] ^= 1;
    assert_eq!(decode_record(Version::V2, &buf), Err(FrameError::Checksum));
    // A smaller length that still fits: the checksum covers the length field too.
    let mut buf = v2_bytes(&V2::Begin { position: 3, at: 4 });
    buf[0] -= 1;
    assert_eq!(decode_record(Version::V2, &buf), Err(FrameError::Checksum));
}

#[test]
fn decode_errors_v1() {
    fn v1(p: &[u8]) -> Result<Payload<'_>, DecodeError> {
        decode_payload(Version::V1, p)
    }
    assert_eq!(v1(&[]), Err(DecodeError::Empty));
    assert_eq!(v1(&[99]), Err(DecodeError::UnknownTag(99)));
    assert_eq!(v1(&[0]), Err(DecodeError::UnknownTag(0)));
    assert_eq!(
        v1(&[tag::V1_EXPIRE, 5, 0, 0, 0, b'a']),
        Err(DecodeError::Truncated)
    );
    assert_eq!(
        v1(&[tag::V1_EXPIRE, 1, 0, 0, 0, b'a', 0]),
        Err(DecodeError::Trailing(1))
    );
    // A huge declared string length is refused without allocating it.
    let (r, allocated) = allocated_by(|| v1(&[tag::V1_EXPIRE, 255, 255, 255, 255]));
    assert_eq!(r, Err(DecodeError::Truncated));
    assert!(allocated < 1024, "{allocated} bytes allocated");
    let mut grant = vec![tag::V1_GRANT, 0, 0, 0, 0];
    grant.extend_from_slice(&[0; 20]);
    grant.push(7);
    assert_eq!(v1(&grant), Err(DecodeError::BadFlag(7)));
    // Version 2 tags mean nothing in a version 1 file.
    for t in [tag::ENTRY, tag::SNAPSHOT_BEGIN, tag::FENCE] {
        assert_eq!(v1(&[t, 0, 0]), Err(DecodeError::UnknownTag(t)));
    }
}

/// An entry payload's head: tag, position, time, op count.
fn entry_head(position: u64, at: u64, count: u32) -> Vec<u8> {
    let mut p = vec![tag::ENTRY];
    p.extend_from_slice(&le64(position));
    p.extend_from_slice(&le64(at));
    p.extend_from_slice(&le32(count));
    p
}

#[test]
fn decode_errors_v2() {
    fn v2(p: &[u8]) -> Result<Payload<'_>, DecodeError> {
        decode_payload(Version::V2, p)
    }
    assert_eq!(v2(&[]), Err(DecodeError::Empty));
    assert_eq!(v2(&[99]), Err(DecodeError::UnknownTag(99)));
    // Version 1 tags mean nothing in a version 2 file.
    for t in tag::V1_GRANT..=tag::V1_FLOOR {
        assert_eq!(v2(&[t, 0, 0]), Err(DecodeError::UnknownTag(t)));
    }
    // Entry head cut short.
    assert_eq!(v2(&entry_head(1, 2, 0)[..10]), Err(DecodeError::Truncated));
    // An empty entry is valid; a byte more is trailing.
    assert_eq!(
        v2(&entry_head(1, 2, 0)),
        Ok(Payload::V2(Record::Entry {
            position: 1,
            at: Millis(2),
            ops: Vec::new()
        }))
    );
    let mut p = entry_head(1, 2, 0);
    p.extend_from_slice(&[0, 0]);
    assert_eq!(v2(&p), Err(DecodeError::Trailing(2)));
    // Unknown op tags.
    for t in [0u8, 25, 99, 255] {
        let mut p = entry_head(1, 2, 1);
        p.push(t);
        assert_eq!(v2(&p), Err(DecodeError::UnknownOp(t)), "op tag {t}");
    }
    // Conditions: a limit of 0, a limit without the limit kind, an unknown kind, a bad session flag,
    // and the plain conditions in the form with conditions (the encoder writes the short form).
    for (kind, limit, session_flag) in [
        (2u8, 0u32, 0u8),
        (0, 3, 0),
        (1, 1, 0),
        (3, 0, 0),
        (0, 0, 2),
        (0, 0, 0),
    ] {
        let mut p = entry_head(1, 2, 1);
        p.push(tag::OP_ACQUIRE_WITH_TERMS);
        p.extend_from_slice(&le32(1));
        p.push(b'n');
        p.extend_from_slice(&100u64.to_le_bytes());
        p.extend_from_slice(&[0, 0]); // no owner, no wait
        p.push(kind);
        p.extend_from_slice(&le32(limit));
        p.push(session_flag);
        p.extend_from_slice(&0u64.to_le_bytes());
        let want = if session_flag > 1 {
            DecodeError::BadFlag(session_flag)
        } else if (kind, limit) == (0, 0) {
            DecodeError::PlainTermsInLongForm
        } else {
            DecodeError::BadMode { kind, limit }
        };
        assert_eq!(
            v2(&p),
            Err(want),
            "conditions {kind} {limit} {session_flag}"
        );
    }
    // Acquire: bad owner flag, bad wait flag.
    let mut acquire = entry_head(1, 2, 1);
    acquire.push(tag::OP_ACQUIRE);
    acquire.extend_from_slice(&le32(1));
    acquire.push(b'n');
    acquire.extend_from_slice(&le64(1000));
    let mut p = acquire.clone();
    p.push(7);
    assert_eq!(v2(&p), Err(DecodeError::BadFlag(7)));
    let mut p = acquire.clone();
    p.extend_from_slice(&[0, 3]);
    assert_eq!(v2(&p), Err(DecodeError::BadWait(3)));
    // A wait of 2 (in ms) needs its length.
    let mut p = acquire.clone();
    p.extend_from_slice(&[0, 2, 1]);
    assert_eq!(v2(&p), Err(DecodeError::Truncated));
    let mut p = acquire.clone();
    p.extend_from_slice(&[0, 1]);
    assert_eq!(
        v2(&p),
        Ok(Payload::V2(Record::Entry {
            position: 1,
            at: Millis(2),
            ops: vec![Op::Acquire {
                conditions: Default::default(),
                name: Bytes::from_static(b"n"),
                lease_ms: 1000,
                owner: None,
                wait: true.into()
            }]
        }))
    );
    // CancelWait: bad release flag.
    let mut p = entry_head(1, 2, 1);
    p.push(tag::OP_CANCEL_WAIT);
    p.extend_from_slice(&le32(0));
    p.extend_from_slice(&le64(5));
    p.extend_from_slice(&le32(0));
    p.push(9);
    assert_eq!(v2(&p), Err(DecodeError::BadFlag(9)));
    // A huge declared string length (a fence key) is refused without allocating it.
    let mut p = entry_head(1, 2, 1);
    p.push(tag::OP_FENCE_SET);
    p.extend_from_slice(&le32(u32::MAX));
    p.push(b'k');
    let (r, allocated) = allocated_by(|| v2(&p));
    assert_eq!(r, Err(DecodeError::Truncated));
    assert!(allocated < 4096, "{allocated} bytes allocated");
    // Snapshot records: cut short, bad flags, trailing bytes.
    assert_eq!(
        v2(&[tag::SNAPSHOT_BEGIN, 1, 2, 3]),
        Err(DecodeError::Truncated)
    );
    let mut p = vec![tag::FLOOR];
    p.extend_from_slice(&le64(9));
    p.push(0);
    assert_eq!(v2(&p), Err(DecodeError::Trailing(1)));
    let mut holding = vec![tag::HOLDING];
    holding.extend_from_slice(&le32(0));
    holding.extend_from_slice(&[0; 20]);
    holding.push(5);
    assert_eq!(v2(&holding), Err(DecodeError::BadFlag(5)));
    let mut waiter = vec![tag::WAITER];
    waiter.extend_from_slice(&le32(0));
    waiter.extend_from_slice(&[0; 12]);
    waiter.push(3);
    assert_eq!(v2(&waiter), Err(DecodeError::BadFlag(3)));
    let mut fence = vec![tag::FENCE];
    fence.extend_from_slice(&le32(u32::MAX));
    assert_eq!(v2(&fence), Err(DecodeError::Truncated));
}

/// A payload that declares u32::MAX elements in a few bytes is refused as soon as the bytes run
/// out, having allocated only for the elements actually present.
#[test]
fn huge_declared_counts_are_refused_without_allocating() {
    let mut cases: Vec<(&str, Vec<u8>)> = Vec::new();
    // u32::MAX ops, none present.
    cases.push(("ops", entry_head(1, 2, u32::MAX)));
    // u32::MAX ops, one present.
    let mut p = entry_head(1, 2, u32::MAX);
    p.push(tag::OP_BUMP_ALL);
    p.extend_from_slice(&le64(1));
    cases.push(("ops after one", p));
    // Forget of u32::MAX names.
    let mut p = entry_head(1, 2, 1);
    p.push(tag::OP_FORGET);
    p.extend_from_slice(&le32(u32::MAX));
    p.extend_from_slice(&le32(1));
    p.push(b'x');
    cases.push(("names", p));
    // Expire of u32::MAX leases.
    let mut p = entry_head(1, 2, 1);
    p.push(tag::OP_EXPIRE);
    p.extend_from_slice(&le32(u32::MAX));
    cases.push(("leases", p));
    // A holding with u32::MAX grants.
    let mut p = vec![tag::HOLDING];
    p.extend_from_slice(&le32(1));
    p.push(b'h');
    p.extend_from_slice(&le64(1));
    p.extend_from_slice(&le64(1));
    p.extend_from_slice(&le32(1));
    p.push(0);
    p.extend_from_slice(&le64(1000));
    p.extend_from_slice(&le64(5000));
    p.extend_from_slice(&le32(u32::MAX));
    cases.push(("grants", p));
    // The count works: a real allocation is seen.
    let (v, allocated) = allocated_by(|| vec![1u8; 10_000]);
    assert!(allocated >= 10_000 && v.len() == 10_000, "{allocated}");
    for (what, payload) in cases {
        let (r, allocated) = allocated_by(|| decode_payload(Version::V2, &payload));
        assert_eq!(r, Err(DecodeError::Truncated), "{what}");
        assert!(allocated < 4096, "{what}: {allocated} bytes allocated");
        let buf = framed(&payload);
        let (r, allocated) = allocated_by(|| decode_record(Version::V2, &buf).map(|(_, n)| n));
        assert_eq!(
            r,
            Err(FrameError::Payload(DecodeError::Truncated)),
            "{what}"
        );
        assert!(allocated < 4096, "{what}: {allocated} bytes allocated");
    }
}

#[test]
fn versions_do_not_mix() {
    let v1 = v1_bytes(&V1Change::Floor { token: 1 });
    assert_eq!(
        decode_record(Version::V2, &v1),
        Err(FrameError::Payload(DecodeError::UnknownTag(tag::V1_FLOOR)))
    );
    let v2 = v2_bytes(&V2::Entry {
        position: 1,
        at: 1,
        ops: vec![Op::BumpAll { by: 1 }],
    });
    assert_eq!(
        decode_record(Version::V1, &v2),
        Err(FrameError::Payload(DecodeError::UnknownTag(tag::ENTRY)))
    );
    assert_eq!(Version::of_header(&HEADER), Some(Version::V2));
    assert_eq!(Version::of_header(&HEADER_V1), Some(Version::V1));
    assert_eq!(Version::of_header(b"FLOCKAO3"), None);
    assert_eq!(Version::of_header(b"FLOCKAO"), None);
    assert_eq!(&HEADER[..7], MAGIC);
    assert_eq!(&HEADER_V1[..7], MAGIC);
    for t in 0..=255u8 {
        let v1_tag = (1..=8).contains(&t);
        let v2_tag = t == 16 || (32..=41).contains(&t);
        assert_eq!(tag_is_known(Version::V1, t), v1_tag, "tag {t}");
        assert_eq!(tag_is_known(Version::V2, t), v2_tag, "tag {t}");
    }
}

/// Checks a framed record: length, checksum, payload.
fn assert_frame(buf: &[u8], payload: &[u8]) {
    let len = payload.len() as u32;
    assert_eq!(&buf[..4], &le32(len), "length");
    assert_eq!(&buf[4..8], &le32(checksum(len, payload)), "checksum");
    assert_eq!(&buf[8..], payload, "payload");
}

/// The first format's bytes, assembled by hand from its definition (as the releases before the
/// state machine wrote them, see `tests/fixtures/v1.aof`).
#[test]
fn known_layout_v1() {
    let mut buf = Vec::new();
    encode_v1(&V1Change::Floor { token: 0x0102 }, &mut buf).expect("small record");
    assert_eq!(&buf[..4], &9u32.to_le_bytes());
    assert_eq!(&buf[8..], &[8, 2, 1, 0, 0, 0, 0, 0, 0]);
    assert_eq!(&buf[4..8], &checksum(9, &buf[8..]).to_le_bytes());

    let grant = V1Change::Grant {
        name: Bytes::from_static(b"held"),
        token: 112,
        first_token: 111,
        holds: 2,
        owner: Some(Bytes::from_static(b"w1")),
        lease_ms: 3_600_000,
    };
    let mut p = vec![1];
    p.extend_from_slice(&le32(4));
    p.extend_from_slice(b"held");
    p.extend_from_slice(&le64(112));
    p.extend_from_slice(&le64(111));
    p.extend_from_slice(&le32(2));
    p.push(1);
    p.extend_from_slice(&le32(2));
    p.extend_from_slice(b"w1");
    p.extend_from_slice(&le64(3_600_000));
    assert_frame(&v1_bytes(&grant), &p);

    let cases: Vec<(V1Change, Vec<u8>)> = vec![
        (
            V1Change::Renew {
                name: Bytes::from_static(b"a"),
                lease_ms: 5,
            },
            [&[2u8][..], &le32(1), b"a", &le64(5)].concat(),
        ),
        (
            V1Change::Release {
                name: Bytes::from_static(b"a"),
                holds_left: 1,
            },
            [&[3u8][..], &le32(1), b"a", &le32(1)].concat(),
        ),
        (
            V1Change::Expire {
                name: Bytes::from_static(b"a"),
            },
            [&[4u8][..], &le32(1), b"a"].concat(),
        ),
        (
            V1Change::ForceRelease {
                name: Bytes::from_static(b"a"),
            },
            [&[5u8][..], &le32(1), b"a"].concat(),
        ),
        (
            V1Change::Advance {
                name: Bytes::from_static(b"a"),
                token: 500,
            },
            [&[6u8][..], &le32(1), b"a", &le64(500)].concat(),
        ),
        (
            V1Change::FenceSet {
                key: Bytes::from_static(b"k"),
                token: 7,
                value: Bytes::from_static(b"second"),
            },
            [&[7u8][..], &le32(1), b"k", &le64(7), &le32(6), b"second"].concat(),
        ),
    ];
    for (change, payload) in cases {
        assert_frame(&v1_bytes(&change), &payload);
        assert_eq!(
            decode_payload(Version::V1, &payload),
            Ok(Payload::V1(change))
        );
    }
}

#[test]
fn known_layout_v2() {
    // An entry of two ops.
    let entry = V2::Entry {
        position: 0x0102,
        at: 0x0304,
        ops: vec![
            Op::FenceSet {
                lock: None,
                key: Bytes::from_static(b"k"),
                token: 7,
                value: Bytes::from_static(b"v"),
            },
            Op::Acquire {
                conditions: Default::default(),
                name: Bytes::from_static(b"n"),
                lease_ms: 1000,
                owner: Some(Bytes::from_static(b"o")),
                wait: true.into(),
            },
        ],
    };
    let mut p = entry_head(0x0102, 0x0304, 2);
    p.push(6);
    p.extend_from_slice(&le32(1));
    p.push(b'k');
    p.extend_from_slice(&le64(7));
    p.extend_from_slice(&le32(1));
    p.push(b'v');
    p.push(1);
    p.extend_from_slice(&le32(1));
    p.push(b'n');
    p.extend_from_slice(&le64(1000));
    p.push(1);
    p.extend_from_slice(&le32(1));
    p.push(b'o');
    p.push(1);
    assert_eq!(p[0], 16);
    assert_frame(&v2_bytes(&entry), &p);

    // The other ops, one each.
    let name = || Bytes::from_static(b"n");
    let n = [&le32(1)[..], b"n"].concat();
    let ops: Vec<(Op, Vec<u8>)> = vec![
        (
            Op::Renew {
                name: name(),
                token: 3,
                lease_ms: 4,
            },
            [&[2u8][..], &n, &le64(3), &le64(4)].concat(),
        ),
        (
            Op::Release {
                name: name(),
                token: 3,
            },
            [&[3u8][..], &n, &le64(3)].concat(),
        ),
        (Op::ForceRelease { name: name() }, [&[4u8][..], &n].concat()),
        (
            Op::AcquireAll {
                names: vec![name(), name()],
                lease_ms: 5,
                owner: None,
                wait: true,
                conditions: Conditions {
                    session: Some(9),
                    ..Conditions::default()
                },
            },
            [
                &[22u8][..],
                &le32(2),
                &n,
                &n,
                &le64(5),
                &[0, 1, 1],
                &le64(9),
            ]
            .concat(),
        ),
        (
            Op::CancelWaitAll {
                names: vec![name()],
                wait: WaitId {
                    position: 6,
                    index: 7,
                },
                release_if_granted: true,
            },
            [&[23u8][..], &le32(1), &n, &le64(6), &le32(7), &[1]].concat(),
        ),
        (
            Op::Advance {
                name: name(),
                token: 9,
            },
            [&[5u8][..], &n, &le64(9)].concat(),
        ),
        (
            Op::CancelWait {
                name: name(),
                wait: WaitId {
                    position: 5,
                    index: 1,
                },
                release_if_granted: true,
            },
            [&[7u8][..], &n, &le64(5), &le32(1), &[1]].concat(),
        ),
        (
            Op::Expire {
                leases: vec![HoldingRef {
                    name: name(),
                    first_token: 8,
                }],
            },
            [&[8u8][..], &le32(1), &n, &le64(8)].concat(),
        ),
        (Op::Rearm { extra_ms: 6 }, [&[9u8][..], &le64(6)].concat()),
        (Op::DropWaits { node: 4 }, [&[24u8][..], &le64(4)].concat()),
        (
            Op::Forget {
                names: vec![name(), name()],
            },
            [&[10u8][..], &le32(2), &n, &n].concat(),
        ),
        (Op::BumpAll { by: 2 }, [&[11u8][..], &le64(2)].concat()),
        (
            Op::Read(Read::Status { name: name() }),
            [&[12u8][..], &n].concat(),
        ),
        (
            Op::Read(Read::FenceToken { key: name() }),
            [&[16u8][..], &n].concat(),
        ),
    ];
    for (op, bytes) in ops {
        let mut p = entry_head(1, 2, 1);
        p.extend_from_slice(&bytes);
        let rec = V2::Entry {
            position: 1,
            at: 2,
            ops: vec![op],
        };
        assert_frame(&v2_bytes(&rec), &p);
    }

    // Snapshot records.
    let begin = V2::Begin {
        position: 10,
        at: 20,
    };
    assert_frame(
        &v2_bytes(&begin),
        &[&[32u8][..], &le64(10), &le64(20)].concat(),
    );
    let items: Vec<(OwnedItem, Vec<u8>)> = vec![
        (OwnedItem::Floor(3), [&[33u8][..], &le64(3)].concat()),
        (
            OwnedItem::Counter(b"n".to_vec(), 4),
            [&[34u8][..], &n, &le64(4)].concat(),
        ),
        (
            OwnedItem::Holding {
                conditions: Default::default(),
                name: b"n".to_vec(),
                first_token: 5,
                token: 6,
                holds: 2,
                owner: Some(b"o".to_vec()),
                lease_ms: 1000,
                deadline: 7000,
                grants: vec![(
                    WaitId {
                        position: 9,
                        index: 0,
                    },
                    6,
                )],
            },
            [
                &[35u8][..],
                &n,
                &le64(5),
                &le64(6),
                &le32(2),
                &[1],
                &le32(1),
                b"o",
                &le64(1000),
                &le64(7000),
                &le32(1),
                &le64(9),
                &le32(0),
                &le64(6),
            ]
            .concat(),
        ),
        (
            OwnedItem::Waiter {
                conditions: Default::default(),
                name: b"n".to_vec(),
                wait: WaitId {
                    position: 9,
                    index: 2,
                },
                owner: None,
                lease_ms: 500,
                deadline: None,
                node: 0,
            },
            [&[36u8][..], &n, &le64(9), &le32(2), &[0], &le64(500)].concat(),
        ),
        (
            OwnedItem::Waiter {
                conditions: Default::default(),
                name: b"n".to_vec(),
                wait: WaitId {
                    position: 9,
                    index: 2,
                },
                owner: None,
                lease_ms: 500,
                deadline: Some(1234),
                node: 3,
            },
            // Tag 42: the conditions are always there (plain: exclusive, no session, no delay),
            // then the deadline.
            [
                &[42u8][..],
                &n,
                &le64(9),
                &le32(2),
                &[0],
                &le64(500),
                &[0],
                &le32(0),
                &[0],
                &le64(0),
                &le64(1234),
                &le64(3),
            ]
            .concat(),
        ),
        (
            OwnedItem::Fence {
                key: b"n".to_vec(),
                token: 7,
                value: b"val".to_vec(),
            },
            [&[37u8][..], &n, &le64(7), &le32(3), b"val"].concat(),
        ),
    ];
    for (item, payload) in items {
        let rec = V2::Item(item);
        assert_frame(&v2_bytes(&rec), &payload);
        assert_eq!(
            decode_payload(Version::V2, &payload),
            Ok(Payload::V2(rec.record()))
        );
    }
}

#[test]
fn encoding_appends_after_what_the_buffer_holds() {
    let mut buf = b"prefix".to_vec();
    encode_snapshot_begin(1, Millis(2), &mut buf);
    encode_entry(3, Millis(4), &[Op::BumpAll { by: 1 }], &mut buf).expect("small record");
    assert_eq!(&buf[..6], b"prefix");
    let (first, n) = decode_record(Version::V2, &buf[6..]).expect("valid");
    assert_eq!(
        first,
        Payload::V2(Record::SnapshotBegin {
            position: 1,
            at: Millis(2)
        })
    );
    let (second, m) = decode_record(Version::V2, &buf[6 + n..]).expect("valid");
    assert_eq!(
        second,
        Payload::V2(Record::Entry {
            position: 3,
            at: Millis(4),
            ops: vec![Op::BumpAll { by: 1 }]
        })
    );
    assert_eq!(6 + n + m, buf.len());
}
