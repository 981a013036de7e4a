//! flockd-aof: the append-only file. (Skeleton: replaced by the implementation.)
