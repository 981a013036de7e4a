//! Instruction counts of flockd's in-process path under valgrind (gungraun's callgrind), for
//! `tests/instruction_guard.sh` to hold against `crates/flockd-instructions/baseline.toml`. What each
//! bench covers, and what it leaves out, is in the crate's docs (`src/lib.rs`).
//!
//! Each bench's inputs are built by its `setup` function, which gungraun runs outside the
//! measured region; the bench returns what it built or changed, so dropping it is not counted
//! either. Only the work named by the bench is inside.

use std::hint::black_box;

use bytes::BytesMut;
use flockd_core::{Millis, StateMachine};
use flockd_instructions::{
    AofEntry, LEASE_MS, OpPath, START, aof_entries, decode_raft_payloads, encode_aof_entries,
    encode_raft_payloads, expire_due, granted_machine, op_path_requests, raft_payloads,
};
use flockd_raft::types::EntryPayload;
use gungraun::{library_benchmark, library_benchmark_group, main};

// The daemon's allocator: an allocation costs here what it costs in the server.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Locks in the op-path batch: five requests each (acquire, busy acquire, fenced write, renew,
/// release), 320 requests in all.
const NAMES: usize = 64;
/// Leases granted, then expired, in the expiry bench.
const LEASES: usize = 10_000;

fn op_path_setup(names: usize) -> (OpPath, BytesMut) {
    (OpPath::new(), op_path_requests(names))
}

// 320 pipelined requests: parse, dispatch to an op, apply, reply, RESP2-encode.
#[library_benchmark]
#[bench::batch(args = (NAMES), setup = op_path_setup)]
fn op_path((mut path, mut input): (OpPath, BytesMut)) -> (OpPath, BytesMut) {
    let served = path.run(black_box(&mut input)).expect("the batch parses");
    assert_eq!(served, NAMES * 5);
    (path, input)
}

fn aof_setup(names: usize) -> (Vec<AofEntry>, Vec<u8>) {
    let entries = aof_entries(names);
    // The writer's buffer is reused between batches: no growth inside the measured part.
    (entries, Vec::with_capacity(64 * 1024))
}

// The AOF records of 320 one-op entries (the op-path batch's ops), framed and checksummed.
#[library_benchmark]
#[bench::batch(args = (NAMES), setup = aof_setup)]
fn aof_encode((entries, mut out): (Vec<AofEntry>, Vec<u8>)) -> (Vec<AofEntry>, Vec<u8>) {
    encode_aof_entries(black_box(&entries), &mut out).expect("records fit");
    (entries, out)
}

// 320 Raft entry payloads (one op each) into the log store's bytes.
#[library_benchmark]
#[bench::batch(args = (NAMES), setup = raft_payloads)]
fn raft_entry_encode(payloads: Vec<EntryPayload>) -> (Vec<EntryPayload>, Vec<Vec<u8>>) {
    let encoded = encode_raft_payloads(black_box(&payloads)).expect("payloads encode");
    (payloads, encoded)
}

fn raft_decode_setup(names: usize) -> Vec<Vec<u8>> {
    encode_raft_payloads(&raft_payloads(names)).expect("payloads encode")
}

// The same 320 payloads back from the log store's bytes.
#[library_benchmark]
#[bench::batch(args = (NAMES), setup = raft_decode_setup)]
fn raft_entry_decode(encoded: Vec<Vec<u8>>) -> (Vec<Vec<u8>>, Vec<EntryPayload>) {
    let decoded = decode_raft_payloads(black_box(&encoded)).expect("payloads decode");
    (encoded, decoded)
}

fn expiry_setup(leases: usize) -> StateMachine {
    granted_machine(leases, LEASE_MS)
}

// 10k leases granted at T, all due at T + lease: the expiry task's batches until none is due.
#[library_benchmark]
#[bench::leases_10k(args = (LEASES), setup = expiry_setup)]
fn expiry(mut machine: StateMachine) -> StateMachine {
    let now: Millis = START.plus(LEASE_MS);
    let expired = expire_due(black_box(&mut machine), now);
    assert_eq!(expired, LEASES);
    machine
}

library_benchmark_group!(
    name = in_process;
    benchmarks = op_path, aof_encode, raft_entry_encode, raft_entry_decode, expiry
);

main!(library_benchmark_groups = in_process);
