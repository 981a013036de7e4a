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

/// Which of `groups` groups serves `slot`: the slots are spread evenly, each group owning one
/// contiguous range (see [`slots_of_group`]).
pub fn group_of_slot(slot: u16, groups: u16) -> u16 {
    let groups = u32::from(groups.max(1));
    ((u32::from(slot) * groups + groups - 1) / u32::from(SLOT_COUNT)) as u16
}

/// The slots group `group` of `groups` serves: from `group * 16384 / groups` up to the next
/// group's first slot.
pub fn slots_of_group(group: u16, groups: u16) -> std::ops::RangeInclusive<u16> {
    let groups = u32::from(groups.max(1));
    let start = |g: u32| (g * u32::from(SLOT_COUNT) / groups) as u16;
    let g = u32::from(group);
    start(g)..=start(g + 1) - 1
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

    #[test]
    fn every_slot_has_the_one_group_whose_range_holds_it() {
        for groups in [1u16, 2, 3, 4, 5, 7, 16, 64] {
            let ranges: Vec<_> = (0..groups).map(|g| slots_of_group(g, groups)).collect();
            assert_eq!(*ranges[0].start(), 0);
            assert_eq!(*ranges.last().unwrap().end(), SLOT_COUNT - 1);
            for pair in ranges.windows(2) {
                assert_eq!(*pair[0].end() + 1, *pair[1].start(), "{groups} groups");
            }
            let sizes: Vec<usize> = ranges.iter().map(|r| r.clone().count()).collect();
            let (min, max) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
            assert!(max - min <= 1, "{groups} groups: {sizes:?}");
            for slot in 0..SLOT_COUNT {
                let group = group_of_slot(slot, groups);
                assert!(
                    ranges[usize::from(group)].contains(&slot),
                    "{slot} of {groups}"
                );
            }
        }
        assert_eq!(slots_of_group(0, 3), 0..=5460);
        assert_eq!(slots_of_group(1, 3), 5461..=10921);
        assert_eq!(slots_of_group(2, 3), 10922..=16383);
        assert_eq!(slots_of_group(3, 4), 12288..=16383);
    }

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
