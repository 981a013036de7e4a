//! The core is a pure state machine: no async runtime and no concurrent maps or locks among its
//! dependencies. Reads the crate's own `Cargo.toml` and checks every dependency table (plain and
//! target-specific, dev- and build-dependencies aside) with a plain line scan, since `toml` is
//! not a dependency.

use std::collections::BTreeSet;

const FORBIDDEN: [&str; 3] = ["tokio", "dashmap", "parking_lot"];

/// The dependency names declared in the manifest's `[dependencies]` tables: lines
/// `name = ...` and `name.workspace = true` inside `[dependencies]` or
/// `[target.'...'.dependencies]`, and headers `[dependencies.name]`.
fn dependencies(manifest: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut in_table = false;
    for line in manifest.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        if let Some(header) = line.strip_prefix('[') {
            let header = header.trim_end_matches(']').trim();
            in_table = header == "dependencies"
                || (header.starts_with("target.") && header.ends_with(".dependencies"));
            if let Some(name) = header.strip_prefix("dependencies.") {
                names.insert(name.trim().to_string());
            }
            continue;
        }
        if in_table && let Some((key, _)) = line.split_once('=') {
            let name = key.split('.').next().unwrap_or("").trim().trim_matches('"');
            names.insert(name.to_string());
        }
    }
    names
}

#[test]
fn the_core_depends_on_no_runtime() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    let manifest = std::fs::read_to_string(path).expect("read the manifest");
    let names = dependencies(&manifest);
    // The scan found the dependencies it must find, so an empty result cannot pass.
    for expected in ["bytes", "serde"] {
        assert!(
            names.contains(expected),
            "{expected} not found in {names:?}"
        );
    }
    for forbidden in FORBIDDEN {
        assert!(
            !names.contains(forbidden),
            "flockd-core depends on {forbidden}: {names:?}"
        );
    }
}

#[test]
fn the_scan_reads_every_form_of_dependency() {
    let manifest = r#"
[package]
name = "x"
tokio = "not a dependency: in [package]"

[dependencies]
bytes = { workspace = true, features = ["serde"] }
serde.workspace = true  # a comment
"quoted" = "1"

[dev-dependencies]
proptest.workspace = true

[target.'cfg(unix)'.dependencies]
dashmap = "6"

[dependencies.parking_lot]
version = "0.12"
"#;
    let names: Vec<String> = dependencies(manifest).into_iter().collect();
    assert_eq!(
        names,
        ["bytes", "dashmap", "parking_lot", "quoted", "serde"]
    );
}
