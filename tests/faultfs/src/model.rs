//! What a power loss would leave behind: for every file, its contents as of its last successful
//! sync, and for every directory, its entries as of its last successful sync.
//!
//! The model is the pessimistic reading of POSIX that real file systems are allowed to give:
//! - a write reaches the disk only through a successful `fsync`/`fdatasync` of that file;
//! - a new name (create, rename, unlink) reaches the disk only through an `fsync` of its
//!   directory, and a file's data does not make its name durable;
//! - a *failed* fsync marks what it should have written as clean without writing it (Linux's
//!   behaviour that PostgreSQL met in 2018, "fsyncgate"): a later fsync of the same file
//!   succeeds but does not bring that data back; the size it persists may then cover a hole.
//!
//! It knows nothing of FUSE: the pass-through file system reports each operation to it.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::path::{Path, PathBuf};

/// A file's identity, which a rename keeps (an inode, not a name).
pub type FileId = u64;

#[derive(Debug, Default)]
struct FileImage {
    /// The contents as of the last successful sync.
    durable: Vec<u8>,
    /// Byte ranges `[start, end)` written since the last sync.
    dirty: Vec<(u64, u64)>,
}

/// See the module documentation.
#[derive(Debug, Default)]
pub struct Model {
    files: HashMap<FileId, FileImage>,
    /// Regular files by path (relative to the root), as they are now.
    live: BTreeMap<PathBuf, FileId>,
    /// Regular files by path as of each directory's last sync.
    durable_names: BTreeMap<PathBuf, FileId>,
    next_id: FileId,
}

/// The directory holding `path` ("" for a file in the root).
fn parent_of(path: &Path) -> &Path {
    path.parent().unwrap_or(Path::new(""))
}

impl Model {
    fn new_id(&mut self) -> FileId {
        self.next_id += 1;
        self.next_id
    }

    /// A file that was there before the mount: durable as it is, name and contents.
    pub fn adopt(&mut self, path: PathBuf, contents: Vec<u8>) -> FileId {
        let id = self.new_id();
        self.files.insert(
            id,
            FileImage {
                durable: contents,
                dirty: Vec::new(),
            },
        );
        self.live.insert(path.clone(), id);
        self.durable_names.insert(path, id);
        id
    }

    pub fn id_of(&self, path: &Path) -> Option<FileId> {
        self.live.get(path).copied()
    }

    /// A new, empty file: its name is durable only once its directory is synced.
    pub fn created(&mut self, path: PathBuf) -> FileId {
        let id = self.new_id();
        self.files.insert(id, FileImage::default());
        if let Some(old) = self.live.insert(path, id) {
            self.forget_unreferenced(old);
        }
        id
    }

    pub fn wrote(&mut self, id: FileId, offset: u64, len: u64) {
        if len == 0 {
            return;
        }
        if let Some(f) = self.files.get_mut(&id) {
            match f.dirty.last_mut() {
                // Appends are the common case: one growing range.
                Some(last) if last.1 == offset => last.1 = offset + len,
                _ => f.dirty.push((offset, offset + len)),
            }
        }
    }

    /// A successful sync of `id`, whose current length is `len`: what was written since the
    /// last sync becomes durable, read back through `read_at` (the real file's bytes).
    pub fn synced(
        &mut self,
        id: FileId,
        len: u64,
        mut read_at: impl FnMut(u64, &mut [u8]) -> io::Result<()>,
    ) -> io::Result<()> {
        let Some(f) = self.files.get_mut(&id) else {
            return Ok(());
        };
        let len_usize = usize::try_from(len).map_err(|_| io::Error::other("file too large"))?;
        f.durable.resize(len_usize, 0);
        for (start, end) in std::mem::take(&mut f.dirty) {
            let end = end.min(len);
            if start >= end {
                continue;
            }
            // Both fit in usize: they are below `len`.
            let (s, e) = (start as usize, end as usize);
            read_at(start, &mut f.durable[s..e])?;
        }
        Ok(())
    }

    /// A failed sync of `id`: what it should have written is dropped, never to be written.
    pub fn sync_failed(&mut self, id: FileId) {
        if let Some(f) = self.files.get_mut(&id) {
            f.dirty.clear();
        }
    }

    pub fn renamed(&mut self, from: &Path, to: PathBuf) {
        if let Some(id) = self.live.remove(from)
            && let Some(old) = self.live.insert(to, id)
        {
            self.forget_unreferenced(old);
        }
    }

    pub fn unlinked(&mut self, path: &Path) {
        if let Some(id) = self.live.remove(path) {
            self.forget_unreferenced(id);
        }
    }

    /// A successful sync of directory `dir`: its entries as they are now become durable.
    pub fn dir_synced(&mut self, dir: &Path) {
        let before: Vec<FileId> = self
            .durable_names
            .iter()
            .filter(|(p, _)| parent_of(p) == dir)
            .map(|(_, &id)| id)
            .collect();
        self.durable_names.retain(|p, _| parent_of(p) != dir);
        for (p, &id) in &self.live {
            if parent_of(p) == dir {
                self.durable_names.insert(p.clone(), id);
            }
        }
        for id in before {
            self.forget_unreferenced(id);
        }
    }

    /// The power goes: returns every file that survives, with the contents it survives with,
    /// and from now on the model describes that state (nothing unsynced).
    pub fn power_loss(&mut self) -> Vec<(PathBuf, Vec<u8>)> {
        self.live = self.durable_names.clone();
        let referenced: std::collections::HashSet<FileId> = self.live.values().copied().collect();
        self.files.retain(|id, _| referenced.contains(id));
        for f in self.files.values_mut() {
            f.dirty.clear();
        }
        self.live
            .iter()
            .map(|(p, id)| (p.clone(), self.files[id].durable.clone()))
            .collect()
    }

    /// Drops a file's image once neither the live nor the durable names refer to it.
    fn forget_unreferenced(&mut self, id: FileId) {
        let referenced =
            self.live.values().any(|&i| i == id) || self.durable_names.values().any(|&i| i == id);
        if !referenced {
            self.files.remove(&id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in for the real files: path -> bytes, and a model kept in step.
    #[derive(Default)]
    struct Disk {
        model: Model,
        files: HashMap<FileId, Vec<u8>>,
    }

    impl Disk {
        fn create(&mut self, path: &str) -> FileId {
            let id = self.model.created(PathBuf::from(path));
            self.files.insert(id, Vec::new());
            id
        }
        fn write(&mut self, id: FileId, offset: usize, data: &[u8]) {
            let f = self.files.get_mut(&id).unwrap();
            if f.len() < offset + data.len() {
                f.resize(offset + data.len(), 0);
            }
            f[offset..offset + data.len()].copy_from_slice(data);
            self.model.wrote(id, offset as u64, data.len() as u64);
        }
        fn sync(&mut self, id: FileId) {
            let f = self.files[&id].clone();
            self.model
                .synced(id, f.len() as u64, |off, buf| {
                    buf.copy_from_slice(&f[off as usize..off as usize + buf.len()]);
                    Ok(())
                })
                .unwrap();
        }
        fn truncate(&mut self, id: FileId, len: usize) {
            self.files.get_mut(&id).unwrap().truncate(len);
        }
        fn after_power_loss(&mut self) -> BTreeMap<String, Vec<u8>> {
            self.model
                .power_loss()
                .into_iter()
                .map(|(p, c)| (p.display().to_string(), c))
                .collect()
        }
    }

    #[test]
    fn only_synced_data_under_a_synced_name_survives() {
        let mut d = Disk::default();
        let a = d.create("a");
        d.write(a, 0, b"hello");
        d.sync(a);
        // The name was never made durable.
        assert!(d.after_power_loss().is_empty());

        let mut d = Disk::default();
        let a = d.create("a");
        d.model.dir_synced(Path::new(""));
        d.write(a, 0, b"hello");
        d.sync(a);
        d.write(a, 5, b" world");
        let image = d.after_power_loss();
        assert_eq!(image["a"], b"hello");
    }

    #[test]
    fn a_failed_sync_loses_its_data_even_after_a_later_successful_sync() {
        let mut d = Disk::default();
        let a = d.create("a");
        d.model.dir_synced(Path::new(""));
        d.write(a, 0, b"one.");
        d.sync(a);
        d.write(a, 4, b"two.");
        d.model.sync_failed(a);
        d.write(a, 8, b"six.");
        d.sync(a);
        // The size was persisted, "two." never was: a hole of zeros in the middle.
        assert_eq!(d.after_power_loss()["a"], b"one.\0\0\0\0six.");
    }

    #[test]
    fn a_rename_needs_its_directory_synced() {
        let mut d = Disk::default();
        let old = d.create("aof");
        d.model.dir_synced(Path::new(""));
        d.write(old, 0, b"old");
        d.sync(old);
        let new = d.create("aof.tmp");
        d.write(new, 0, b"new");
        d.sync(new);
        d.model.renamed(Path::new("aof.tmp"), PathBuf::from("aof"));
        // Not synced: the old name and contents come back.
        let mut d2 = Disk::default();
        std::mem::swap(&mut d2.model, &mut d.model);
        assert_eq!(
            d2.after_power_loss().into_iter().collect::<Vec<_>>(),
            vec![("aof".to_owned(), b"old".to_vec())]
        );

        let mut d = Disk::default();
        let old = d.create("aof");
        d.model.dir_synced(Path::new(""));
        d.write(old, 0, b"old");
        d.sync(old);
        let new = d.create("aof.tmp");
        d.write(new, 0, b"new");
        d.sync(new);
        d.model.renamed(Path::new("aof.tmp"), PathBuf::from("aof"));
        d.model.dir_synced(Path::new(""));
        assert_eq!(
            d.after_power_loss().into_iter().collect::<Vec<_>>(),
            vec![("aof".to_owned(), b"new".to_vec())]
        );
    }

    #[test]
    fn truncation_is_durable_with_the_next_sync() {
        let mut d = Disk::default();
        let a = d.create("a");
        d.model.dir_synced(Path::new(""));
        d.write(a, 0, b"abcdef");
        d.sync(a);
        d.truncate(a, 2);
        assert_eq!(d.after_power_loss()["a"], b"abcdef");

        let mut d = Disk::default();
        let a = d.create("a");
        d.model.dir_synced(Path::new(""));
        d.write(a, 0, b"abcdef");
        d.sync(a);
        d.truncate(a, 2);
        d.sync(a);
        assert_eq!(d.after_power_loss()["a"], b"ab");
    }

    #[test]
    fn files_in_a_subdirectory_follow_that_directory() {
        let mut m = Model::default();
        m.created(PathBuf::from("d/x"));
        m.dir_synced(Path::new(""));
        assert!(m.power_loss().is_empty());
        m.created(PathBuf::from("d/x"));
        m.dir_synced(Path::new("d"));
        assert_eq!(m.power_loss().len(), 1);
    }

    #[test]
    fn unlinked_until_synced_comes_back() {
        let mut m = Model::default();
        m.adopt(PathBuf::from("keep"), b"k".to_vec());
        m.unlinked(Path::new("keep"));
        assert_eq!(m.power_loss(), vec![(PathBuf::from("keep"), b"k".to_vec())]);
        m.unlinked(Path::new("keep"));
        m.dir_synced(Path::new(""));
        assert!(m.power_loss().is_empty());
    }
}
