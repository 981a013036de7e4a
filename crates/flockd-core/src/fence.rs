//! The fence register: FENCE.SET/GET/TOKEN, a key's value guarded by the highest token it
//! accepted. (Skeleton.)

use bytes::Bytes;

use crate::{Change, Journal};

#[derive(Default)]
pub struct FenceRegister {}

impl FenceRegister {
    /// Stores `value` at `token` if `token` >= the key's highest accepted token; true if stored.
    pub fn set(&self, _key: Bytes, _token: u64, _value: Bytes, _journal: &dyn Journal) -> bool {
        todo!()
    }

    pub fn get(&self, _key: &[u8]) -> Option<Bytes> {
        todo!()
    }

    pub fn token(&self, _key: &[u8]) -> u64 {
        todo!()
    }

    pub fn apply_change(&self, _change: &Change) {
        todo!()
    }

    pub fn snapshot(&self, _emit: &mut dyn FnMut(Change)) {
        todo!()
    }
}
