//! The faults a test can switch on, and the decision each write or fsync gets from them.

/// How often a fault fires once set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Times {
    /// On the next matching operation, then it is gone.
    Once,
    /// On every matching operation until [`crate::FaultFs::clear`].
    Always,
}

/// A fault to inject. Faults hit every regular file written or synced through the mount.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// `fsync`/`fdatasync` of a file fails with EIO, and what it should have made durable is
    /// dropped as if written (see [`crate::model`]).
    FsyncEio(Times),
    /// `write` fails with this errno (EIO, ENOSPC, ...) and writes nothing.
    WriteError { errno: i32, times: Times },
    /// The disk fills up after this many more bytes: the write that crosses the limit stores
    /// the part below it and reports that short count, every later write fails with ENOSPC.
    NoSpaceAfter(u64),
    /// A write stores only the first half of its buffer (at least one byte) and reports that
    /// count: a short write, not an error; the caller must write the rest.
    ShortWrite(Times),
}

/// What to do with one write.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum WriteVerdict {
    /// Write this many bytes of the buffer (all of it without a fault).
    Write(usize),
    Fail(i32),
}

/// The faults switched on now.
#[derive(Debug, Default)]
pub(crate) struct Faults {
    active: Vec<Fault>,
}

impl Faults {
    pub(crate) fn set(&mut self, fault: Fault) {
        self.active.push(fault);
    }

    pub(crate) fn clear(&mut self) {
        self.active.clear();
    }

    /// Whether this fsync fails (and consumes a `Once`).
    pub(crate) fn fsync_fails(&mut self) -> bool {
        let hit = self
            .active
            .iter()
            .position(|f| matches!(f, Fault::FsyncEio(_)));
        match hit {
            Some(i) => {
                if self.active[i] == Fault::FsyncEio(Times::Once) {
                    self.active.remove(i);
                }
                true
            }
            None => false,
        }
    }

    /// The verdict for a write of `len` bytes (consuming a `Once`, spending disk space).
    pub(crate) fn write(&mut self, len: usize) -> WriteVerdict {
        for i in 0..self.active.len() {
            match self.active[i] {
                Fault::WriteError { errno, times } => {
                    if times == Times::Once {
                        self.active.remove(i);
                    }
                    return WriteVerdict::Fail(errno);
                }
                Fault::NoSpaceAfter(room) => {
                    if room == 0 {
                        return WriteVerdict::Fail(libc::ENOSPC);
                    }
                    let n = usize::try_from(room).unwrap_or(usize::MAX).min(len);
                    self.active[i] = Fault::NoSpaceAfter(room - n as u64);
                    return WriteVerdict::Write(n);
                }
                Fault::ShortWrite(times) if len > 1 => {
                    if times == Times::Once {
                        self.active.remove(i);
                    }
                    return WriteVerdict::Write(len / 2);
                }
                _ => {}
            }
        }
        WriteVerdict::Write(len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn once_fires_once_and_always_until_cleared() {
        let mut f = Faults::default();
        assert!(!f.fsync_fails());
        f.set(Fault::FsyncEio(Times::Once));
        assert!(f.fsync_fails());
        assert!(!f.fsync_fails());
        f.set(Fault::FsyncEio(Times::Always));
        assert!(f.fsync_fails() && f.fsync_fails());
        f.clear();
        assert!(!f.fsync_fails());

        f.set(Fault::WriteError {
            errno: libc::EIO,
            times: Times::Once,
        });
        assert_eq!(f.write(10), WriteVerdict::Fail(libc::EIO));
        assert_eq!(f.write(10), WriteVerdict::Write(10));
    }

    #[test]
    fn the_disk_fills_in_the_middle_of_a_write() {
        let mut f = Faults::default();
        f.set(Fault::NoSpaceAfter(15));
        assert_eq!(f.write(10), WriteVerdict::Write(10));
        assert_eq!(f.write(10), WriteVerdict::Write(5));
        assert_eq!(f.write(10), WriteVerdict::Fail(libc::ENOSPC));
        assert_eq!(f.write(1), WriteVerdict::Fail(libc::ENOSPC));
    }

    #[test]
    fn a_short_write_stores_half() {
        let mut f = Faults::default();
        f.set(Fault::ShortWrite(Times::Once));
        assert_eq!(f.write(1), WriteVerdict::Write(1));
        assert_eq!(f.write(9), WriteVerdict::Write(4));
        assert_eq!(f.write(9), WriteVerdict::Write(9));
    }
}
