//! Minimal ELF images built in memory, for tests of this crate and of the
//! `pacer` crate (kernel-image checks, ELF notes, matrices that name a
//! kernel): no file, no toolchain.

/// A minimal ELF64 x86-64 image with the given crate::kernel_image::PT_LOAD (paddr, memsz).
pub fn elf_with_loads(loads: &[(u64, u64)]) -> Vec<u8> {
    let mut b = vec![0u8; crate::kernel_image::EHDR_SIZE];
    b[0..4].copy_from_slice(b"\x7fELF");
    b[4] = 2;
    b[5] = 1;
    b[18..20].copy_from_slice(&crate::kernel_image::EM_X86_64.to_le_bytes());
    b[24..32].copy_from_slice(&0x10_0000u64.to_le_bytes());
    b[32..40].copy_from_slice(&(crate::kernel_image::EHDR_SIZE as u64).to_le_bytes());
    b[54..56].copy_from_slice(&(crate::kernel_image::PHDR_SIZE as u16).to_le_bytes());
    b[56..58].copy_from_slice(&(loads.len() as u16).to_le_bytes());
    for &(paddr, memsz) in loads {
        let mut ph = [0u8; crate::kernel_image::PHDR_SIZE];
        ph[0..4].copy_from_slice(&crate::kernel_image::PT_LOAD.to_le_bytes());
        ph[24..32].copy_from_slice(&paddr.to_le_bytes());
        ph[40..48].copy_from_slice(&memsz.to_le_bytes());
        b.extend_from_slice(&ph);
    }
    b
}

pub fn note(name: &[u8], kind: u32, desc: &[u8]) -> Vec<u8> {
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

/// An ELF64 x86-64 header, one crate::boot::notes::PT_NOTE program header, then `notes`.
pub fn elf64_with_notes(notes: &[u8]) -> Vec<u8> {
    let mut e = vec![0u8; 64 + 56];
    e[0..4].copy_from_slice(b"\x7fELF");
    e[4] = 2;
    e[5] = 1;
    e[18] = 62;
    e[0x20..0x28].copy_from_slice(&64u64.to_le_bytes());
    e[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
    e[0x38..0x3a].copy_from_slice(&1u16.to_le_bytes());
    let ph = &mut e[64..];
    ph[0..4].copy_from_slice(&crate::boot::notes::PT_NOTE.to_le_bytes());
    ph[0x08..0x10].copy_from_slice(&120u64.to_le_bytes());
    ph[0x20..0x28].copy_from_slice(&(notes.len() as u64).to_le_bytes());
    e.extend_from_slice(notes);
    e
}

/// A vmlinux stand-in: "Linux" notes, the entry at 16 MiB and one
/// PT_LOAD of `memsz` bytes there (no file bytes: all bss).
pub fn vmlinux(memsz: u64) -> Vec<u8> {
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
    ph[0..4].copy_from_slice(&crate::boot::notes::PT_NOTE.to_le_bytes());
    ph[0x08..0x10].copy_from_slice(&(64u64 + 2 * 56).to_le_bytes());
    ph[0x20..0x28].copy_from_slice(&(notes.len() as u64).to_le_bytes());
    e.extend_from_slice(&notes);
    e
}
