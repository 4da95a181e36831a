//! Multiboot (version 1) loading, as the Multiboot Specification 0.6.96
//! describes it and as GRUB and QEMU's `-kernel` implement it.
//!
//! 1. The header: a 4-byte aligned {magic 0x1BADB002, flags, checksum}
//!    within the first 8 KiB of the image, magic + flags + checksum = 0.
//!    Flag bits 0-15 are requirements (0: page-align modules, 1: memory
//!    information, 2: video mode — Pacer has no display and ignores it);
//!    unknown requirement bits make the image unbootable, as the
//!    specification demands. Flag 16 (the "a.out kludge") means the header
//!    itself carries the load addresses.
//! 2. The image: with flag 16, the file from the header's position back to
//!    `load_addr` is copied to `load_addr..load_end_addr` and
//!    `load_end_addr..bss_end_addr` is zeroed; otherwise the image must be an
//!    ELF32 i386 executable whose PT_LOAD segments go to their physical
//!    addresses (the entry point translated from virtual to physical).
//! 3. Modules are copied page-aligned right after the image (where GRUB and
//!    QEMU put them); each carries a string: its path, then its arguments.
//! 4. The multiboot information (flags, mem_lower/mem_upper, the command
//!    line, the module list, the memory map from the same e820 map the ELF
//!    path hands over, the boot loader's name) goes to low memory at
//!    0x10000 (`layout.rs`), clear of the image, of page 0 and of the BIOS
//!    area. Every range the loader fills is checked against the others.
//! 5. The boot vCPU enters in 32-bit protected mode (`regs.rs`): EAX
//!    0x2BADB002, EBX the information's address.
//!
//! The command line is the kernel's path followed by the configured
//! `cmdline`, as GRUB and QEMU pass it: a guest's argv[0] is its name
//! (kvm-unit-tests reads its test arguments from argv[1] on).

use super::layout::{HIMEM_START, MULTIBOOT_INFO_END, MULTIBOOT_INFO_START, PAGE_SIZE};
use crate::memory::{e820_map, ram_size, E820_RAM, MMIO_GAP_START};
use std::path::{Path, PathBuf};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

pub const MULTIBOOT_HEADER_MAGIC: u32 = 0x1BAD_B002;
/// The header must lie within this many bytes of the image's start.
pub const MULTIBOOT_SEARCH_LIMIT: usize = 8192;

pub const FLAG_PAGE_ALIGN: u32 = 1 << 0;
pub const FLAG_MEMORY_INFO: u32 = 1 << 1;
pub const FLAG_VIDEO_MODE: u32 = 1 << 2;
pub const FLAG_AOUT_KLUDGE: u32 = 1 << 16;
/// Requirement bits this loader understands.
const KNOWN_REQUIREMENTS: u32 = FLAG_PAGE_ALIGN | FLAG_MEMORY_INFO | FLAG_VIDEO_MODE;
const REQUIREMENT_MASK: u32 = 0xffff;

/// Flags of the multiboot information.
pub const INFO_MEMORY: u32 = 1 << 0;
pub const INFO_CMDLINE: u32 = 1 << 2;
pub const INFO_MODS: u32 = 1 << 3;
pub const INFO_MEM_MAP: u32 = 1 << 6;
pub const INFO_BOOT_LOADER_NAME: u32 = 1 << 9;
/// Size of the information block (up to and including the framebuffer
/// fields of the specification; all beyond `boot_loader_name` stay zero).
pub const INFO_SIZE: u64 = 116;
/// Offsets of the fields Pacer fills.
pub const INFO_FLAGS: u64 = 0;
pub const INFO_MEM_LOWER: u64 = 4;
pub const INFO_MEM_UPPER: u64 = 8;
pub const INFO_CMDLINE_ADDR: u64 = 16;
pub const INFO_MODS_COUNT: u64 = 20;
pub const INFO_MODS_ADDR: u64 = 24;
pub const INFO_MMAP_LENGTH: u64 = 44;
pub const INFO_MMAP_ADDR: u64 = 48;
pub const INFO_BOOT_LOADER_NAME_ADDR: u64 = 64;
/// One memory-map entry: u32 size (20, not counting itself), u64 base, u64
/// length, u32 type.
pub const MMAP_ENTRY_SIZE: u64 = 24;
/// One module entry: u32 start, u32 end, u32 string, u32 reserved.
pub const MODULE_ENTRY_SIZE: u64 = 16;

const BOOT_LOADER_NAME: &str = "pacer";

const EM_386: u16 = 3;
const PT_LOAD: u32 = 1;
const ELF32_EHDR_SIZE: usize = 52;
const ELF32_PHDR_SIZE: usize = 32;

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum MultibootError {
    #[error("multiboot header at offset {offset:#x} has a bad checksum")]
    BadChecksum { offset: usize },
    #[error("multiboot header at offset {offset:#x} is cut off by the end of the file")]
    Truncated { offset: usize },
    #[error("multiboot header requires features Pacer does not know (flag bits {bits:#x})")]
    UnsupportedRequirement { bits: u32 },
    #[error("no multiboot header in the first 8 KiB")]
    NoHeader,
    #[error(
        "not an ELF32 i386 executable and no a.out-kludge addresses in the multiboot header: {0}"
    )]
    NotElf32(String),
    #[error("bad a.out-kludge addresses in the multiboot header: {0}")]
    BadAout(String),
    #[error("ELF32 image: {0}")]
    BadElf(String),
    #[error("{what} at {start:#x}..{end:#x} {problem}")]
    Placement {
        what: String,
        start: u64,
        end: u64,
        problem: String,
    },
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write {what} to guest memory: {source}")]
    Write {
        what: &'static str,
        source: vm_memory::GuestMemoryError,
    },
}

/// The a.out-kludge address fields of a header (flag 16).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AoutKludge {
    pub header_addr: u32,
    pub load_addr: u32,
    pub load_end_addr: u32,
    pub bss_end_addr: u32,
    pub entry_addr: u32,
}

/// A multiboot header found in an image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MultibootHeader {
    /// Byte offset of the header in the file.
    pub offset: usize,
    pub flags: u32,
    pub aout: Option<AoutKludge>,
}

fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    let s = b.get(off..off.checked_add(4)?)?;
    Some(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

fn u16_at(b: &[u8], off: usize) -> Option<u16> {
    let s = b.get(off..off.checked_add(2)?)?;
    Some(u16::from_le_bytes([s[0], s[1]]))
}

/// Find the multiboot header in `image` (its first bytes suffice). A magic
/// number with a bad checksum is skipped (it may be data), but reported if
/// no valid header follows.
pub fn find_header(image: &[u8]) -> Result<Option<MultibootHeader>, MultibootError> {
    let limit = image.len().min(MULTIBOOT_SEARCH_LIMIT);
    let mut bad_checksum = None;
    for offset in (0..limit.saturating_sub(11)).step_by(4) {
        if u32_at(image, offset) != Some(MULTIBOOT_HEADER_MAGIC) {
            continue;
        }
        let (Some(flags), Some(checksum)) = (u32_at(image, offset + 4), u32_at(image, offset + 8))
        else {
            continue;
        };
        if MULTIBOOT_HEADER_MAGIC
            .wrapping_add(flags)
            .wrapping_add(checksum)
            != 0
        {
            bad_checksum.get_or_insert(offset);
            continue;
        }
        let unknown = flags & REQUIREMENT_MASK & !KNOWN_REQUIREMENTS;
        if unknown != 0 {
            return Err(MultibootError::UnsupportedRequirement { bits: unknown });
        }
        let aout = if flags & FLAG_AOUT_KLUDGE != 0 {
            let f = |i: usize| u32_at(image, offset + 12 + 4 * i);
            match (f(0), f(1), f(2), f(3), f(4)) {
                (Some(h), Some(l), Some(le), Some(be), Some(e)) => Some(AoutKludge {
                    header_addr: h,
                    load_addr: l,
                    load_end_addr: le,
                    bss_end_addr: be,
                    entry_addr: e,
                }),
                _ => return Err(MultibootError::Truncated { offset }),
            }
        } else {
            None
        };
        return Ok(Some(MultibootHeader {
            offset,
            flags,
            aout,
        }));
    }
    match bad_checksum {
        Some(offset) => Err(MultibootError::BadChecksum { offset }),
        None => Ok(None),
    }
}

/// One piece of the image to copy: file bytes at `file_offset`, `file_len`
/// of them, to `addr`, followed by zeroes up to `mem_len`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    pub addr: u64,
    pub file_offset: usize,
    pub file_len: usize,
    pub mem_len: u64,
}

/// What the image asks to be loaded: its segments and entry point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImagePlan {
    pub segments: Vec<Segment>,
    pub entry: u32,
}

/// Work out where the image goes (no memory touched).
pub fn plan_image(image: &[u8], header: &MultibootHeader) -> Result<ImagePlan, MultibootError> {
    match header.aout {
        Some(a) => plan_aout(image, header.offset, &a),
        None => plan_elf32(image),
    }
}

fn plan_aout(image: &[u8], offset: usize, a: &AoutKludge) -> Result<ImagePlan, MultibootError> {
    let bad = |m: String| Err(MultibootError::BadAout(m));
    if a.load_addr > a.header_addr {
        return bad(format!(
            "load_addr {:#x} is above header_addr {:#x}",
            a.load_addr, a.header_addr
        ));
    }
    let back = (a.header_addr - a.load_addr) as usize;
    let Some(file_offset) = offset.checked_sub(back) else {
        return bad(format!(
            "header_addr - load_addr ({back:#x}) reaches before the start of the file"
        ));
    };
    let file_len = if a.load_end_addr == 0 {
        image.len() - file_offset
    } else if a.load_end_addr <= a.load_addr {
        return bad(format!(
            "load_end_addr {:#x} is not above load_addr {:#x}",
            a.load_end_addr, a.load_addr
        ));
    } else {
        ((a.load_end_addr - a.load_addr) as usize).min(image.len() - file_offset)
    };
    let load_end = u64::from(a.load_addr) + file_len as u64;
    let mem_end = if a.bss_end_addr == 0 {
        load_end
    } else if u64::from(a.bss_end_addr) < load_end {
        return bad(format!(
            "bss_end_addr {:#x} is below the end of the loaded data {load_end:#x}",
            a.bss_end_addr
        ));
    } else {
        u64::from(a.bss_end_addr)
    };
    Ok(ImagePlan {
        segments: vec![Segment {
            addr: u64::from(a.load_addr),
            file_offset,
            file_len,
            mem_len: mem_end - u64::from(a.load_addr),
        }],
        entry: a.entry_addr,
    })
}

fn plan_elf32(image: &[u8]) -> Result<ImagePlan, MultibootError> {
    let not = |m: &str| Err(MultibootError::NotElf32(m.into()));
    if image.len() < ELF32_EHDR_SIZE || &image[0..4] != b"\x7fELF" {
        return not("no ELF header");
    }
    if image[4] != 1 || image[5] != 1 {
        return not("not a little-endian ELF32 file");
    }
    if u16_at(image, 18) != Some(EM_386) {
        return not("e_machine is not EM_386");
    }
    let bad = |m: String| MultibootError::BadElf(m);
    let field = |off| u32_at(image, off).ok_or_else(|| bad("truncated header".into()));
    let entry = field(24)?;
    let phoff = field(28)? as usize;
    let phentsize = u16_at(image, 42).unwrap_or(0) as usize;
    let phnum = u16_at(image, 44).unwrap_or(0) as usize;
    if phentsize < ELF32_PHDR_SIZE {
        return Err(bad(format!("e_phentsize {phentsize} is too small")));
    }
    let mut segments = Vec::new();
    let mut entry_phys = None;
    for i in 0..phnum {
        let at = phentsize
            .checked_mul(i)
            .and_then(|o| o.checked_add(phoff))
            .ok_or_else(|| bad("program header table out of range".into()))?;
        let ph = |o: usize| {
            u32_at(image, at + o).ok_or_else(|| bad(format!("program header {i} is cut off")))
        };
        if ph(0)? != PT_LOAD {
            continue;
        }
        let (offset, vaddr, paddr, filesz, memsz) = (ph(4)?, ph(8)?, ph(12)?, ph(16)?, ph(20)?);
        if memsz < filesz {
            return Err(bad(format!("segment {i}: p_memsz < p_filesz")));
        }
        if (offset as usize).saturating_add(filesz as usize) > image.len() {
            return Err(bad(format!("segment {i} extends past the end of the file")));
        }
        if (vaddr..vaddr.saturating_add(memsz)).contains(&entry) {
            entry_phys = Some((entry - vaddr).wrapping_add(paddr));
        }
        segments.push(Segment {
            addr: u64::from(paddr),
            file_offset: offset as usize,
            file_len: filesz as usize,
            mem_len: u64::from(memsz),
        });
    }
    if segments.is_empty() {
        return Err(bad("no PT_LOAD segment".into()));
    }
    Ok(ImagePlan {
        segments,
        entry: entry_phys.unwrap_or(entry),
    })
}

/// A module to hand to the guest: a file and its arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Module {
    pub path: PathBuf,
    pub cmdline: String,
}

impl Module {
    /// The module's string in the information: its path, then arguments.
    pub fn string(&self) -> String {
        join_words(&self.path.display().to_string(), &self.cmdline)
    }
}

fn join_words(first: &str, rest: &str) -> String {
    if rest.trim().is_empty() {
        first.to_string()
    } else {
        format!("{first} {}", rest.trim())
    }
}

/// Ranges of guest memory already handed out, to refuse overlaps.
#[derive(Debug, Default)]
struct Claims(Vec<(u64, u64, String)>);

impl Claims {
    fn claim(
        &mut self,
        what: String,
        start: u64,
        end: u64,
        limit: u64,
    ) -> Result<(), MultibootError> {
        let err = |problem: String| MultibootError::Placement {
            what: what.clone(),
            start,
            end,
            problem,
        };
        if end > limit {
            return Err(err(format!("does not fit in guest RAM below {limit:#x}")));
        }
        if let Some((_, _, other)) = self.0.iter().find(|(s, e, _)| start < *e && *s < end) {
            return Err(err(format!("overlaps {other}")));
        }
        self.0.push((start, end, what));
        Ok(())
    }
}

/// Where everything went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MultibootLoad {
    pub entry: u32,
    pub info_addr: u32,
    /// End of the highest image segment (bss included).
    pub image_end: u64,
    /// (start, end) of each module.
    pub modules: Vec<(u64, u64)>,
    /// The command line handed over.
    pub cmdline: String,
}

/// Bump allocator over the information area.
struct InfoArea {
    next: u64,
}

impl InfoArea {
    fn alloc(&mut self, len: u64, align: u64) -> Result<u64, MultibootError> {
        let at = self.next.next_multiple_of(align);
        let end = at + len;
        if end > MULTIBOOT_INFO_END {
            return Err(MultibootError::Placement {
                what: "multiboot information".into(),
                start: MULTIBOOT_INFO_START,
                end,
                problem: format!("does not fit below {MULTIBOOT_INFO_END:#x}"),
            });
        }
        self.next = end;
        Ok(at)
    }
}

fn write(
    mem: &GuestMemoryMmap,
    what: &'static str,
    addr: u64,
    b: &[u8],
) -> Result<(), MultibootError> {
    mem.write_slice(b, GuestAddress(addr))
        .map_err(|source| MultibootError::Write { what, source })
}

fn cstring(s: &str) -> Vec<u8> {
    let mut v: Vec<u8> = s.bytes().filter(|b| *b != 0).collect();
    v.push(0);
    v
}

/// Load a multiboot image already read into `image` (with `header` found
/// in it), its modules (given as their bytes), and write the information.
pub fn load_image(
    mem: &GuestMemoryMmap,
    image: &[u8],
    header: &MultibootHeader,
    cmdline: &str,
    modules: &[(String, Vec<u8>)],
) -> Result<MultibootLoad, MultibootError> {
    let ram = ram_size(mem);
    let low_end = ram.min(MMIO_GAP_START);
    let plan = plan_image(image, header)?;
    let mut claims = Claims::default();
    claims.claim(
        "the multiboot information area".into(),
        MULTIBOOT_INFO_START,
        MULTIBOOT_INFO_END,
        low_end,
    )?;
    let mut image_end = 0;
    for (i, s) in plan.segments.iter().enumerate() {
        let end = s.addr + s.mem_len;
        claims.claim(format!("image segment {i}"), s.addr, end, low_end)?;
        let data = &image[s.file_offset..s.file_offset + s.file_len];
        write(mem, "the image", s.addr, data)?;
        // Guest RAM starts zeroed; clear the bss anyway, the image's
        // promise does not depend on how the VMM got its memory.
        let zeroes = [0u8; 4096];
        let mut at = s.addr + s.file_len as u64;
        while at < end {
            let n = (end - at).min(zeroes.len() as u64) as usize;
            write(mem, "the image's bss", at, &zeroes[..n])?;
            at += n as u64;
        }
        image_end = image_end.max(end);
    }

    let mut placed = Vec::with_capacity(modules.len());
    let mut next = image_end.max(HIMEM_START);
    for (i, (name, data)) in modules.iter().enumerate() {
        let start = next.next_multiple_of(PAGE_SIZE);
        let end = start + data.len() as u64;
        claims.claim(format!("module {i} ({name})"), start, end, low_end)?;
        write(mem, "a module", start, data)?;
        placed.push((start, end));
        next = end.max(start + 1);
    }

    let mut area = InfoArea {
        next: MULTIBOOT_INFO_START,
    };
    let info = area.alloc(INFO_SIZE, 8)?;
    let map = e820_map(ram);
    let mut mmap = Vec::with_capacity(map.len() * MMAP_ENTRY_SIZE as usize);
    for e in &map {
        mmap.extend_from_slice(&((MMAP_ENTRY_SIZE - 4) as u32).to_le_bytes());
        mmap.extend_from_slice(&e.addr.to_le_bytes());
        mmap.extend_from_slice(&e.size.to_le_bytes());
        mmap.extend_from_slice(&e.kind.to_le_bytes());
    }
    let mmap_addr = area.alloc(mmap.len() as u64, 8)?;
    write(mem, "the memory map", mmap_addr, &mmap)?;
    let name = cstring(BOOT_LOADER_NAME);
    let name_addr = area.alloc(name.len() as u64, 1)?;
    write(mem, "the boot loader name", name_addr, &name)?;
    let cl = cstring(cmdline);
    let cmdline_addr = area.alloc(cl.len() as u64, 1)?;
    write(mem, "the command line", cmdline_addr, &cl)?;
    let mods_addr = area.alloc(MODULE_ENTRY_SIZE * modules.len() as u64, 8)?;
    for (i, ((name, _), (start, end))) in modules.iter().zip(&placed).enumerate() {
        let s = cstring(name);
        let s_addr = area.alloc(s.len() as u64, 1)?;
        write(mem, "a module string", s_addr, &s)?;
        let mut e = Vec::with_capacity(16);
        for v in [*start as u32, *end as u32, s_addr as u32, 0] {
            e.extend_from_slice(&v.to_le_bytes());
        }
        write(
            mem,
            "the module list",
            mods_addr + MODULE_ENTRY_SIZE * i as u64,
            &e,
        )?;
    }

    // mem_lower: KiB of RAM from 0; mem_upper: KiB of RAM from 1 MiB up to
    // the first hole.
    let ram_from = |start: u64| {
        map.iter()
            .find(|e| e.kind == E820_RAM && e.addr == start)
            .map(|e| (e.size / 1024) as u32)
            .unwrap_or(0)
    };
    let mut block = vec![0u8; INFO_SIZE as usize];
    let mut put = |off: u64, v: u32| {
        block[off as usize..off as usize + 4].copy_from_slice(&v.to_le_bytes());
    };
    let mut flags = INFO_MEMORY | INFO_CMDLINE | INFO_MEM_MAP | INFO_BOOT_LOADER_NAME;
    if !modules.is_empty() {
        flags |= INFO_MODS;
    }
    put(INFO_FLAGS, flags);
    put(INFO_MEM_LOWER, ram_from(0));
    put(INFO_MEM_UPPER, ram_from(HIMEM_START));
    put(INFO_CMDLINE_ADDR, cmdline_addr as u32);
    put(INFO_MODS_COUNT, modules.len() as u32);
    put(INFO_MODS_ADDR, mods_addr as u32);
    put(INFO_MMAP_LENGTH, mmap.len() as u32);
    put(INFO_MMAP_ADDR, mmap_addr as u32);
    put(INFO_BOOT_LOADER_NAME_ADDR, name_addr as u32);
    write(mem, "the multiboot information", info, &block)?;

    Ok(MultibootLoad {
        entry: plan.entry,
        info_addr: info as u32,
        image_end,
        modules: placed,
        cmdline: cmdline.to_string(),
    })
}

fn read(path: &Path) -> Result<Vec<u8>, MultibootError> {
    std::fs::read(path).map_err(|source| MultibootError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// Load the multiboot kernel at `kernel` with its command line and modules.
pub fn load(
    mem: &GuestMemoryMmap,
    kernel: &Path,
    cmdline: &str,
    modules: &[Module],
) -> Result<MultibootLoad, MultibootError> {
    let image = read(kernel)?;
    let header = find_header(&image)?.ok_or(MultibootError::NoHeader)?;
    let mods = modules
        .iter()
        .map(|m| Ok((m.string(), read(&m.path)?)))
        .collect::<Result<Vec<_>, MultibootError>>()?;
    let cmdline = join_words(&kernel.display().to_string(), cmdline);
    load_image(mem, &image, &header, &cmdline, &mods)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::memory::create_guest_memory;

    pub(crate) fn header(flags: u32) -> Vec<u8> {
        let mut h = Vec::new();
        for v in [
            MULTIBOOT_HEADER_MAGIC,
            flags,
            0u32.wrapping_sub(MULTIBOOT_HEADER_MAGIC.wrapping_add(flags)),
        ] {
            h.extend_from_slice(&v.to_le_bytes());
        }
        h
    }

    /// An ELF32 i386 image with one PT_LOAD of `code` at `paddr` (plus
    /// `bss` zero bytes) and a multiboot header at the start of `code`.
    pub(crate) fn elf32(paddr: u32, code: &[u8], bss: u32) -> Vec<u8> {
        let off = (ELF32_EHDR_SIZE + ELF32_PHDR_SIZE) as u32;
        let mut e = Vec::new();
        e.extend_from_slice(b"\x7fELF");
        e.extend_from_slice(&[1, 1, 1, 0]);
        e.extend_from_slice(&[0; 8]);
        e.extend_from_slice(&2u16.to_le_bytes()); // ET_EXEC
        e.extend_from_slice(&EM_386.to_le_bytes());
        e.extend_from_slice(&1u32.to_le_bytes());
        e.extend_from_slice(&(paddr + 12).to_le_bytes()); // e_entry: after the header
        e.extend_from_slice(&(ELF32_EHDR_SIZE as u32).to_le_bytes()); // e_phoff
        e.extend_from_slice(&0u32.to_le_bytes()); // e_shoff
        e.extend_from_slice(&0u32.to_le_bytes()); // e_flags
        e.extend_from_slice(&(ELF32_EHDR_SIZE as u16).to_le_bytes());
        e.extend_from_slice(&(ELF32_PHDR_SIZE as u16).to_le_bytes());
        e.extend_from_slice(&1u16.to_le_bytes()); // e_phnum
        e.extend_from_slice(&[0; 6]); // shentsize, shnum, shstrndx
        for v in [
            PT_LOAD,
            off,
            paddr,
            paddr,
            code.len() as u32,
            code.len() as u32 + bss,
            5,
            0x1000,
        ] {
            e.extend_from_slice(&v.to_le_bytes());
        }
        e.extend_from_slice(code);
        e
    }

    #[test]
    fn header_found_at_an_aligned_offset() {
        let mut img = vec![0u8; 64];
        img.extend(header(FLAG_PAGE_ALIGN | FLAG_MEMORY_INFO));
        img.extend([0u8; 32]);
        let h = find_header(&img).unwrap().unwrap();
        assert_eq!(h.offset, 64);
        assert_eq!(h.flags, 3);
        assert_eq!(h.aout, None);
    }

    #[test]
    fn header_not_found() {
        assert_eq!(find_header(&[0u8; 9000]).unwrap(), None);
        assert_eq!(find_header(&[]).unwrap(), None);
        // Beyond the first 8 KiB it does not count.
        let mut img = vec![0u8; MULTIBOOT_SEARCH_LIMIT];
        img.extend(header(0));
        assert_eq!(find_header(&img).unwrap(), None);
        // Not 4-byte aligned: not a header.
        let mut img = vec![0u8; 2];
        img.extend(header(0));
        assert_eq!(find_header(&img).unwrap(), None);
    }

    #[test]
    fn bad_checksum_reported_unless_a_good_header_follows() {
        let mut bad = header(0);
        bad[8] ^= 1;
        let e = find_header(&bad).unwrap_err();
        assert!(
            matches!(e, MultibootError::BadChecksum { offset: 0 }),
            "{e}"
        );
        let mut img = bad.clone();
        img.extend(header(0));
        assert_eq!(find_header(&img).unwrap().unwrap().offset, 12);
    }

    #[test]
    fn unknown_requirement_refused() {
        let e = find_header(&header(1 << 5)).unwrap_err();
        assert!(matches!(
            e,
            MultibootError::UnsupportedRequirement { bits: 0x20 }
        ));
        // Video mode is a known (ignored) requirement; bit 17+ are not
        // requirements.
        assert!(find_header(&header(FLAG_VIDEO_MODE | (1 << 20)))
            .unwrap()
            .is_some());
    }

    /// A raw binary with the a.out kludge: header at file offset 16, the
    /// file loads at 0x200000.
    fn aout_image() -> Vec<u8> {
        let mut img = vec![0x90u8; 16];
        img.extend(header(FLAG_AOUT_KLUDGE));
        for v in [0x20_0010u32, 0x20_0000, 0x20_0040, 0x20_1000, 0x20_0030] {
            img.extend_from_slice(&v.to_le_bytes());
        }
        img.extend([0xf4u8; 32]); // up to 0x40 bytes
        img
    }

    #[test]
    fn aout_kludge_addresses_are_used() {
        let img = aout_image();
        let h = find_header(&img).unwrap().unwrap();
        let a = h.aout.unwrap();
        assert_eq!((a.load_addr, a.entry_addr), (0x20_0000, 0x20_0030));
        let p = plan_image(&img, &h).unwrap();
        assert_eq!(p.entry, 0x20_0030);
        assert_eq!(
            p.segments,
            vec![Segment {
                addr: 0x20_0000,
                file_offset: 0,
                file_len: 0x40,
                mem_len: 0x1000
            }]
        );
        // Cut off before the address fields end.
        assert!(matches!(
            find_header(&img[..40]),
            Err(MultibootError::Truncated { offset: 16 })
        ));
        // header_addr - load_addr reaching before the file.
        let mut bad = img.clone();
        bad[28..32].copy_from_slice(&0x20_0020u32.to_le_bytes());
        let h = find_header(&bad).unwrap().unwrap();
        assert!(matches!(
            plan_image(&bad, &h),
            Err(MultibootError::BadAout(_))
        ));
    }

    fn u32_in(mem: &GuestMemoryMmap, a: u64) -> u32 {
        mem.read_obj(GuestAddress(a)).unwrap()
    }

    fn string_in(mem: &GuestMemoryMmap, a: u64) -> String {
        let mut s = Vec::new();
        for i in 0.. {
            let b: u8 = mem.read_obj(GuestAddress(a + i)).unwrap();
            if b == 0 {
                break;
            }
            s.push(b);
        }
        String::from_utf8(s).unwrap()
    }

    #[test]
    fn info_reads_back_from_guest_memory() {
        let mem = create_guest_memory(64).unwrap();
        let mut code = header(FLAG_PAGE_ALIGN);
        code.extend([0xf4u8; 100]);
        let img = elf32(0x40_0000, &code, 0x2000);
        let h = find_header(&img).unwrap().unwrap();
        let mods = vec![
            ("env NR_CPUS=2".to_string(), b"TEST_DEVICE=0\n".to_vec()),
            ("blob".to_string(), vec![7u8; 5000]),
        ];
        let l = load_image(&mem, &img, &h, "vmexit.flat cpuid", &mods).unwrap();
        assert_eq!(l.entry, 0x40_000c);
        assert_eq!(l.image_end, 0x40_0000 + code.len() as u64 + 0x2000);
        // The image and its bss.
        assert_eq!(u32_in(&mem, 0x40_0000), MULTIBOOT_HEADER_MAGIC);
        assert_eq!(u32_in(&mem, l.image_end - 4), 0);
        // Modules page-aligned after the image, in order.
        assert_eq!(l.modules[0].0, l.image_end.next_multiple_of(4096));
        assert_eq!(l.modules[0].1, l.modules[0].0 + 14);
        assert_eq!(l.modules[1].0, l.modules[0].1.next_multiple_of(4096));

        let info = u64::from(l.info_addr);
        assert_eq!(info, MULTIBOOT_INFO_START);
        let flags = u32_in(&mem, info + INFO_FLAGS);
        assert_eq!(
            flags,
            INFO_MEMORY | INFO_CMDLINE | INFO_MODS | INFO_MEM_MAP | INFO_BOOT_LOADER_NAME
        );
        assert_eq!(u32_in(&mem, info + INFO_MEM_LOWER), 640);
        assert_eq!(u32_in(&mem, info + INFO_MEM_UPPER), 63 * 1024);
        let cl = u32_in(&mem, info + INFO_CMDLINE_ADDR);
        assert_eq!(string_in(&mem, cl.into()), "vmexit.flat cpuid");
        let name = u32_in(&mem, info + INFO_BOOT_LOADER_NAME_ADDR);
        assert_eq!(string_in(&mem, name.into()), "pacer");

        // Memory map: the e820 map, 24-byte entries with size 20.
        let len = u32_in(&mem, info + INFO_MMAP_LENGTH) as u64;
        let at = u32_in(&mem, info + INFO_MMAP_ADDR) as u64;
        let map = e820_map(64 << 20);
        assert_eq!(len, MMAP_ENTRY_SIZE * map.len() as u64);
        for (i, e) in map.iter().enumerate() {
            let p = at + MMAP_ENTRY_SIZE * i as u64;
            assert_eq!(u32_in(&mem, p), 20);
            let base: u64 = mem.read_obj(GuestAddress(p + 4)).unwrap();
            let size: u64 = mem.read_obj(GuestAddress(p + 12)).unwrap();
            assert_eq!((base, size, u32_in(&mem, p + 20)), (e.addr, e.size, e.kind));
        }

        // Module list.
        assert_eq!(u32_in(&mem, info + INFO_MODS_COUNT), 2);
        let mods_at = u32_in(&mem, info + INFO_MODS_ADDR) as u64;
        for (i, (name, data)) in mods.iter().enumerate() {
            let e = mods_at + 16 * i as u64;
            let (start, end) = (u32_in(&mem, e) as u64, u32_in(&mem, e + 4) as u64);
            assert_eq!((start, end), l.modules[i]);
            assert_eq!(string_in(&mem, u32_in(&mem, e + 8).into()), *name);
            let mut back = vec![0u8; data.len()];
            mem.read_slice(&mut back, GuestAddress(start)).unwrap();
            assert_eq!(&back, data);
        }
        // Every structure the VMM wrote is inside the information area.
        for a in [cl, name, mods_at as u32, at as u32] {
            assert!((MULTIBOOT_INFO_START..MULTIBOOT_INFO_END).contains(&u64::from(a)));
        }
    }

    #[test]
    fn overlaps_and_oversize_refused() {
        let mem = create_guest_memory(8).unwrap();
        let code = header(0);
        // An image inside the information area.
        let img = elf32(0x2_0000, &code, 0);
        let h = find_header(&img).unwrap().unwrap();
        let e = load_image(&mem, &img, &h, "", &[]).unwrap_err();
        assert!(
            e.to_string()
                .contains("overlaps the multiboot information area"),
            "{e}"
        );
        // An image beyond RAM.
        let img = elf32(0x80_0000, &code, 0);
        let h = find_header(&img).unwrap().unwrap();
        let e = load_image(&mem, &img, &h, "", &[]).unwrap_err();
        assert!(e.to_string().contains("does not fit in guest RAM"), "{e}");
        // A module too big for RAM.
        let img = elf32(0x10_0000, &code, 0);
        let h = find_header(&img).unwrap().unwrap();
        let big = vec![("big".to_string(), vec![0u8; 8 << 20])];
        let e = load_image(&mem, &img, &h, "", &big).unwrap_err();
        assert!(e.to_string().contains("module 0 (big)"), "{e}");
    }

    #[test]
    fn elf64_without_kludge_is_not_loadable() {
        let mut img = vec![0u8; 64];
        img[0..4].copy_from_slice(b"\x7fELF");
        img[4] = 2;
        img[5] = 1;
        img[18] = 62;
        img.extend(header(0));
        let h = find_header(&img).unwrap().unwrap();
        assert!(matches!(
            plan_image(&img, &h),
            Err(MultibootError::NotElf32(_))
        ));
    }
}
