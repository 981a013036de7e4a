//! A lock name as the table keys it. Most names are short (`order:1042`), and idle names are
//! most of the table, so a name of up to 22 bytes lives inside the table's entry: no allocation and
//! no allocator overhead per name. Longer names are boxed. Hashes and compares as its bytes, so
//! the table is looked up with a plain `&[u8]`.

use std::borrow::Borrow;
use std::hash::{Hash, Hasher};

const INLINE: usize = 22;

#[derive(Clone)]
pub(crate) enum Name {
    Inline { len: u8, bytes: [u8; INLINE] },
    Boxed(Box<[u8]>),
}

impl Name {
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Name::Inline { len, bytes } => &bytes[..*len as usize],
            Name::Boxed(bytes) => bytes,
        }
    }
}

impl From<&[u8]> for Name {
    fn from(name: &[u8]) -> Name {
        if name.len() <= INLINE {
            let mut bytes = [0u8; INLINE];
            bytes[..name.len()].copy_from_slice(name);
            Name::Inline {
                len: name.len() as u8,
                bytes,
            }
        } else {
            Name::Boxed(Box::from(name))
        }
    }
}

impl Borrow<[u8]> for Name {
    fn borrow(&self) -> &[u8] {
        self.as_bytes()
    }
}

// Must hash exactly as `[u8]` does, for `Borrow<[u8]>` lookups to find the entry.
impl Hash for Name {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state);
    }
}

impl PartialEq for Name {
    fn eq(&self, other: &Name) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for Name {}

impl Ord for Name {
    fn cmp(&self, other: &Name) -> std::cmp::Ordering {
        self.as_bytes().cmp(other.as_bytes())
    }
}

impl PartialOrd for Name {
    fn partial_cmp(&self, other: &Name) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn names_are_one_key_wide_and_found_by_their_bytes() {
        assert_eq!(std::mem::size_of::<Name>(), 24);
        let mut map = HashMap::new();
        for len in [0usize, 1, 21, 22, 23, 1000] {
            let name = vec![b'x'; len];
            map.insert(Name::from(&name[..]), len);
        }
        for len in [0usize, 1, 21, 22, 23, 1000] {
            let name = vec![b'x'; len];
            assert_eq!(map.get(&name[..]), Some(&len));
            assert_eq!(Name::from(&name[..]).as_bytes(), &name[..]);
        }
        assert!(matches!(Name::from(&[b'a'; 22][..]), Name::Inline { .. }));
        assert!(matches!(Name::from(&[b'a'; 23][..]), Name::Boxed(_)));
    }
}
