//! The data directory's lock: one process at a time may use a `dir` (the daemon, single node or
//! cluster, and `flockd check-aof --fix`). Two servers on one directory would each hand out the
//! same tokens from their own copy of the counters, so the second one must not start.
//!
//! The lock is an `flock` on `dir/flockd.lock`, as PostgreSQL, etcd and RocksDB lock theirs: the
//! kernel drops it with the process, so a restart after `kill -9` is never blocked by a stale
//! file. The file holds the holder's pid, for the refusal's message only.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

/// The lock file's name inside `dir`.
pub const LOCK_FILE: &str = "flockd.lock";

#[derive(Debug, thiserror::Error)]
pub enum DirLockError {
    #[error("another flockd (pid {pid}) is using {}", dir.display())]
    InUse { pid: String, dir: PathBuf },
    #[error("cannot create data directory {}: {source}", dir.display())]
    Create {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot lock {}: {source}", path.display())]
    Lock {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Held while the directory is in use; dropping it (or the process ending) frees the directory.
#[derive(Debug)]
pub struct DirLock {
    _file: File,
}

/// Takes `dir`'s lock, creating the directory and the lock file if they do not exist yet. When
/// another process holds it, nothing is created or written.
pub fn lock(dir: &Path) -> Result<DirLock, DirLockError> {
    lock_with(dir, true).map(|held| held.expect("created when missing"))
}

/// Takes `dir`'s lock if a flockd ever used the directory (its lock file exists), creating
/// nothing: for tools that work on a file a server may be using (`check-aof --fix`).
pub fn lock_if_used(dir: &Path) -> Result<Option<DirLock>, DirLockError> {
    lock_with(dir, false)
}

fn lock_with(dir: &Path, create: bool) -> Result<Option<DirLock>, DirLockError> {
    let path = dir.join(LOCK_FILE);
    let lock_error = |source| DirLockError::Lock {
        path: path.clone(),
        source,
    };
    // An existing file is opened as it is, so a refused start leaves no trace.
    let mut file = match OpenOptions::new().read(true).write(true).open(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !create => return Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir).map_err(|source| DirLockError::Create {
                dir: dir.to_path_buf(),
                source,
            })?;
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
                .map_err(lock_error)?
        }
        Err(e) => return Err(lock_error(e)),
    };
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => {
            return Err(DirLockError::InUse {
                pid: holder_pid(&mut file),
                dir: dir.to_path_buf(),
            });
        }
        Err(TryLockError::Error(e)) => return Err(lock_error(e)),
    }
    // The pid is for the message a second start prints; the lock itself is the flock.
    let written = file
        .set_len(0)
        .and_then(|()| file.rewind())
        .and_then(|()| writeln!(file, "{}", std::process::id()));
    written.map_err(lock_error)?;
    Ok(Some(DirLock { _file: file }))
}

/// The pid the holder wrote, or `unknown` (it may not have written it yet).
fn holder_pid(file: &mut File) -> String {
    let mut text = String::new();
    let pid = file
        .read_to_string(&mut text)
        .ok()
        .and_then(|_| text.trim().parse::<u32>().ok());
    pid.map_or_else(|| "unknown".to_owned(), |pid| pid.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("flockd-dirlock-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn a_second_lock_on_the_same_directory_is_refused_and_named() {
        let dir = scratch("second");
        let held = lock(&dir).expect("first lock");
        // flock locks belong to the open file description: a second open in the same process
        // conflicts just as another process's would.
        match lock(&dir) {
            Err(DirLockError::InUse { pid, dir: named }) => {
                assert_eq!(pid, std::process::id().to_string());
                assert_eq!(named, dir);
            }
            other => panic!("expected InUse, got {other:?}"),
        }
        drop(held);
        let again = lock(&dir).expect("free again once dropped");
        drop(again);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_lock_creates_a_missing_directory() {
        let dir = scratch("create").join("nested");
        let held = lock(&dir).expect("lock");
        assert!(dir.join(LOCK_FILE).exists());
        drop(held);
        std::fs::remove_dir_all(dir.parent().unwrap()).unwrap();
    }
}
