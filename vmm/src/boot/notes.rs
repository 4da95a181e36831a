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

const PT_NOTE: u32 = 4;
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
pub(crate) mod tests {
    use super::*;

    pub(crate) fn note(name: &[u8], kind: u32, desc: &[u8]) -> Vec<u8> {
        let mut n = Vec::new();
        n.extend_from_slice(&(name.len() as u32 + 1).to_le_bytes());
        n.extend_from_slice(&(desc.len() as u32).to_le_bytes());
        n.extend_from_slice(&kind.to_le_bytes());
        n.extend_from_slice(name);
        n.push(0);
        n.resize(n.len().next_multiple_of(4), 0);
        n.extend_from_slice(desc);
        n.resize(n.len().next_multiple_of(4), 0);
        n
    }

    /// An ELF64 x86-64 header, one PT_NOTE program header, then `notes`.
    pub(crate) fn elf64_with_notes(notes: &[u8]) -> Vec<u8> {
        let mut e = vec![0u8; 64 + 56];
        e[0..4].copy_from_slice(b"\x7fELF");
        e[4] = 2;
        e[5] = 1;
        e[18] = 62;
        e[0x20..0x28].copy_from_slice(&64u64.to_le_bytes());
        e[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        e[0x38..0x3a].copy_from_slice(&1u16.to_le_bytes());
        let ph = &mut e[64..];
        ph[0..4].copy_from_slice(&PT_NOTE.to_le_bytes());
        ph[0x08..0x10].copy_from_slice(&120u64.to_le_bytes());
        ph[0x20..0x28].copy_from_slice(&(notes.len() as u64).to_le_bytes());
        e.extend_from_slice(notes);
        e
    }

    /// A vmlinux stand-in: "Linux" notes, the entry at 16 MiB and one
    /// PT_LOAD of `memsz` bytes there (no file bytes: all bss).
    pub(crate) fn vmlinux(memsz: u64) -> Vec<u8> {
        let notes = note(b"Linux", 0x100, b"6.1.0\0");
        let mut e = vec![0u8; 64 + 2 * 56];
        e[0..4].copy_from_slice(b"\x7fELF");
        e[4] = 2;
        e[5] = 1;
        e[18] = 62;
        e[0x18..0x20].copy_from_slice(&0x100_0000u64.to_le_bytes());
        e[0x20..0x28].copy_from_slice(&64u64.to_le_bytes());
        e[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        e[0x38..0x3a].copy_from_slice(&2u16.to_le_bytes());
        let load = &mut e[64..120];
        load[0..4].copy_from_slice(&1u32.to_le_bytes()); // PT_LOAD
        load[0x18..0x20].copy_from_slice(&0x100_0000u64.to_le_bytes());
        load[0x28..0x30].copy_from_slice(&memsz.to_le_bytes());
        let ph = &mut e[120..];
        ph[0..4].copy_from_slice(&PT_NOTE.to_le_bytes());
        ph[0x08..0x10].copy_from_slice(&(64u64 + 2 * 56).to_le_bytes());
        ph[0x20..0x28].copy_from_slice(&(notes.len() as u64).to_le_bytes());
        e.extend_from_slice(&notes);
        e
    }

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
