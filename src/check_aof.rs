//! `flockd check-aof [--fix] FILE`: report on an append-only file, and cut off a damaged tail.

use std::path::Path;
use std::process::ExitCode;

pub fn run(file: &Path, fix: bool) -> ExitCode {
    // A fix rewrites the file: not while a server has it open and appends to it.
    let _dir_lock = if fix {
        let dir = match file.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => Path::new("."),
        };
        match crate::data_dir::lock_if_used(dir) {
            Ok(held) => held,
            Err(e) => {
                eprintln!("flockd check-aof: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        None
    };
    let result = if fix {
        flockd_aof::fix(file)
    } else {
        flockd_aof::check(file)
    };
    match result {
        Ok(report) => {
            println!(
                "{}: {} valid record(s), {} of {} bytes valid",
                file.display(),
                report.records,
                report.valid_len,
                report.file_len
            );
            if report.zeros_after > 0 {
                println!(
                    "then {} bytes of zeros: space a running server writes ahead of its records \
                     (a start or a clean stop cuts it off)",
                    report.zeros_after
                );
            }
            match (&report.problem, fix) {
                (None, _) => {
                    println!("AOF is valid");
                    ExitCode::SUCCESS
                }
                (Some((offset, reason)), false) => {
                    let kind = if report.tail_only {
                        "damaged tail"
                    } else {
                        "bad record followed by valid ones"
                    };
                    println!("{kind} at byte offset {offset}: {reason}");
                    if report.tail_only {
                        println!(
                            "run `flockd check-aof --fix {}` to cut it off",
                            file.display()
                        );
                    }
                    ExitCode::FAILURE
                }
                (Some((offset, reason)), true) => {
                    println!(
                        "cut the file at byte offset {offset} ({reason}); it is now {} bytes",
                        report.valid_len
                    );
                    ExitCode::SUCCESS
                }
            }
        }
        Err(e) => {
            eprintln!("flockd check-aof: {e}");
            ExitCode::FAILURE
        }
    }
}
