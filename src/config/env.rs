//! `FLOCKD_*` variables that are no configuration key: clap reads only the keys' own, so a typo
//! (`FLOCKD_PROT=6395`) used to leave the server on its default without a word. At start each
//! such variable is named in a warning, with the key's variable it is closest to; the server
//! still starts, as a variable meant for some other program must not stop it.

use super::parameters::PARAMETERS;

/// `FLOCKD_*` variables read by something other than the server's configuration: the tools,
/// the test suites and harnesses, the clients' examples. They are set beside a running server
/// on purpose and never warned about. The unit test below keeps this list whole: every
/// `FLOCKD_*` name the repository mentions is a key's variable or is here.
pub const NOT_KEYS: &[&str] = &[
    // `flockd lock` and the clients' examples: where the server is.
    "FLOCKD_URL",
    "FLOCKD_NODE",
    "FLOCKD_PASSWORD",
    // The test suites: the binary under test, and their knobs.
    "FLOCKD_BIN",
    "FLOCKD_TEST_BIN",
    "FLOCKD_TEST_SYNC_DELAY_FILE",
    "FLOCKD_TEST_SNAPSHOT_EVERY",
    "FLOCKD_TEST_APPLY_TRACE",
    "FLOCKD_REQUIRE_FUSE",
    "FLOCKD_CLUSTER_ROUNDS",
    "FLOCKD_CLUSTER_SEED",
    "FLOCKD_CRASH_ROUNDS",
    "FLOCKD_CRASH_SEED",
    "FLOCKD_FAULT_ROUNDS",
    "FLOCKD_FAULT_SEED",
    "FLOCKD_FUZZ_SECONDS",
    "FLOCKD_RW_SECS",
    "FLOCKD_JAVA_JAR",
    "FLOCKD_JAVA_README",
    "FLOCKD_JAVA_TEST_CP",
];

/// The variables the server reads: every key's, and `FLOCKD_CONFIG` (the file).
fn known() -> impl Iterator<Item = &'static str> {
    PARAMETERS
        .iter()
        .filter_map(|k| k.env)
        .chain(std::iter::once("FLOCKD_CONFIG"))
}

/// One warning per `FLOCKD_*` variable in `vars` that nothing reads, naming the closest known
/// one when a typo would explain it.
pub fn unknown_variables(vars: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut found: Vec<String> = vars
        .into_iter()
        .filter(|name| name.starts_with("FLOCKD_"))
        .filter(|name| !known().any(|k| k == name) && !NOT_KEYS.contains(&name.as_str()))
        .collect();
    found.sort();
    found
        .into_iter()
        .map(|name| match closest(&name) {
            Some(meant) => format!(
                "environment variable {name} is not a flockd setting and is ignored; did you mean {meant}?"
            ),
            None => format!("environment variable {name} is not a flockd setting and is ignored"),
        })
        .collect()
}

/// The known variable nearest to `name`, if a slip of a few keys explains the difference.
fn closest(name: &str) -> Option<&'static str> {
    let typed = &name["FLOCKD_".len()..];
    known()
        .chain(NOT_KEYS.iter().copied())
        .map(|k| (distance(typed, &k["FLOCKD_".len()..]), k))
        .filter(|(d, k)| *d <= 2.max((k.len() - "FLOCKD_".len()) / 4))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// Edit distance counting a swap of two neighbours as one edit (`PROT` is one from `PORT`).
fn distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_typo_names_the_variable_meant() {
        let warnings = unknown_variables(
            [
                "FLOCKD_PROT",
                "FLOCKD_PORT",
                "FLOCKD_URL",
                "PATH",
                "FLOCKD_ZZZZZZZZZZ",
            ]
            .map(String::from),
        );
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].contains("FLOCKD_PROT") && warnings[0].ends_with("FLOCKD_PORT?"));
        assert!(!warnings[1].contains("did you mean"), "{warnings:?}");
        assert_eq!(closest("FLOCKD_APPENDFSINC"), Some("FLOCKD_APPENDFSYNC"));
        assert_eq!(closest("FLOCKD_CLUSTER_PEER"), Some("FLOCKD_CLUSTER_PEERS"));
    }

    /// Every `FLOCKD_*` name this repository mentions (docs, tests, clients, scripts) is a
    /// key's variable or on [`NOT_KEYS`]: a new test knob or example variable that is not would
    /// be warned about by every server it runs beside.
    #[test]
    fn every_flockd_variable_the_repository_uses_is_known() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut names = std::collections::BTreeSet::new();
        let mut dirs = vec![root.to_path_buf()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap().flatten() {
                let path = entry.path();
                let file_name = entry.file_name();
                let file_name = file_name.to_string_lossy();
                if path.is_dir() {
                    if !["target", "node_modules", ".git", "__pycache__", "dist"]
                        .contains(&&*file_name)
                    {
                        dirs.push(path);
                    }
                    continue;
                }
                let Ok(text) = std::fs::read_to_string(&path) else {
                    continue;
                };
                for (at, _) in text.match_indices("FLOCKD_") {
                    let name: String = text[at..]
                        .chars()
                        .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                        .collect();
                    // `FLOCKD_*` in prose, and names cut at a format placeholder.
                    if !name.ends_with('_') {
                        names.insert(name);
                    }
                }
            }
        }
        assert!(names.contains("FLOCKD_PORT") && names.contains("FLOCKD_BIN"));
        let warned: Vec<String> = unknown_variables(names.iter().cloned())
            .into_iter()
            // This file's own examples of typos.
            .filter(|w| {
                ![
                    "FLOCKD_PROT",
                    "FLOCKD_ZZZ",
                    "FLOCKD_APPENDFSINC",
                    "FLOCKD_CLUSTER_PEER ",
                    "FLOCKD_NOTHING_LIKE_IT",
                ]
                .iter()
                .any(|t| w.contains(t))
            })
            .collect();
        assert!(warned.is_empty(), "{warned:#?}");
    }
}
