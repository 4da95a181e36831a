//! The "newc" cpio format (SVR4, no CRC), the one the Linux kernel unpacks
//! as an initramfs: a writer and a reader.
//!
//! Every entry is a 110-byte ASCII header — the magic `070701` and thirteen
//! 8-digit hex fields (inode, mode, uid, gid, nlink, mtime, file size,
//! device major/minor, rdev major/minor, name size including its NUL, and a
//! checksum that is 0 in this variant) — then the NUL-terminated name,
//! padded with NULs to a multiple of 4 bytes counted from the header start,
//! then the data (a symlink's data is its target), padded to a multiple of
//! 4. The archive ends with an entry named `TRAILER!!!`.
//!
//! Writing the format here (rather than running `cpio` or `find`) lets the
//! image carry device nodes such as /dev/console and root-owned files
//! without the builder being root, and makes the image reproducible: fixed
//! inode numbers, owner 0:0, one fixed mtime.

use std::io::{self, Write};

const MAGIC: &[u8; 6] = b"070701";
const HEADER_LEN: usize = 110;
const TRAILER: &str = "TRAILER!!!";

/// File type bits of `mode` (as in `st_mode`).
pub const S_IFMT: u32 = 0o170000;
pub const S_IFDIR: u32 = 0o040000;
pub const S_IFREG: u32 = 0o100000;
pub const S_IFLNK: u32 = 0o120000;
pub const S_IFCHR: u32 = 0o020000;

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum CpioError {
    #[error("cpio: entry name {0:?} is empty, absolute, too long or contains NUL")]
    BadName(String),
    #[error("cpio: entry {0:?} is larger than the format's 4 GiB limit")]
    TooLarge(String),
    #[error("cpio: truncated archive at byte {0}")]
    Truncated(usize),
    #[error("cpio: bad magic at byte {0} (not a newc archive)")]
    BadMagic(usize),
    #[error("cpio: bad header field {field} at byte {offset}")]
    BadField { field: &'static str, offset: usize },
    #[error("cpio: no TRAILER!!! entry")]
    NoTrailer,
    #[error("cpio: {0}")]
    Io(#[from] io::Error),
}

/// What an entry is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File(Vec<u8>),
    Symlink(String),
    CharDevice { major: u32, minor: u32 },
}

/// One entry to write: a relative path (`bin/busybox`, no leading `/`),
/// permission bits (`0o755`) and what it is. Owner is always 0:0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub path: String,
    pub perm: u32,
    pub kind: Kind,
}

impl Entry {
    pub fn dir(path: &str, perm: u32) -> Self {
        Self {
            path: path.into(),
            perm,
            kind: Kind::Dir,
        }
    }
    pub fn file(path: &str, perm: u32, data: Vec<u8>) -> Self {
        Self {
            path: path.into(),
            perm,
            kind: Kind::File(data),
        }
    }
    pub fn symlink(path: &str, target: &str) -> Self {
        Self {
            path: path.into(),
            perm: 0o777,
            kind: Kind::Symlink(target.into()),
        }
    }
    pub fn char_device(path: &str, perm: u32, major: u32, minor: u32) -> Self {
        Self {
            path: path.into(),
            perm,
            kind: Kind::CharDevice { major, minor },
        }
    }

    /// Full `st_mode`: type bits plus permission bits.
    pub fn mode(&self) -> u32 {
        let ty = match self.kind {
            Kind::Dir => S_IFDIR,
            Kind::File(_) => S_IFREG,
            Kind::Symlink(_) => S_IFLNK,
            Kind::CharDevice { .. } => S_IFCHR,
        };
        ty | (self.perm & 0o7777)
    }

    fn data(&self) -> &[u8] {
        match &self.kind {
            Kind::File(d) => d,
            Kind::Symlink(t) => t.as_bytes(),
            _ => &[],
        }
    }
}

fn pad4(n: usize) -> usize {
    (4 - n % 4) % 4
}

/// Streams entries into a newc archive.
pub struct NewcWriter<W: Write> {
    out: W,
    next_ino: u32,
    mtime: u32,
}

impl<W: Write> NewcWriter<W> {
    /// `mtime` is written into every entry (seconds since the epoch).
    pub fn new(out: W, mtime: u32) -> Self {
        Self {
            out,
            next_ino: 1,
            mtime,
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn header(
        &mut self,
        name: &str,
        mode: u32,
        nlink: u32,
        size: u32,
        rdev: (u32, u32),
    ) -> Result<(), CpioError> {
        let ino = if name == TRAILER { 0 } else { self.next_ino };
        self.next_ino += 1;
        let namesize = name.len() + 1;
        let fields = [
            ino,
            mode,
            0, // uid
            0, // gid
            nlink,
            self.mtime,
            size,
            0, // devmajor
            0, // devminor
            rdev.0,
            rdev.1,
            namesize as u32,
            0, // check
        ];
        let mut h = Vec::with_capacity(HEADER_LEN + namesize + 3);
        h.extend_from_slice(MAGIC);
        for f in fields {
            h.extend_from_slice(format!("{f:08x}").as_bytes());
        }
        h.extend_from_slice(name.as_bytes());
        h.push(0);
        h.resize(h.len() + pad4(HEADER_LEN + namesize), 0);
        self.out.write_all(&h)?;
        Ok(())
    }

    /// Append one entry. Parents must have been written before (the kernel
    /// does not create missing directories).
    pub fn add(&mut self, e: &Entry) -> Result<(), CpioError> {
        let ok_name = !e.path.is_empty()
            && !e.path.starts_with('/')
            && !e.path.contains('\0')
            && e.path.len() < 4096
            && e.path != TRAILER;
        if !ok_name {
            return Err(CpioError::BadName(e.path.clone()));
        }
        let data = e.data();
        let size = u32::try_from(data.len()).map_err(|_| CpioError::TooLarge(e.path.clone()))?;
        let rdev = match e.kind {
            Kind::CharDevice { major, minor } => (major, minor),
            _ => (0, 0),
        };
        let nlink = if matches!(e.kind, Kind::Dir) { 2 } else { 1 };
        self.header(&e.path, e.mode(), nlink, size, rdev)?;
        self.out.write_all(data)?;
        self.out.write_all(&[0u8; 3][..pad4(data.len())])?;
        Ok(())
    }

    /// Write the trailer and hand back the sink.
    pub fn finish(mut self) -> Result<W, CpioError> {
        self.header(TRAILER, 0, 1, 0, (0, 0))?;
        self.out.flush()?;
        Ok(self.out)
    }
}

/// One entry read back from an archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadEntry {
    pub name: String,
    /// Full `st_mode` (type and permission bits).
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub mtime: u32,
    pub rdev_major: u32,
    pub rdev_minor: u32,
    pub data: Vec<u8>,
}

impl ReadEntry {
    pub fn file_type(&self) -> u32 {
        self.mode & S_IFMT
    }
    pub fn perm(&self) -> u32 {
        self.mode & 0o7777
    }
}

fn hex_field(data: &[u8], at: usize, field: &'static str) -> Result<u32, CpioError> {
    let bad = || CpioError::BadField { field, offset: at };
    let s = std::str::from_utf8(&data[at..at + 8]).map_err(|_| bad())?;
    u32::from_str_radix(s, 16).map_err(|_| bad())
}

/// Parse a whole (uncompressed) newc archive, up to its trailer.
pub fn read_newc(data: &[u8]) -> Result<Vec<ReadEntry>, CpioError> {
    let mut at = 0usize;
    let mut out = Vec::new();
    loop {
        if data.len() < at + HEADER_LEN {
            return if at >= data.len() {
                Err(CpioError::NoTrailer)
            } else {
                Err(CpioError::Truncated(at))
            };
        }
        if &data[at..at + 6] != MAGIC {
            return Err(CpioError::BadMagic(at));
        }
        let f = |i: usize, name| hex_field(data, at + 6 + 8 * i, name);
        let mode = f(1, "mode")?;
        let uid = f(2, "uid")?;
        let gid = f(3, "gid")?;
        let mtime = f(5, "mtime")?;
        let size = f(6, "filesize")? as usize;
        let rdev_major = f(9, "rdevmajor")?;
        let rdev_minor = f(10, "rdevminor")?;
        let namesize = f(11, "namesize")? as usize;
        let name_at = at + HEADER_LEN;
        if namesize == 0 || data.len() < name_at + namesize {
            return Err(CpioError::Truncated(at));
        }
        let name_bytes = &data[name_at..name_at + namesize - 1];
        let name = String::from_utf8_lossy(name_bytes).into_owned();
        let data_at = name_at + namesize + pad4(HEADER_LEN + namesize);
        let end = data_at
            .checked_add(size)
            .filter(|&e| e <= data.len())
            .ok_or(CpioError::Truncated(at))?;
        if name == TRAILER {
            return Ok(out);
        }
        out.push(ReadEntry {
            name,
            mode,
            uid,
            gid,
            mtime,
            rdev_major,
            rdev_minor,
            data: data[data_at..end].to_vec(),
        });
        at = end + pad4(size);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_layout_matches_the_newc_spec() {
        let mut w = NewcWriter::new(Vec::new(), 0x1234);
        w.add(&Entry::file("a", 0o644, b"xyz".to_vec())).unwrap();
        let bytes = w.finish().unwrap();
        // header: magic + 13 fields of 8 hex digits
        assert_eq!(&bytes[..6], b"070701");
        assert_eq!(&bytes[6..14], b"00000001", "inode 1");
        assert_eq!(&bytes[14..22], b"000081a4", "S_IFREG | 0644");
        assert_eq!(&bytes[46..54], b"00001234", "mtime");
        assert_eq!(&bytes[54..62], b"00000003", "file size");
        assert_eq!(&bytes[94..102], b"00000002", "name size incl. NUL");
        // name "a\0" at 110, padded to 112 (multiple of 4), data at 112
        assert_eq!(&bytes[110..112], b"a\0");
        assert_eq!(&bytes[112..115], b"xyz");
        assert_eq!(bytes[115], 0, "data padded to 116");
        assert_eq!(&bytes[116..122], b"070701", "trailer header follows");
        assert_eq!(bytes.len() % 4, 0);
    }

    #[test]
    fn round_trip_every_kind() {
        let entries = vec![
            Entry::dir("dev", 0o755),
            Entry::char_device("dev/console", 0o600, 5, 1),
            Entry::dir("bin", 0o755),
            Entry::file("bin/tool", 0o755, (0..=255u8).collect()),
            Entry::symlink("bin/sh", "/bin/tool"),
            Entry::file("empty", 0o644, Vec::new()),
        ];
        let mut w = NewcWriter::new(Vec::new(), 7);
        for e in &entries {
            w.add(e).unwrap();
        }
        let bytes = w.finish().unwrap();
        let back = read_newc(&bytes).unwrap();
        assert_eq!(back.len(), entries.len());
        for (e, r) in entries.iter().zip(&back) {
            assert_eq!(r.name, e.path);
            assert_eq!(r.mode, e.mode());
            assert_eq!(r.data, e.data());
            assert_eq!((r.uid, r.gid, r.mtime), (0, 0, 7));
        }
        assert_eq!((back[1].rdev_major, back[1].rdev_minor), (5, 1));
        assert_eq!(back[1].file_type(), S_IFCHR);
        assert_eq!(back[4].file_type(), S_IFLNK);
        assert_eq!(back[4].data, b"/bin/tool");
    }

    #[test]
    fn bad_names_are_refused() {
        let mut w = NewcWriter::new(Vec::new(), 0);
        for bad in ["", "/abs", "TRAILER!!!", "a\0b"] {
            assert!(matches!(
                w.add(&Entry::dir(bad, 0o755)),
                Err(CpioError::BadName(_))
            ));
        }
    }

    #[test]
    fn reader_rejects_garbage_without_panicking() {
        let mut w = NewcWriter::new(Vec::new(), 0);
        w.add(&Entry::file("f", 0o644, vec![1; 100])).unwrap();
        let good = w.finish().unwrap();
        assert!(matches!(read_newc(b"hello"), Err(CpioError::Truncated(0))));
        assert!(matches!(
            read_newc(&[b'x'; 200]),
            Err(CpioError::BadMagic(0))
        ));
        assert!(matches!(
            read_newc(&good[..150]),
            Err(CpioError::Truncated(0))
        ));
        let mut no_trailer = good.clone();
        no_trailer.truncate(112 + 100);
        assert!(matches!(read_newc(&no_trailer), Err(CpioError::NoTrailer)));
        let mut bad_hex = good.clone();
        bad_hex[14] = b'z';
        assert!(matches!(
            read_newc(&bad_hex),
            Err(CpioError::BadField { field: "mode", .. })
        ));
        // every prefix parses or fails cleanly
        for n in 0..good.len() {
            let _ = read_newc(&good[..n]);
        }
    }
}
