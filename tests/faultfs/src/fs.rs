//! The pass-through: each FUSE request is done on the backing directory, subject to the
//! faults, reported to the durability model and recorded as an [`Event`].
//!
//! Files are opened with `FOPEN_DIRECT_IO` and every entry and attribute has a zero TTL, so
//! each `write(2)` of the program arrives here as it was made (in pieces of at most the
//! kernel's request size), a short count reaches the program unchanged, and nothing the kernel
//! cached survives a power loss. The backing files themselves are never fsynced: what is
//! durable is the model's business, not the test machine's disk.
//! Directory renames are refused (EXDEV): the model tracks files, and flockd renames none.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::{self, File, Metadata, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner,
    OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};
use parking_lot::Mutex;

use crate::faults::{Faults, WriteVerdict};
use crate::model::{FileId, Model};

/// Events kept for [`crate::FaultFs::events`]; later ones are only counted.
pub const MAX_EVENTS: usize = 1_000_000;
const TTL: Duration = Duration::ZERO;
const ROOT: u64 = 1;
/// The largest read answered at once (the kernel asks for at most its request size anyway).
const MAX_READ: u32 = 1 << 20;

/// One operation the program under test made, as the file system saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    Create {
        path: PathBuf,
        id: FileId,
    },
    /// `result`: bytes written, or the errno returned.
    Write {
        path: PathBuf,
        id: FileId,
        offset: u64,
        len: usize,
        result: Result<usize, i32>,
    },
    Fsync {
        path: PathBuf,
        id: FileId,
        ok: bool,
    },
    Truncate {
        path: PathBuf,
        id: FileId,
        len: u64,
    },
    Rename {
        from: PathBuf,
        to: PathBuf,
    },
    Unlink {
        path: PathBuf,
    },
    DirSync {
        path: PathBuf,
    },
    PowerLoss,
}

/// An open file: `path` is its name when it was opened.
struct Handle {
    file: File,
    path: PathBuf,
    id: FileId,
    append: bool,
}

pub(crate) struct State {
    backing: PathBuf,
    pub(crate) model: Model,
    pub(crate) faults: Faults,
    pub(crate) events: Vec<Event>,
    events_dropped: u64,
    paths: HashMap<u64, PathBuf>,
    inos: HashMap<PathBuf, u64>,
    next_ino: u64,
    handles: HashMap<u64, Handle>,
    dirs: HashMap<u64, PathBuf>,
    next_fh: u64,
}

/// Every regular file under `root`, as paths relative to it.
fn regular_files(root: &Path) -> io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut pending = vec![PathBuf::new()];
    while let Some(rel) = pending.pop() {
        for entry in fs::read_dir(root.join(&rel))? {
            let entry = entry?;
            let child = rel.join(entry.file_name());
            let kind = entry.file_type()?;
            if kind.is_dir() {
                pending.push(child);
            } else if kind.is_file() {
                out.push(child);
            }
        }
    }
    Ok(out)
}

fn system_time(secs: i64, nanos: i64) -> SystemTime {
    let nanos = u32::try_from(nanos).unwrap_or(0);
    match u64::try_from(secs) {
        Ok(s) => UNIX_EPOCH + Duration::new(s, nanos),
        Err(_) => UNIX_EPOCH,
    }
}

fn attr(ino: u64, md: &Metadata) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: md.len(),
        blocks: md.blocks(),
        atime: system_time(md.atime(), md.atime_nsec()),
        mtime: system_time(md.mtime(), md.mtime_nsec()),
        ctime: system_time(md.ctime(), md.ctime_nsec()),
        crtime: UNIX_EPOCH,
        kind: FileType::from_std(md.file_type()).unwrap_or(FileType::RegularFile),
        perm: (md.mode() & 0o7777) as u16,
        nlink: u32::try_from(md.nlink()).unwrap_or(u32::MAX),
        uid: md.uid(),
        gid: md.gid(),
        rdev: u32::try_from(md.rdev()).unwrap_or(0),
        blksize: u32::try_from(md.blksize()).unwrap_or(4096),
        flags: 0,
    }
}

/// Open options for the flags of an `open(2)`: access mode, plus the flags a pass-through
/// must keep (append, truncate, sync...); creation is handled by the caller. A file opened
/// for writing is opened for reading too: a sync reads what it makes durable back through it.
fn open_options(flags: i32) -> OpenOptions {
    let mut o = OpenOptions::new();
    o.read(true);
    if flags & libc::O_ACCMODE != libc::O_RDONLY {
        o.write(true);
    }
    o.custom_flags(flags & !(libc::O_ACCMODE | libc::O_CREAT | libc::O_EXCL | libc::O_NOCTTY));
    o
}

impl State {
    pub(crate) fn new(backing: &Path) -> io::Result<State> {
        let backing = backing.canonicalize()?;
        let mut model = Model::default();
        for rel in regular_files(&backing)? {
            let contents = fs::read(backing.join(&rel))?;
            model.adopt(rel, contents);
        }
        let mut s = State {
            backing,
            model,
            faults: Faults::default(),
            events: Vec::new(),
            events_dropped: 0,
            paths: HashMap::new(),
            inos: HashMap::new(),
            next_ino: ROOT + 1,
            handles: HashMap::new(),
            dirs: HashMap::new(),
            next_fh: 1,
        };
        s.paths.insert(ROOT, PathBuf::new());
        s.inos.insert(PathBuf::new(), ROOT);
        Ok(s)
    }

    fn real(&self, rel: &Path) -> PathBuf {
        self.backing.join(rel)
    }

    fn record(&mut self, event: Event) {
        if self.events.len() < MAX_EVENTS {
            self.events.push(event);
        } else {
            self.events_dropped += 1;
        }
    }

    fn path(&self, ino: INodeNo) -> Result<PathBuf, Errno> {
        self.paths.get(&ino.0).cloned().ok_or(Errno::ENOENT)
    }

    fn child(&self, parent: INodeNo, name: &OsStr) -> Result<PathBuf, Errno> {
        let name = Path::new(name);
        // One component, never "..": the kernel resolves paths, this only guards the map.
        if name.components().count() != 1 || name == Path::new("..") {
            return Err(Errno::EINVAL);
        }
        Ok(self.path(parent)?.join(name))
    }

    fn ino_for(&mut self, rel: &Path) -> u64 {
        if let Some(&ino) = self.inos.get(rel) {
            return ino;
        }
        let ino = self.next_ino;
        self.next_ino += 1;
        self.inos.insert(rel.to_owned(), ino);
        self.paths.insert(ino, rel.to_owned());
        ino
    }

    fn forget_path(&mut self, rel: &Path) {
        if let Some(ino) = self.inos.remove(rel) {
            self.paths.remove(&ino);
        }
    }

    fn entry(&mut self, rel: &Path) -> Result<FileAttr, Errno> {
        let md = fs::symlink_metadata(self.real(rel)).map_err(Errno::from)?;
        Ok(attr(self.ino_for(rel), &md))
    }

    /// The model's id of a regular file, adopting it (as durable) if it appeared behind the
    /// mount's back.
    fn file_id(&mut self, rel: &Path) -> io::Result<FileId> {
        if let Some(id) = self.model.id_of(rel) {
            return Ok(id);
        }
        let contents = fs::read(self.real(rel))?;
        Ok(self.model.adopt(rel.to_owned(), contents))
    }

    fn add_handle(&mut self, file: File, path: PathBuf, id: FileId, flags: i32) -> u64 {
        let fh = self.next_fh;
        self.next_fh += 1;
        let append = flags & libc::O_APPEND != 0;
        self.handles.insert(
            fh,
            Handle {
                file,
                path,
                id,
                append,
            },
        );
        fh
    }

    fn write(&mut self, fh: u64, offset: u64, data: &[u8]) -> Result<usize, Errno> {
        let verdict = self.faults.write(data.len());
        let Some(h) = self.handles.get(&fh) else {
            return Err(Errno::EBADF);
        };
        let (path, id) = (h.path.clone(), h.id);
        let offset = if h.append {
            h.file.metadata().map_err(Errno::from)?.len()
        } else {
            offset
        };
        let result = match verdict {
            WriteVerdict::Fail(errno) => Err(errno),
            WriteVerdict::Write(n) => match h.file.write_all_at(&data[..n], offset) {
                Ok(()) => Ok(n),
                Err(e) => Err(e.raw_os_error().unwrap_or(libc::EIO)),
            },
        };
        if let Ok(n) = result {
            self.model.wrote(id, offset, n as u64);
        }
        self.record(Event::Write {
            path,
            id,
            offset,
            len: data.len(),
            result,
        });
        result.map_err(Errno::from_i32)
    }

    fn fsync(&mut self, fh: u64) -> Result<(), Errno> {
        let fails = self.faults.fsync_fails();
        let Some(h) = self.handles.get(&fh) else {
            return Err(Errno::EBADF);
        };
        let (path, id) = (h.path.clone(), h.id);
        let result = if fails {
            self.model.sync_failed(id);
            Err(Errno::EIO)
        } else {
            let file = &h.file;
            let len = file.metadata().map_err(Errno::from)?.len();
            self.model
                .synced(id, len, |off, buf| file.read_exact_at(buf, off))
                .map_err(Errno::from)
        };
        self.record(Event::Fsync {
            path,
            id,
            ok: result.is_ok(),
        });
        result
    }

    /// See [`crate::FaultFs::power_loss`].
    pub(crate) fn power_loss(&mut self) -> io::Result<()> {
        let image = self.model.power_loss();
        let keep: std::collections::HashSet<&PathBuf> = image.iter().map(|(p, _)| p).collect();
        for rel in regular_files(&self.backing)? {
            if !keep.contains(&rel) {
                fs::remove_file(self.real(&rel))?;
                self.forget_path(&rel);
            }
        }
        for (rel, contents) in &image {
            let real = self.real(rel);
            if let Some(dir) = real.parent() {
                fs::create_dir_all(dir)?;
            }
            fs::write(real, contents)?;
        }
        self.handles.clear();
        self.record(Event::PowerLoss);
        Ok(())
    }
}

/// The FUSE side: each request locks the state for its duration.
pub(crate) struct PassThrough(pub(crate) Arc<Mutex<State>>);

impl Filesystem for PassThrough {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let mut s = self.0.lock();
        match s.child(parent, name).and_then(|p| s.entry(&p)) {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        let mut s = self.0.lock();
        let by_handle = fh
            .and_then(|fh| s.handles.get(&fh.0))
            .map(|h| h.file.metadata());
        let result = match by_handle {
            Some(md) => md.map(|md| attr(ino.0, &md)).map_err(Errno::from),
            None => s.path(ino).and_then(|p| s.entry(&p)),
        };
        match result {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let mut s = self.0.lock();
        let result = (|| -> Result<FileAttr, Errno> {
            let rel = s.path(ino)?;
            let real = s.real(&rel);
            if let Some(len) = size {
                match fh.and_then(|fh| s.handles.get(&fh.0)) {
                    Some(h) => h.file.set_len(len),
                    None => OpenOptions::new()
                        .write(true)
                        .open(&real)
                        .and_then(|f| f.set_len(len)),
                }
                .map_err(Errno::from)?;
                let id = s.file_id(&rel).map_err(Errno::from)?;
                s.record(Event::Truncate {
                    path: rel.clone(),
                    id,
                    len,
                });
            }
            if let Some(mode) = mode {
                fs::set_permissions(&real, fs::Permissions::from_mode(mode & 0o7777))
                    .map_err(Errno::from)?;
            }
            if uid.is_some() || gid.is_some() {
                std::os::unix::fs::lchown(&real, uid, gid).map_err(Errno::from)?;
            }
            s.entry(&rel)
        })();
        match result {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let mut s = self.0.lock();
        let result = s.child(parent, name).and_then(|rel| {
            let real = s.real(&rel);
            fs::create_dir(&real).map_err(Errno::from)?;
            fs::set_permissions(&real, fs::Permissions::from_mode(mode & !umask & 0o7777))
                .map_err(Errno::from)?;
            s.entry(&rel)
        });
        match result {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut s = self.0.lock();
        let result = s.child(parent, name).and_then(|rel| {
            fs::remove_file(s.real(&rel)).map_err(Errno::from)?;
            s.model.unlinked(&rel);
            s.forget_path(&rel);
            s.record(Event::Unlink { path: rel });
            Ok(())
        });
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut s = self.0.lock();
        let result = s.child(parent, name).and_then(|rel| {
            fs::remove_dir(s.real(&rel)).map_err(Errno::from)?;
            s.forget_path(&rel);
            Ok(())
        });
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let mut s = self.0.lock();
        let result = (|| -> Result<(), Errno> {
            let from = s.child(parent, name)?;
            let to = s.child(newparent, newname)?;
            if !(flags - RenameFlags::RENAME_NOREPLACE).is_empty() {
                return Err(Errno::EINVAL);
            }
            let (real_from, real_to) = (s.real(&from), s.real(&to));
            if fs::symlink_metadata(&real_from)
                .map_err(Errno::from)?
                .is_dir()
            {
                return Err(Errno::EXDEV);
            }
            if flags.contains(RenameFlags::RENAME_NOREPLACE) && real_to.exists() {
                return Err(Errno::EEXIST);
            }
            s.file_id(&from).map_err(Errno::from)?;
            fs::rename(&real_from, &real_to).map_err(Errno::from)?;
            s.model.renamed(&from, to.clone());
            s.forget_path(&to);
            if let Some(ino) = s.inos.remove(&from) {
                s.inos.insert(to.clone(), ino);
                s.paths.insert(ino, to.clone());
            }
            s.record(Event::Rename { from, to });
            Ok(())
        })();
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let mut s = self.0.lock();
        let result = (|| -> Result<u64, Errno> {
            let rel = s.path(ino)?;
            let file = open_options(flags.0)
                .open(s.real(&rel))
                .map_err(Errno::from)?;
            let id = s.file_id(&rel).map_err(Errno::from)?;
            if flags.0 & libc::O_TRUNC != 0 {
                s.record(Event::Truncate {
                    path: rel.clone(),
                    id,
                    len: 0,
                });
            }
            Ok(s.add_handle(file, rel, id, flags.0))
        })();
        match result {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::FOPEN_DIRECT_IO),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let mut s = self.0.lock();
        let result = (|| -> Result<(FileAttr, u64), Errno> {
            let rel = s.child(parent, name)?;
            let real = s.real(&rel);
            let existed = real.exists();
            let mut options = open_options(flags);
            // std refuses to create without write access (O_RDONLY|O_CREAT is legal in C).
            options
                .write(true)
                .create(true)
                .create_new(flags & libc::O_EXCL != 0)
                .mode(mode & !umask & 0o7777);
            let file = options.open(&real).map_err(Errno::from)?;
            let id = if existed {
                s.file_id(&rel).map_err(Errno::from)?
            } else {
                let id = s.model.created(rel.clone());
                s.record(Event::Create {
                    path: rel.clone(),
                    id,
                });
                id
            };
            let a = s.entry(&rel)?;
            Ok((a, s.add_handle(file, rel, id, flags)))
        })();
        match result {
            Ok((a, fh)) => reply.created(
                &TTL,
                &a,
                Generation(0),
                FileHandle(fh),
                FopenFlags::FOPEN_DIRECT_IO,
            ),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let s = self.0.lock();
        let Some(h) = s.handles.get(&fh.0) else {
            return reply.error(Errno::EBADF);
        };
        let mut buf = vec![0u8; size.min(MAX_READ) as usize];
        let mut filled = 0;
        while filled < buf.len() {
            match h.file.read_at(&mut buf[filled..], offset + filled as u64) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return reply.error(e.into()),
            }
        }
        reply.data(&buf[..filled]);
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        match self.0.lock().write(fh.0, offset, data) {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.0.lock().handles.remove(&fh.0);
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        match self.0.lock().fsync(fh.0) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let mut s = self.0.lock();
        let result = s.path(ino).and_then(|rel| {
            if !s.real(&rel).is_dir() {
                return Err(Errno::ENOTDIR);
            }
            let fh = s.next_fh;
            s.next_fh += 1;
            s.dirs.insert(fh, rel);
            Ok(fh)
        });
        match result {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let mut s = self.0.lock();
        let result = (|| -> Result<Vec<(u64, FileType, std::ffi::OsString)>, Errno> {
            let rel = s.path(ino)?;
            let parent_ino = match rel.parent() {
                Some(p) => s.ino_for(p),
                None => ROOT,
            };
            let mut entries = vec![
                (ino.0, FileType::Directory, ".".into()),
                (parent_ino, FileType::Directory, "..".into()),
            ];
            let mut children: Vec<_> = fs::read_dir(s.real(&rel))
                .map_err(Errno::from)?
                .filter_map(Result::ok)
                .collect();
            children.sort_by_key(|e| e.file_name());
            for child in children {
                let kind = child
                    .file_type()
                    .ok()
                    .and_then(FileType::from_std)
                    .unwrap_or(FileType::RegularFile);
                let child_ino = s.ino_for(&rel.join(child.file_name()));
                entries.push((child_ino, kind, child.file_name()));
            }
            Ok(entries)
        })();
        match result {
            Ok(entries) => {
                let skip = usize::try_from(offset).unwrap_or(usize::MAX);
                for (i, (ino, kind, name)) in entries.into_iter().enumerate().skip(skip) {
                    if reply.add(INodeNo(ino), i as u64 + 1, kind, name) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(e),
        }
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.0.lock().dirs.remove(&fh.0);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let mut s = self.0.lock();
        match s.path(ino) {
            Ok(rel) => {
                s.model.dir_synced(&rel);
                s.record(Event::DirSync { path: rel });
                reply.ok();
            }
            Err(e) => reply.error(e),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let backing = self.0.lock().backing.clone();
        let Ok(c) = std::ffi::CString::new(backing.as_os_str().as_encoded_bytes()) else {
            return reply.error(Errno::EINVAL);
        };
        // SAFETY: a valid C string and a zeroed out-parameter of the right type.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
            return reply.error(io::Error::last_os_error().into());
        }
        reply.statfs(
            st.f_blocks,
            st.f_bfree,
            st.f_bavail,
            st.f_files,
            st.f_ffree,
            u32::try_from(st.f_bsize).unwrap_or(4096),
            u32::try_from(st.f_namemax).unwrap_or(255),
            u32::try_from(st.f_frsize).unwrap_or(4096),
        );
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        reply.ok();
    }
}
