//! flockd-bench: placeholder until the benchmark tool lands.
fn main() {}
