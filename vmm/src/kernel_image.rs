//! What a kernel image needs before it is loaded: read the ELF64 header and
//! program headers (never the segments) and compute the guest-physical
//! range its PT_LOAD segments occupy, so that `pacer validate` can refuse a
//! `memory_mib` too small for the image instead of the loader failing later
//! with "Unable to read kernel image".
//!
//! It applies the rules of the loader `pacer run` uses (linux-loader's ELF
//! loader, called by `boot`) and a few of its own, so that an image it
//! accepts also loads: the program header size is exactly 56 bytes and the
//! table follows the file header; the entry point is at or above 1 MiB;
//! every PT_LOAD segment lies at or above 1 MiB (below are the boot
//! structures) and its bytes are inside the file (a truncated image is
//! refused here, not half-loaded); a segment occupies the larger of its
//! file and memory sizes. Every field is bounds-checked; a hostile header
//! gives an error, never a panic or a huge allocation.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// ELF program header type of a loadable segment.
pub(crate) const PT_LOAD: u32 = 1;
/// x86-64.
pub(crate) const EM_X86_64: u16 = 62;
/// Size of the ELF64 file header and of one ELF64 program header.
pub(crate) const EHDR_SIZE: usize = 64;
pub(crate) const PHDR_SIZE: usize = 56;
/// Program headers read at most (the format allows 65535).
const MAX_PHDRS: usize = 4096;
/// ELF program header type of a note.
const PT_NOTE: u32 = 4;
/// Lowest address of the entry point and of any segment (the boot
/// structures live below; `boot::HIMEM_START`).
pub const MIN_LOAD_ADDR: u64 = 0x10_0000;

/// Errors of this module.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KernelImageError {
    #[error("cannot read it: {0}")]
    Io(String),
    #[error("not an ELF file (only ELF64 kernels boot directly)")]
    NotElf,
    #[error("not a little-endian ELF64 file")]
    NotElf64,
    #[error("not an x86-64 ELF (e_machine {0}, want 62)")]
    NotX86_64(u16),
    #[error("bad program header table ({0})")]
    BadPhdrs(String),
    #[error("no loadable (PT_LOAD) segment")]
    NoLoad,
    #[error("segment at {addr:#x} + {size:#x} overflows the address space")]
    Overflow { addr: u64, size: u64 },
    #[error("the entry point {0:#x} is below 1 MiB")]
    LowEntry(u64),
    #[error("a segment at {0:#x} lies below 1 MiB, where the boot structures are")]
    LowSegment(u64),
    #[error("a segment's {size} bytes at file offset {offset:#x} lie beyond the end of the file ({len} bytes): a truncated image?")]
    Truncated { offset: u64, size: u64, len: u64 },
}

/// The memory an image needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageExtent {
    /// Lowest guest-physical address of a PT_LOAD segment.
    pub load_start: u64,
    /// One past the highest byte of a PT_LOAD segment (p_paddr + p_memsz).
    pub load_end: u64,
    pub entry: u64,
    /// PT_NOTE segments (the loader parses them for a PVH entry).
    pub notes: usize,
}

impl ImageExtent {
    /// Guest RAM (MiB) the image needs: every segment below the end of RAM.
    pub fn min_memory_mib(&self) -> u64 {
        self.load_end.div_ceil(1 << 20)
    }
}

fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}
fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}
fn u64_at(b: &[u8], o: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[o..o + 8]);
    u64::from_le_bytes(a)
}

/// The extent of the ELF64 x86-64 image in `bytes` (header and program
/// headers; the segments themselves need not be present).
pub fn parse_extent(read: &mut (impl Read + Seek)) -> Result<ImageExtent, KernelImageError> {
    let io = |e: std::io::Error| KernelImageError::Io(e.to_string());
    let mut ehdr = [0u8; EHDR_SIZE];
    let mut got = 0;
    while got < EHDR_SIZE {
        match read.read(&mut ehdr[got..]).map_err(io)? {
            0 => break,
            n => got += n,
        }
    }
    if got < 4 || &ehdr[0..4] != b"\x7fELF" {
        return Err(KernelImageError::NotElf);
    }
    if got < EHDR_SIZE || ehdr[4] != 2 || ehdr[5] != 1 {
        return Err(KernelImageError::NotElf64);
    }
    let machine = u16_at(&ehdr, 18);
    if machine != EM_X86_64 {
        return Err(KernelImageError::NotX86_64(machine));
    }
    let entry = u64_at(&ehdr, 24);
    let phoff = u64_at(&ehdr, 32);
    let phentsize = u16_at(&ehdr, 54) as usize;
    let phnum = u16_at(&ehdr, 56) as usize;
    if phnum == 0 {
        return Err(KernelImageError::NoLoad);
    }
    if phentsize != PHDR_SIZE {
        return Err(KernelImageError::BadPhdrs(format!(
            "entry size {phentsize}, want {PHDR_SIZE}"
        )));
    }
    if phoff < EHDR_SIZE as u64 {
        return Err(KernelImageError::BadPhdrs(format!(
            "table at offset {phoff:#x}, inside the file header"
        )));
    }
    if entry < MIN_LOAD_ADDR {
        return Err(KernelImageError::LowEntry(entry));
    }
    if phnum > MAX_PHDRS {
        return Err(KernelImageError::BadPhdrs(format!("{phnum} entries")));
    }
    read.seek(SeekFrom::Start(phoff)).map_err(io)?;
    let mut table = vec![0u8; phentsize * phnum];
    read.read_exact(&mut table).map_err(|e| {
        KernelImageError::BadPhdrs(format!("{phnum} entries at offset {phoff:#x}: {e}"))
    })?;
    let file_len = read.seek(SeekFrom::End(0)).map_err(io)?;
    let mut extent: Option<(u64, u64)> = None;
    let mut notes = 0;
    for ph in table.chunks_exact(phentsize) {
        match u32_at(ph, 0) {
            PT_LOAD => {}
            PT_NOTE => {
                notes += 1;
                continue;
            }
            _ => continue,
        }
        let offset = u64_at(ph, 8);
        let paddr = u64_at(ph, 24);
        let filesz = u64_at(ph, 32);
        let memsz = u64_at(ph, 40);
        if filesz > 0 && offset.checked_add(filesz).is_none_or(|end| end > file_len) {
            return Err(KernelImageError::Truncated {
                offset,
                size: filesz,
                len: file_len,
            });
        }
        let size = filesz.max(memsz);
        if paddr < MIN_LOAD_ADDR && size > 0 {
            return Err(KernelImageError::LowSegment(paddr));
        }
        let end = paddr
            .checked_add(size)
            .ok_or(KernelImageError::Overflow { addr: paddr, size })?;
        extent = Some(match extent {
            None => (paddr, end),
            Some((s, e)) => (s.min(paddr), e.max(end)),
        });
    }
    let (load_start, load_end) = extent.ok_or(KernelImageError::NoLoad)?;
    Ok(ImageExtent {
        load_start,
        load_end,
        entry,
        notes,
    })
}

/// [`parse_extent`] of the file at `path`.
pub fn image_extent(path: &Path) -> Result<ImageExtent, KernelImageError> {
    let mut f = std::fs::File::open(path).map_err(|e| KernelImageError::Io(e.to_string()))?;
    parse_extent(&mut f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_images::elf_with_loads;
    use std::io::Cursor;

    #[test]
    fn extent_of_loads() {
        let img = elf_with_loads(&[(0x10_0000, 0x1000), (0x20_0000, 0x30_0000)]);
        let e = parse_extent(&mut Cursor::new(img)).unwrap();
        assert_eq!((e.load_start, e.load_end), (0x10_0000, 0x50_0000));
        assert_eq!(e.min_memory_mib(), 5);
    }

    #[test]
    fn hostile_headers_are_errors() {
        assert_eq!(
            parse_extent(&mut Cursor::new(b"MZ".to_vec())),
            Err(KernelImageError::NotElf)
        );
        let mut img = elf_with_loads(&[(u64::MAX, 2)]);
        assert!(matches!(
            parse_extent(&mut Cursor::new(img.clone())),
            Err(KernelImageError::Overflow { .. })
        ));
        assert_eq!(
            parse_extent(&mut Cursor::new(elf_with_loads(&[(0x8000, 0x1000)]))),
            Err(KernelImageError::LowSegment(0x8000))
        );
        // File bytes beyond the end of the file.
        let mut short = elf_with_loads(&[(0x10_0000, 0x1000)]);
        short[64 + 32..64 + 40].copy_from_slice(&0x1000u64.to_le_bytes());
        assert!(matches!(
            parse_extent(&mut Cursor::new(short)),
            Err(KernelImageError::Truncated { .. })
        ));
        let mut low_entry = elf_with_loads(&[(0x10_0000, 0x1000)]);
        low_entry[24..32].copy_from_slice(&0x7c00u64.to_le_bytes());
        assert_eq!(
            parse_extent(&mut Cursor::new(low_entry)),
            Err(KernelImageError::LowEntry(0x7c00))
        );
        // Program headers past the end of the file.
        img[32..40].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(matches!(
            parse_extent(&mut Cursor::new(img)),
            Err(KernelImageError::BadPhdrs(_)) | Err(KernelImageError::Io(_))
        ));
        assert_eq!(
            parse_extent(&mut Cursor::new(elf_with_loads(&[]))),
            Err(KernelImageError::NoLoad)
        );
    }
}
