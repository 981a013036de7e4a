//! Fixing up checksums, so that fuzz inputs get past the frames' CRC into the decoders.

use flockd_aof::record::{FRAME_HEADER_LEN, checksum, length_is_sane};

/// Writes the right checksum into every frame from `from` on that has a sane length and fits.
pub fn seal(buf: &mut [u8], from: usize) {
    let mut at = from;
    while at + FRAME_HEADER_LEN <= buf.len() {
        let len = u32::from_le_bytes(buf[at..at + 4].try_into().unwrap());
        let end = at + FRAME_HEADER_LEN + len as usize;
        if !length_is_sane(len) || end > buf.len() {
            return;
        }
        let crc = checksum(len, &buf[at + FRAME_HEADER_LEN..end]);
        buf[at + 4..at + 8].copy_from_slice(&crc.to_le_bytes());
        at = end;
    }
}
