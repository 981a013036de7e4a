//! Redis Cluster's hash slots: which of 16384 slots a lock name or fence key belongs to, so that
//! a cluster client (which computes the same slot) sends each name to the node that leads it.
//!
//! The slot is CRC16 (XMODEM, as Redis) of the name, mod 16384, or of its hash tag: the bytes
//! between the first `{` and the first `}` after it, when there are any. Names with one tag
//! share a slot, which is how a command over several names keeps them in one place.

/// How many slots there are.
pub const SLOT_COUNT: u16 = 16384;

/// The slot of `name`, as Redis Cluster's `CLUSTER KEYSLOT` computes it.
pub fn slot_of(name: &[u8]) -> u16 {
    crc16::State::<crc16::XMODEM>::calculate(hash_tag(name)) % SLOT_COUNT
}

/// The part of `name` its slot is computed from: the hash tag if it has a non-empty one, else
/// all of it.
fn hash_tag(name: &[u8]) -> &[u8] {
    let Some(open) = name.iter().position(|&b| b == b'{') else {
        return name;
    };
    match name[open + 1..].iter().position(|&b| b == b'}') {
        Some(len) if len > 0 => &name[open + 1..open + 1 + len],
        _ => name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What Redis 7.0's `CLUSTER KEYSLOT` answered for each name.
    #[test]
    fn slots_are_the_ones_redis_computes() {
        for (name, slot) in [
            ("somekey", 11058),
            ("foo{hash_tag}", 2515),
            ("bar{hash_tag}", 2515),
            ("foo", 12182),
            ("foo{}{bar}", 8363),
            ("foo{{bar}}zap", 4015),
            ("foo{bar}{zap}", 5061),
            ("{user1000}.following", 3443),
            ("", 0),
            ("order:1042", 15446),
            ("{", 4092),
            ("{}", 15257),
            ("a{b", 13340),
        ] {
            assert_eq!(slot_of(name.as_bytes()), slot, "{name:?}");
        }
    }

    #[test]
    fn every_slot_is_below_the_count() {
        for i in 0..10_000u32 {
            assert!(slot_of(format!("name:{i}").as_bytes()) < SLOT_COUNT);
        }
    }
}
