//! SCAN and TYPE: lock names and fence keys seen as one Redis keyspace.
//!
//! The two live in separate tables, and a name may be both. A SCAN walk goes through the lock
//! names, then the fence keys, each in its table's walk order ([`crate::stripes`]); the
//! cursor's top bit says which of the two the walk is in (places are below 2^63). Each name has
//! one type, and the walk lists it in that type's space only: a name that is both is a `fence`.
//! Fence keys are never removed while lock names can be forgotten when idle, so `fence` is the
//! kind that stays, and a name present for the whole walk comes back once unless its type
//! changed meanwhile (a lock name that becomes a fence key after its place was walked comes
//! back twice).

/// The top bit of a SCAN cursor: set while the walk is in the fence keys. `FENCE_SPACE` itself
/// starts the fence keys' part of a walk.
pub const FENCE_SPACE: u64 = 1 << 63;

/// What TYPE answers for an existing key, and what SCAN's TYPE option filters on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyType {
    /// A lock name the table keeps (held, waited for, or idle with its counter), and no fence
    /// key.
    Flock,
    /// A fence key (whether or not it is also a lock name).
    Fence,
}

impl KeyType {
    /// The name TYPE replies, as a Redis module's type name would be.
    pub fn name(self) -> &'static str {
        match self {
            KeyType::Flock => "flock",
            KeyType::Fence => "fence",
        }
    }

    /// The type SCAN's TYPE option names, case-insensitively as Redis compares type names.
    /// `None` for a name no key has (Redis's `string`, `hash`, ...).
    pub fn from_name(name: &[u8]) -> Option<KeyType> {
        [KeyType::Flock, KeyType::Fence]
            .into_iter()
            .find(|kind| kind.name().as_bytes().eq_ignore_ascii_case(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_names_match_case_insensitively() {
        assert_eq!(KeyType::from_name(b"FLOCK"), Some(KeyType::Flock));
        assert_eq!(KeyType::from_name(b"fence"), Some(KeyType::Fence));
        assert_eq!(KeyType::from_name(b"string"), None);
        assert_eq!(KeyType::from_name(b""), None);
    }
}
