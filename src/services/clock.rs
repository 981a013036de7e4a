//! The server's clock in log time: the core's [`Clock`], shared by the log (which stamps ops)
//! and the timer tasks (which sleep until a log time).

pub use flockd_core::time::Clock;
