//! Small filesystem helpers shared by replay and the AOF writer.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// The directory holding `path` ("." for a bare file name).
pub fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Syncs the directory that holds `path`, so that a file created or renamed there survives a
/// power loss: fsync of the file alone does not persist its directory entry.
pub fn sync_parent_dir(path: &Path) -> io::Result<()> {
    File::open(parent_dir(path))?.sync_all()
}

/// Where a rewrite builds the new file: next to the AOF, so the final rename is atomic.
pub fn rewrite_tmp_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".rewrite.tmp");
    PathBuf::from(s)
}

/// Reads exactly `buf.len()` bytes at `offset`.
pub fn read_exact_at(mut file: &File, offset: u64, buf: &mut [u8]) -> io::Result<()> {
    file.seek(SeekFrom::Start(offset))?;
    file.read_exact(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        assert_eq!(parent_dir(Path::new("a.aof")), Path::new("."));
        assert_eq!(parent_dir(Path::new("d/a.aof")), Path::new("d"));
        assert_eq!(
            rewrite_tmp_path(Path::new("d/a.aof")),
            Path::new("d/a.aof.rewrite.tmp")
        );
    }
}
