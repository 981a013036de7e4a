//! flockd-faultfs: a FUSE file system for tests that passes everything through to a real
//! directory, and on command fails `fsync`, fails or shortens writes, fills the disk, or loses
//! power (every file goes back to what its last successful sync made durable, see [`model`]).
//!
//! The test process mounts it ([`FaultFs::mount`]) and serves it on a thread of its own; the
//! program under test (a real `flockd`) uses the mount point as its data directory, and the
//! test drives the faults through the returned handle. Every write, sync, rename and directory
//! sync is recorded as an [`Event`], so a test can also check *what* the program did, not only
//! what survived.
//!
//! Linux only; needs `/dev/fuse` and the right to mount (root: no fusermount, no libfuse).

mod faults;
mod fs;
pub mod model;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

pub use faults::{Fault, Times};
pub use fs::Event;

/// A mounted fault-injecting file system; unmounted when dropped.
pub struct FaultFs {
    state: Arc<Mutex<fs::State>>,
    session: Option<fuser::BackgroundSession>,
    mountpoint: PathBuf,
}

impl FaultFs {
    /// Whether this machine can mount a FUSE file system here; `Err` says why not.
    pub fn usable() -> Result<(), String> {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/fuse")
            .map(drop)
            .map_err(|e| format!("cannot open /dev/fuse: {e}"))
    }

    /// Mounts a pass-through of `backing` (an existing directory) on `mountpoint` (an existing,
    /// empty directory). Files already in `backing` count as durable.
    pub fn mount(backing: &Path, mountpoint: &Path) -> io::Result<FaultFs> {
        let state = Arc::new(Mutex::new(fs::State::new(backing)?));
        let mut config = fuser::Config::default();
        config.mount_options = vec![
            fuser::MountOption::FSName("flockd-faultfs".to_owned()),
            fuser::MountOption::NoAtime,
        ];
        let session = fuser::spawn_mount(fs::PassThrough(state.clone()), mountpoint, &config)?;
        let fs = FaultFs {
            state,
            session: Some(session),
            mountpoint: mountpoint.to_owned(),
        };
        // The first request waits for the kernel's INIT to be answered: once this returns,
        // the mount serves.
        std::fs::metadata(mountpoint)?;
        Ok(fs)
    }

    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// Switches a fault on (on top of those already on).
    pub fn inject(&self, fault: Fault) {
        self.state.lock().faults.set(fault);
    }

    /// Switches every fault off.
    pub fn clear(&self) {
        self.state.lock().faults.clear();
    }

    /// Loses power: every file and name goes back to what its last successful sync made
    /// durable, in the backing directory itself. Stop the program using the mount first.
    pub fn power_loss(&self) -> io::Result<()> {
        self.state.lock().power_loss()
    }

    /// Everything recorded so far (at most [`fs::MAX_EVENTS`]; later ones are counted only).
    pub fn events(&self) -> Vec<Event> {
        self.state.lock().events.clone()
    }
}

impl Drop for FaultFs {
    fn drop(&mut self) {
        if let Some(session) = self.session.take()
            && let Err(e) = session.umount_and_join()
        {
            eprintln!(
                "flockd-faultfs: unmounting {}: {e}",
                self.mountpoint.display()
            );
        }
    }
}
