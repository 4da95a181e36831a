//! The ELF kernel loader with hostile images: headers built from the input
//! (entry, program header offset, count and size, segment types, offsets,
//! addresses and sizes) and raw mutated bytes, loaded through
//! `vmm::boot::elf::load_kernel` (linux-loader) into 8 MiB of guest RAM, and
//! the same image through `vmm::kernel_image` (what `validate` checks).
//! Also the kernel command line builder with any text. Invariants: no
//! panic; an image the loader accepts has the entry `kernel_image` reads.

use crate::driver::Target;
use arbitrary::{Arbitrary, Unstructured};
use std::path::PathBuf;
use vmm::boot::elf::{build_cmdline, load_kernel};
use vmm::kernel_image::image_extent;

/// One program header, from the input.
#[derive(Debug, Arbitrary)]
struct Phdr {
    /// Keep the segment consistent (a PT_LOAD whose bytes are in the
    /// file, at a plausible address), or take the fields as they come.
    sane: bool,
    kind: u8,
    offset: u16,
    paddr: Paddr,
    filesz: u16,
    memsz: Size,
}

#[derive(Debug, Arbitrary)]
enum Paddr {
    /// Near the usual 1 MiB load address.
    Low(u32),
    Any(u64),
}

#[derive(Debug, Arbitrary)]
enum Size {
    Small(u16),
    Any(u64),
}

/// Header fields that break the rules, when present.
#[derive(Debug, Arbitrary)]
struct HeaderNoise {
    phoff: Option<u16>,
    phentsize: Option<u16>,
    phnum_extra: Option<u16>,
    class: Option<u8>,
    machine: Option<u16>,
}

#[derive(Debug, Arbitrary)]
struct Image {
    entry_offset: u32,
    entry_any: Option<u64>,
    noise: Option<HeaderNoise>,
    phdrs: Vec<Phdr>,
    tail: Vec<u8>,
}

fn build(img: &Image) -> Vec<u8> {
    let noise = img.noise.as_ref();
    let phoff = noise.and_then(|n| n.phoff).map_or(64, u64::from);
    let phdrs = &img.phdrs[..img.phdrs.len().min(16)];
    let phnum = phdrs.len() as u16;
    let entry = img
        .entry_any
        .unwrap_or(0x10_0000 + u64::from(img.entry_offset % 0x10_0000));
    let mut e = vec![0u8; 64];
    e[0..4].copy_from_slice(b"\x7fELF");
    e[4] = noise.and_then(|n| n.class).unwrap_or(2);
    e[5] = 1;
    e[6] = 1;
    e[16..18].copy_from_slice(&2u16.to_le_bytes());
    e[18..20].copy_from_slice(&noise.and_then(|n| n.machine).unwrap_or(62).to_le_bytes());
    e[24..32].copy_from_slice(&entry.to_le_bytes());
    e[32..40].copy_from_slice(&phoff.to_le_bytes());
    e[52..54].copy_from_slice(&64u16.to_le_bytes());
    e[54..56].copy_from_slice(&noise.and_then(|n| n.phentsize).unwrap_or(56).to_le_bytes());
    let extra = noise.and_then(|n| n.phnum_extra).unwrap_or(0);
    e[56..58].copy_from_slice(&phnum.wrapping_add(extra).to_le_bytes());
    e.resize((phoff as usize).max(64), 0);
    let data_start = (e.len() + 56 * phdrs.len()) as u64;
    let tail_len = img.tail.len() as u64;
    for p in phdrs {
        let mut ph = [0u8; 56];
        let (kind, offset, filesz) = if p.sane {
            let off = u64::from(p.offset) % (tail_len + 1);
            (
                1,
                data_start + off,
                u64::from(p.filesz) % (tail_len - off + 1),
            )
        } else {
            (
                u32::from(p.kind % 5),
                u64::from(p.offset),
                u64::from(p.filesz),
            )
        };
        let paddr = match p.paddr {
            Paddr::Low(a) => 0x10_0000 + u64::from(a % 0x70_0000),
            Paddr::Any(a) if !p.sane => a,
            Paddr::Any(a) => 0x10_0000 + a % 0x70_0000,
        };
        let memsz = match p.memsz {
            Size::Small(s) => u64::from(s).max(filesz),
            Size::Any(s) if !p.sane => s,
            Size::Any(s) => (s % 0x1_0000).max(filesz),
        };
        ph[0..4].copy_from_slice(&kind.to_le_bytes());
        ph[8..16].copy_from_slice(&offset.to_le_bytes());
        ph[16..24].copy_from_slice(&paddr.to_le_bytes());
        ph[24..32].copy_from_slice(&paddr.to_le_bytes());
        ph[32..40].copy_from_slice(&filesz.to_le_bytes());
        ph[40..48].copy_from_slice(&memsz.to_le_bytes());
        e.extend_from_slice(&ph);
    }
    e.extend_from_slice(&img.tail);
    e
}

/// Guest RAM the images are loaded into.
const RAM_MIB: u64 = 8;

pub struct ElfTarget {
    path: PathBuf,
    mem: vm_memory::GuestMemoryMmap,
    /// Inputs validate accepted, so that the loader had to accept them too.
    pub cross_checked: u64,
}

impl ElfTarget {
    pub fn new() -> ElfTarget {
        let path = super::scratch("elf").join("kernel.elf");
        let mem = vmm::memory::create_guest_memory(RAM_MIB).expect("guest memory");
        ElfTarget {
            path,
            mem,
            cross_checked: 0,
        }
    }
}

impl Drop for ElfTarget {
    fn drop(&mut self) {
        if let Some(dir) = self.path.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

impl Default for ElfTarget {
    fn default() -> Self {
        Self::new()
    }
}

impl Target for ElfTarget {
    fn name(&self) -> &'static str {
        "elf"
    }

    fn max_len(&self) -> usize {
        2048
    }

    fn seeds(&self) -> Vec<Vec<u8>> {
        // A first byte 1: the rest is the image itself; 0: bytes that
        // `arbitrary` builds an image from.
        let raw = |img: Vec<u8>| [vec![1u8], img].concat();
        vec![
            raw(super::tiny_elf(0x10_0000, &[0xf4], 0x1000)),
            raw(super::tiny_elf(0x10_0000, &[0x90; 64], 0x40_0000)),
            raw(super::tiny_elf(0x7f_f000, &[0xf4; 8], 0x2000)),
            [vec![0u8], (0..=255).collect()].concat(),
        ]
    }

    fn run(&mut self, data: &[u8]) -> Result<(), String> {
        // Odd first byte: the raw bytes are the image; even: a built one.
        let (image, rest) = match data.split_first() {
            Some((b, rest)) if b % 2 == 1 => (rest.to_vec(), &[][..]),
            Some((_, rest)) => {
                let mut u = Unstructured::new(rest);
                match Image::arbitrary(&mut u) {
                    Ok(img) => (build(&img), u.take_rest()),
                    Err(_) => (rest.to_vec(), &[][..]),
                }
            }
            None => (Vec::new(), &[][..]),
        };
        std::fs::write(&self.path, &image).map_err(|e| format!("scratch file: {e}"))?;
        let extent = image_extent(&self.path);
        let loaded = load_kernel(&self.mem, &self.path, None);
        // What `validate` accepts (and fits the RAM) must load: validate
        // is a faithful precheck of the loader. (The loader accepts more:
        // no PT_LOAD, another machine; validate refuses those.)
        if let Ok(x) = &extent {
            let fits = x.load_end <= RAM_MIB << 20;
            if fits && x.notes == 0 {
                self.cross_checked += 1;
                match &loaded {
                    Ok(l) if l.entry == x.entry => {}
                    other => {
                        return Err(format!(
                            "validate accepts {x:?} but the loader gives {other:?}"
                        ))
                    }
                }
            }
        }
        let text = String::from_utf8_lossy(rest);
        let _ = build_cmdline(&text, 2_000_000, 4);
        Ok(())
    }
}
