//! The server's services: what the commands use of a running server and the server wires
//! together. None of them knows a command or the connection: users and ACL LOG (`acl`), the
//! running configuration (`live_config`), counters and the slow log (`stats`), connected
//! clients (`clients`), the applied state and what routes its events (`applied`, `waiters`,
//! `pubsub`, `hot`), the log's clock (`clock`) and the
//! MONITOR feed (`monitor`).

pub mod acl;
pub mod applied;
pub mod clients;
pub mod clock;
pub mod hot;
pub mod live_config;
pub mod monitor;
pub mod pubsub;
pub mod stats;
pub mod waiters;
