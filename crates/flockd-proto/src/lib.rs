//! flockd-proto: bytes to requests, replies to bytes. (Skeleton: replaced by the implementation.)
