//! docs/recipes.md is run, not only read: every redis-cli session on the page goes to the real
//! `redis-cli` (one connection, as pasted) against a fresh flockd and its output must be the
//! page's, line by line (`...` stands for any lines); every Python script runs on redis-py
//! against another fresh flockd and must exit 0. Skipped, with a line saying so, where redis-cli
//! or redis-py is missing (CI installs both).

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::{RunOutput, TestServer, collect_output, skipping};

const PAGE: &str = include_str!("../../docs/recipes.md");
const PROMPT: &str = "127.0.0.1:6390> ";

enum Block {
    /// (commands, the output expected for all of them).
    Session(Vec<String>, Vec<String>),
    Python(String),
}

/// The page's code blocks, with the heading of the recipe each is in.
fn blocks() -> Vec<(String, Block)> {
    let mut out = Vec::new();
    let mut heading = String::new();
    let mut lines = PAGE.lines();
    while let Some(line) = lines.next() {
        if let Some(h) = line.strip_prefix("## ") {
            heading = h.to_string();
            continue;
        }
        let Some(lang) = line.strip_prefix("```") else {
            continue;
        };
        let body: Vec<&str> = lines.by_ref().take_while(|l| *l != "```").collect();
        if lang == "python" {
            out.push((heading.clone(), Block::Python(body.join("\n"))));
        } else if body.first().is_some_and(|l| l.starts_with(PROMPT)) {
            let (mut commands, mut expected) = (Vec::new(), Vec::new());
            for l in body {
                match l.strip_prefix(PROMPT) {
                    Some(command) => commands.push(command.to_string()),
                    None => expected.push(l.to_string()),
                }
            }
            out.push((heading.clone(), Block::Session(commands, expected)));
        }
    }
    out
}

/// Whether `got` is `want` with each `...` line standing for any number of lines.
fn matches(want: &[String], got: &[&str]) -> bool {
    match want.split_first() {
        None => got.is_empty(),
        Some((w, rest)) if w == "..." => (0..=got.len()).any(|skip| matches(rest, &got[skip..])),
        Some((w, rest)) => got.first() == Some(&w.as_str()) && matches(rest, &got[1..]),
    }
}

fn available(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn run_session(commands: &[String]) -> String {
    let server = TestServer::start(&[]);
    let port = server.addr.port().to_string();
    let mut child = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port, "--no-raw"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("redis-cli starts");
    let mut input = commands.join("\n");
    input.push('\n');
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = collect_output(child, Duration::from_secs(60));
    assert!(
        out.status.is_some_and(|s| s.success()),
        "redis-cli failed: {}",
        out.stderr
    );
    out.stdout
}

fn run_python(script: &str) -> RunOutput {
    let server = TestServer::start(&[]);
    let child = Command::new("python3")
        .args(["-c", script])
        .env("FLOCKD_URL", format!("redis://{}", server.addr))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 starts");
    collect_output(child, Duration::from_secs(120))
}

#[test]
fn every_recipe_on_the_page_runs_as_written() {
    let blocks = blocks();
    let sessions = blocks
        .iter()
        .filter(|(_, b)| matches!(b, Block::Session(..)))
        .count();
    let scripts = blocks.len() - sessions;
    // The page has four recipes, each with a session and a script.
    assert!(
        sessions >= 4 && scripts >= 4,
        "{sessions} sessions, {scripts} scripts"
    );

    let cli = available("redis-cli", &["--version"]);
    let py = available("python3", &["-c", "import redis"]);
    if !cli {
        skipping("redis-cli is not installed: the recipes' redis-cli sessions are not run");
    }
    if !py {
        skipping("python3 with redis-py is not installed: the recipes' scripts are not run");
    }
    for (heading, block) in &blocks {
        match block {
            Block::Session(commands, expected) if cli => {
                let got = run_session(commands);
                let got: Vec<&str> = got.lines().collect();
                assert!(
                    matches(expected, &got),
                    "\"{heading}\": redis-cli printed\n{}\nthe page says\n{}",
                    got.join("\n"),
                    expected.join("\n")
                );
            }
            Block::Python(script) if py => {
                let out = run_python(script);
                assert!(
                    out.status.is_some_and(|s| s.success()),
                    "\"{heading}\": the script failed ({:?}): {}\n{}",
                    out.status,
                    out.stdout,
                    out.stderr
                );
            }
            _ => {}
        }
    }
}

#[test]
fn the_line_matcher_takes_ellipses_for_any_lines() {
    let want: Vec<String> = ["a", "...", "c"].iter().map(|s| s.to_string()).collect();
    assert!(matches(&want, &["a", "c"]));
    assert!(matches(&want, &["a", "b", "b", "c"]));
    assert!(!matches(&want, &["a", "b"]));
    assert!(!matches(&want, &["x", "c"]));
}
