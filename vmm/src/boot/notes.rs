//! ELF notes of an ELF64 kernel, read without loading it: what tells a
//! Linux vmlinux (notes owned by "Linux": its build salt and LTO marker,
//! present in every kernel since 5.x) from another ELF64 kernel such as the
//! bench guest, and the PVH entry (the Xen note `XEN_ELFNOTE_PHYS32_ENTRY`)
//! for the record.
//!
//! The notes of a vmlinux sit tens of MiB into the file, so the reader gets
//! a `read_at(offset, len)` function instead of the whole file; every
//! offset and size comes from the file and is checked (a bad file is "no
//! notes", never a panic).

/// What the notes say.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ElfNotes {
    /// A note owned by "Linux" exists.
    pub linux: bool,
    /// The 32-bit PVH entry point, if a Xen PHYS32_ENTRY note exists.
    pub pvh_entry: Option<u64>,
}

pub(crate) const PT_NOTE: u32 = 4;
const XEN_ELFNOTE_PHYS32_ENTRY: u32 = 18;
/// Program headers read at most (a kernel has a handful).
const MAX_PHDRS: usize = 64;
/// Bytes of one PT_NOTE segment read at most.
const MAX_NOTE_SEGMENT: usize = 64 << 10;

fn le16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}
fn le32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn le64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Scan the notes of the ELF64 file whose ELF header is `ehdr` (its first
/// 64 bytes or more); `read_at` reads `len` bytes at a file offset (None
/// past the end).
pub fn scan(ehdr: &[u8], read_at: &mut dyn FnMut(u64, usize) -> Option<Vec<u8>>) -> ElfNotes {
    let mut out = ElfNotes::default();
    let (Some(phoff), Some(phentsize), Some(phnum)) =
        (le64(ehdr, 0x20), le16(ehdr, 0x36), le16(ehdr, 0x38))
    else {
        return out;
    };
    let (phentsize, phnum) = (phentsize as usize, (phnum as usize).min(MAX_PHDRS));
    if phentsize < 56 {
        return out;
    }
    let Some(phdrs) = read_at(phoff, phentsize * phnum) else {
        return out;
    };
    for ph in phdrs.chunks_exact(phentsize) {
        if le32(ph, 0) != Some(PT_NOTE) {
            continue;
        }
        let (Some(off), Some(size)) = (le64(ph, 0x08), le64(ph, 0x20)) else {
            continue;
        };
        let size = (size as usize).min(MAX_NOTE_SEGMENT);
        if let Some(seg) = read_at(off, size) {
            scan_segment(&seg, &mut out);
        }
    }
    out
}

fn scan_segment(seg: &[u8], out: &mut ElfNotes) {
    let mut at = 0usize;
    while let (Some(namesz), Some(descsz), Some(kind)) =
        (le32(seg, at), le32(seg, at + 4), le32(seg, at + 8))
    {
        let name_at = at + 12;
        let desc_at = name_at + (namesz as usize).next_multiple_of(4);
        let next = desc_at + (descsz as usize).next_multiple_of(4);
        let (Some(name), Some(desc)) = (
            seg.get(name_at..name_at + namesz as usize),
            seg.get(desc_at..desc_at + descsz as usize),
        ) else {
            return;
        };
        let owner = name.strip_suffix(&[0]).unwrap_or(name);
        match owner {
            b"Linux" => out.linux = true,
            b"Xen" if kind == XEN_ELFNOTE_PHYS32_ENTRY => {
                out.pvh_entry = match desc.len() {
                    4 => le32(desc, 0).map(u64::from),
                    8 => le64(desc, 0),
                    _ => None,
                }
            }
            _ => {}
        }
        at = next;
    }
}

/// Scan a whole ELF64 image held in memory.
pub fn scan_bytes(image: &[u8]) -> ElfNotes {
    scan(image, &mut |off, len| {
        let start = usize::try_from(off).ok()?;
        image
            .get(start..start.checked_add(len)?)
            .map(<[u8]>::to_vec)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_images::{elf64_with_notes, note};

    #[test]
    fn linux_and_pvh_notes() {
        let mut notes = note(b"Xen", 6, b"linux\0");
        notes.extend(note(
            b"Xen",
            XEN_ELFNOTE_PHYS32_ENTRY,
            &0x0100_0850u32.to_le_bytes(),
        ));
        notes.extend(note(b"GNU", 3, &[1; 20]));
        notes.extend(note(b"Linux", 0x100, b"6.1.0-56-amd64\0"));
        let n = scan_bytes(&elf64_with_notes(&notes));
        assert_eq!(
            n,
            ElfNotes {
                linux: true,
                pvh_entry: Some(0x0100_0850)
            }
        );
        // The bench guest's kind: a PVH note, no Linux note.
        let n = scan_bytes(&elf64_with_notes(&note(
            b"Xen",
            XEN_ELFNOTE_PHYS32_ENTRY,
            &0x10_0040u64.to_le_bytes(),
        )));
        assert_eq!((n.linux, n.pvh_entry), (false, Some(0x10_0040)));
    }

    #[test]
    fn damaged_files_have_no_notes() {
        assert_eq!(scan_bytes(&[]), ElfNotes::default());
        let mut e = elf64_with_notes(&note(b"Linux", 0x100, b"x"));
        // A note whose name runs past the segment.
        e[120..124].copy_from_slice(&1000u32.to_le_bytes());
        assert_eq!(scan_bytes(&e), ElfNotes::default());
        // A segment that starts past the end of the file.
        let mut e = elf64_with_notes(&note(b"Linux", 0x100, b"x"));
        e[64 + 8..64 + 16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(scan_bytes(&e), ElfNotes::default());
        // Absurd program-header counts and sizes.
        let mut e = elf64_with_notes(&[]);
        e[0x36..0x38].copy_from_slice(&8u16.to_le_bytes());
        assert_eq!(scan_bytes(&e), ElfNotes::default());
    }
}
