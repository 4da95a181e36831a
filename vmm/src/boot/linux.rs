//! Booting Linux through its 64-bit boot protocol
//! (Documentation/arch/x86/boot.rst, "64-bit Boot Protocol"), for both
//! kernel formats:
//!
//! - a **bzImage**: linux-loader copies its protected-mode part (the
//!   decompressor and the compressed kernel) to 1 MiB; the 64-bit entry is
//!   0x200 bytes into it (boot protocol 2.12+, `XLF_KERNEL_64`). The setup
//!   header of the file goes into the zero page. The decompressor then runs
//!   in the guest (slow where guest ring 0 is emulated).
//! - an uncompressed **vmlinux** (ELF): linux-loader loads its segments at
//!   their physical addresses and Pacer enters `startup_64` at the ELF
//!   entry with the zero page in RSI, as Firecracker does. Its PVH note
//!   (a 32-bit entry taking an `hvm_start_info`, what QEMU uses) is not
//!   used: the 64-bit entry takes the same zero page as the bzImage path,
//!   starts in the long-mode state the bench guest already uses, and skips
//!   the 32-bit trampoline.
//!
//! Both then see the same machine: the zero page at 0x7000 (`zero_page.rs`:
//! command line, initramfs, e820 map, RSDP), identity-mapped page tables
//! over the first 4 GiB, a GDT with the boot code and data selectors 0x10
//! and 0x18, the ACPI tables (`acpi.rs`, `madt.rs`) and the MP table
//! (`mptable.rs`). Only vCPU 0 starts there; the kernel starts the others
//! with INIT/SIPI, which both interrupt controllers deliver as hardware
//! does.
//!
//! The initramfs is loaded as high as allowed: page-aligned at the top of
//! RAM below the 32-bit MMIO gap and below the kernel's `initrd_addr_max`
//! (a bzImage says; 2 GiB - 1 otherwise, the boot protocol's default), and
//! above the kernel.
//!
//! The command line is what Pacer's platform needs ([`PLATFORM_CMDLINE`]),
//! then the user's `cmdline`, so the user's words win where Linux takes the
//! last occurrence of a parameter.

use super::elf::{load_initrd, write_zero_page_and_tables};
use super::layout::{CMDLINE_ADDR, HIMEM_START, LINUX_ACPI_START, MPTABLE_START};
use super::zero_page::{self, ZeroPage};
use super::{acpi, mptable, BootError, KernelFormat};
use crate::memory::{e820_map, ram_size, MMIO_GAP_START};
use linux_loader::cmdline::Cmdline;
use linux_loader::loader::bootparam::setup_header;
use linux_loader::loader::bzimage::BzImage;
use linux_loader::loader::elf::Elf;
use linux_loader::loader::{load_cmdline, KernelLoader};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use vm_memory::{Address, ByteValued, Bytes, GuestAddress, GuestMemoryMmap};

/// What every Linux guest of Pacer gets on its command line, first:
/// - `console=ttyS0`: the kernel's console is COM1 (0x3F8, ISA IRQ 4),
///   which Pacer captures to `<vm>.console.log`;
/// - `reboot=k`: reboot through the i8042's reset line, which stops the VM.
pub const PLATFORM_CMDLINE: &str = "console=ttyS0 reboot=k";
/// x86 Linux's COMMAND_LINE_SIZE (bytes including the NUL).
pub const LINUX_CMDLINE_MAX: usize = 2048;
/// Boot protocol default for `initrd_addr_max` (before 2.03 and for a
/// header-less vmlinux).
pub const DEFAULT_INITRD_ADDR_MAX: u64 = 0x7fff_ffff;
/// Offset of the 64-bit entry in a bzImage's protected-mode part.
pub const BZIMAGE_64BIT_ENTRY_OFFSET: u64 = 0x200;
/// `xloadflags`: the kernel has the 64-bit entry at 0x200.
pub const XLF_KERNEL_64: u16 = 1 << 0;
/// Where the setup header starts in a bzImage file (and in the zero page).
pub const SETUP_HEADER_OFFSET: u64 = 0x1F1;
/// The 64-bit boot protocol needs 2.12 or later.
pub const MIN_BZIMAGE_PROTOCOL: u16 = 0x020C;

/// Where the kernel went.
#[derive(Debug, Clone, Copy)]
pub struct LoadedLinux {
    /// The 64-bit entry point (guest-physical).
    pub entry: u64,
    pub kernel_end: u64,
    /// The bzImage's setup header (None for a vmlinux).
    pub setup_header: Option<setup_header>,
}

/// The command line: [`PLATFORM_CMDLINE`], then the user's words.
pub fn build_cmdline(user: &str, capacity: usize) -> Result<Cmdline, BootError> {
    let mut cl = Cmdline::new(capacity)?;
    cl.insert_str(PLATFORM_CMDLINE)?;
    if !user.trim().is_empty() {
        cl.insert_str(user.trim())?;
    }
    Ok(cl)
}

fn format_err(path: &Path, reason: impl Into<String>) -> BootError {
    BootError::Format {
        path: path.display().to_string(),
        reason: reason.into(),
    }
}

/// Load the kernel (format already recognised by `inspect`).
pub fn load_kernel(
    mem: &GuestMemoryMmap,
    path: &Path,
    format: KernelFormat,
) -> Result<LoadedLinux, BootError> {
    let mut f = File::open(path).map_err(|source| BootError::Open {
        path: path.display().to_string(),
        source,
    })?;
    let load_err = |source| BootError::LoadKernel {
        path: path.display().to_string(),
        source,
    };
    match format {
        KernelFormat::BzImage => {
            let r = BzImage::load(mem, None, &mut f, Some(GuestAddress(HIMEM_START)))
                .map_err(load_err)?;
            let hdr = r
                .setup_header
                .ok_or_else(|| format_err(path, "bzImage without a setup header"))?;
            check_64bit_entry(&hdr).map_err(|why| format_err(path, why.to_string()))?;
            Ok(LoadedLinux {
                entry: r.kernel_load.raw_value() + BZIMAGE_64BIT_ENTRY_OFFSET,
                kernel_end: r.kernel_end,
                setup_header: Some(hdr),
            })
        }
        KernelFormat::Elf64X86_64 => {
            let r =
                Elf::load(mem, None, &mut f, Some(GuestAddress(HIMEM_START))).map_err(load_err)?;
            Ok(LoadedLinux {
                entry: r.kernel_load.raw_value(),
                kernel_end: r.kernel_end,
                setup_header: None,
            })
        }
        other => Err(format_err(
            path,
            format!("{other:?} is not a Linux kernel format (bzImage or ELF64 vmlinux)"),
        )),
    }
}

/// Does the bzImage header `hdr` have the 64-bit entry Pacer jumps to?
/// Why a bzImage's setup header is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BzImageError {
    #[error("boot protocol {version:#x}, xloadflags {xloadflags:#x}: no 64-bit entry (needs 2.12+ and XLF_KERNEL_64)")]
    No64BitEntry { version: u16, xloadflags: u16 },
    #[error("{file_len} bytes, fewer than its {setup_len} bytes of real-mode setup")]
    Short { file_len: u64, setup_len: u64 },
    #[error("code32_start {0:#x} is below 1 MiB")]
    LowLoad(u64),
    #[error("kernel_alignment {0:#x} overflows")]
    Alignment(u32),
}

pub fn check_64bit_entry(hdr: &setup_header) -> Result<(), BzImageError> {
    let (version, xloadflags) = (hdr.version, hdr.xloadflags);
    if version < MIN_BZIMAGE_PROTOCOL || xloadflags & XLF_KERNEL_64 == 0 {
        return Err(BzImageError::No64BitEntry {
            version,
            xloadflags,
        });
    }
    Ok(())
}

/// What a Linux kernel needs of guest memory, read from its headers
/// without loading it: config validation checks `memory_mib` with it, and
/// [`load`] keeps the initramfs above `kernel_end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Footprint {
    /// One past the highest byte the kernel occupies as it starts: a
    /// bzImage's decompression buffer (`init_size` bytes where the
    /// decompressor puts the kernel), a vmlinux's segments (bss included).
    pub kernel_end: u64,
    /// Highest address + 1 the initramfs may end at ([`initrd_limit`]).
    pub initrd_limit: u64,
}

/// The [`Footprint`] of the Linux kernel file at `path` (a bzImage with
/// the 64-bit entry, or an ELF64 vmlinux the ELF loader accepts).
pub fn footprint(path: &Path) -> Result<Footprint, BootError> {
    let open_err = |source| BootError::Open {
        path: path.display().to_string(),
        source,
    };
    match super::inspect(path)?.format {
        KernelFormat::BzImage => {
            let mut f = File::open(path).map_err(open_err)?;
            let len = f.metadata().map_err(open_err)?.len();
            let mut hdr = setup_header::default();
            f.seek(SeekFrom::Start(SETUP_HEADER_OFFSET))
                .and_then(|_| f.read_exact(hdr.as_mut_slice()))
                .map_err(open_err)?;
            bzimage_footprint(&hdr, len).map_err(|why| format_err(path, why.to_string()))
        }
        KernelFormat::Elf64X86_64 => {
            let extent = crate::kernel_image::image_extent(path)
                .map_err(|why| format_err(path, why.to_string()))?;
            Ok(Footprint {
                kernel_end: extent.load_end,
                initrd_limit: initrd_limit(None),
            })
        }
        other => Err(format_err(
            path,
            format!("{other:?} is not a Linux kernel format (bzImage or ELF64 vmlinux)"),
        )),
    }
}

/// The footprint of a bzImage of `file_len` bytes whose setup header is
/// `hdr`. Its protected-mode part is loaded at `code32_start` (1 MiB); the
/// decompressor writes the kernel at that address rounded up to
/// `kernel_alignment` (a relocatable kernel) but never below
/// `pref_address`, and uses `init_size` bytes from there
/// (Documentation/arch/x86/boot.rst).
pub fn bzimage_footprint(hdr: &setup_header, file_len: u64) -> Result<Footprint, BzImageError> {
    check_64bit_entry(hdr)?;
    let (sects, load, align) = (hdr.setup_sects, hdr.code32_start, hdr.kernel_alignment);
    let (relocatable, pref, init_size) = (hdr.relocatable_kernel, hdr.pref_address, hdr.init_size);
    // The boot protocol: 0 setup sectors means 4.
    let sects = if sects == 0 { 4 } else { u64::from(sects) };
    let setup_len = (sects + 1) * 512;
    let pm_len = file_len.checked_sub(setup_len).ok_or(BzImageError::Short {
        file_len,
        setup_len,
    })?;
    let load = u64::from(load);
    if load < HIMEM_START {
        return Err(BzImageError::LowLoad(load));
    }
    let out = if relocatable != 0 {
        load.checked_next_multiple_of(u64::from(align).max(1))
            .ok_or(BzImageError::Alignment(align))?
            .max(pref)
    } else {
        pref.max(load)
    };
    Ok(Footprint {
        kernel_end: load
            .saturating_add(pm_len)
            .max(out.saturating_add(u64::from(init_size))),
        initrd_limit: initrd_limit(Some(hdr)),
    })
}

/// Highest address + 1 the initramfs may end at.
pub fn initrd_limit(hdr: Option<&setup_header>) -> u64 {
    let max = hdr
        .map(|h| h.initrd_addr_max)
        .filter(|&m| m != 0)
        .map_or(DEFAULT_INITRD_ADDR_MAX, u64::from);
    (max + 1).min(MMIO_GAP_START)
}

/// What [`load`] did.
#[derive(Debug, Clone)]
pub struct LinuxBoot {
    pub entry: u64,
    pub cmdline: String,
    /// (address, size) of the initramfs.
    pub initrd: Option<(u64, u64)>,
}

/// Load a Linux guest: kernel, initramfs, command line, firmware tables,
/// zero page, GDT and page tables.
pub fn load(
    mem: &GuestMemoryMmap,
    kernel: &Path,
    format: KernelFormat,
    initrd: Option<&Path>,
    user_cmdline: &str,
    vcpus: u32,
) -> Result<LinuxBoot, BootError> {
    let fp = footprint(kernel)?;
    let k = load_kernel(mem, kernel, format)?;
    let initrd = match initrd {
        Some(p) => Some(load_initrd(
            mem,
            p,
            k.kernel_end.max(fp.kernel_end),
            fp.initrd_limit,
        )?),
        None => None,
    };
    let capacity = k
        .setup_header
        .map(|h| h.cmdline_size)
        .filter(|&s| s != 0)
        .map_or(LINUX_CMDLINE_MAX, |s| {
            (s as usize + 1).min(LINUX_CMDLINE_MAX)
        });
    let cmdline = build_cmdline(user_cmdline, capacity)?;
    load_cmdline(mem, GuestAddress(CMDLINE_ADDR), &cmdline).map_err(BootError::WriteCmdline)?;
    let text = cmdline
        .as_cstring()
        .map(|c| c.to_string_lossy().into_owned())
        .unwrap_or_default();

    let tables = acpi::linux_tables(vcpus).map_err(|e| format_err(kernel, e.to_string()))?;
    acpi::write(mem, &tables)?;
    let mp = mptable::build(MPTABLE_START, vcpus).map_err(|e| format_err(kernel, e.to_string()))?;
    mem.write_slice(&mp, GuestAddress(MPTABLE_START))
        .map_err(|source| BootError::Write {
            what: "MP table",
            source,
        })?;

    let map = e820_map(ram_size(mem));
    let params = zero_page::build(&ZeroPage {
        setup_header: k.setup_header,
        cmdline_addr: CMDLINE_ADDR,
        cmdline_len: text.len(),
        initrd,
        e820: &map,
        rsdp_addr: LINUX_ACPI_START,
    });
    write_zero_page_and_tables(mem, &params)?;
    Ok(LinuxBoot {
        entry: k.entry,
        cmdline: text,
        initrd,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::boot::layout::ZERO_PAGE_ADDR;
    use crate::memory::create_guest_memory;
    use linux_loader::loader::bootparam::boot_params;

    #[test]
    fn platform_words_come_first() {
        let c = build_cmdline("  ub.passes=1 console=ttyS0,9600 ", 2048).unwrap();
        assert_eq!(
            c.as_cstring().unwrap().to_str().unwrap(),
            "console=ttyS0 reboot=k ub.passes=1 console=ttyS0,9600"
        );
        let c = build_cmdline("", 2048).unwrap();
        assert_eq!(c.as_cstring().unwrap().to_str().unwrap(), PLATFORM_CMDLINE);
        assert!(build_cmdline(&"x".repeat(3000), 2048).is_err());
    }

    #[test]
    fn initrd_limits() {
        assert_eq!(initrd_limit(None), 0x8000_0000);
        let h = setup_header {
            initrd_addr_max: 0x37ff_ffff,
            ..Default::default()
        };
        assert_eq!(initrd_limit(Some(&h)), 0x3800_0000);
        let h = setup_header {
            initrd_addr_max: 0xffff_ffff,
            ..Default::default()
        };
        assert_eq!(initrd_limit(Some(&h)), MMIO_GAP_START);
    }

    /// A minimal bzImage: setup sectors, a header with the 64-bit entry
    /// (a relocatable kernel aligned to 2 MiB that decompresses into 2 MiB:
    /// it occupies memory up to 4 MiB), and a protected-mode part of `pm`
    /// bytes.
    pub(crate) fn bzimage(protocol: u16, xloadflags: u16, pm: usize) -> Vec<u8> {
        let setup_sects = 4usize;
        let mut b = vec![0u8; (setup_sects + 1) * 512 + pm];
        b[0x1F1] = setup_sects as u8;
        b[0x1FE..0x200].copy_from_slice(&[0x55, 0xAA]);
        b[0x202..0x206].copy_from_slice(b"HdrS");
        b[0x206..0x208].copy_from_slice(&protocol.to_le_bytes());
        b[0x211] = 1; // LOADED_HIGH
        b[0x214..0x218].copy_from_slice(&0x10_0000u32.to_le_bytes());
        b[0x22C..0x230].copy_from_slice(&0x7fff_ffffu32.to_le_bytes());
        b[0x236..0x238].copy_from_slice(&xloadflags.to_le_bytes());
        b[0x230..0x234].copy_from_slice(&0x20_0000u32.to_le_bytes()); // kernel_alignment
        b[0x234] = 1; // relocatable_kernel
        b[0x238..0x23C].copy_from_slice(&2047u32.to_le_bytes());
        b[0x258..0x260].copy_from_slice(&0x10_0000u64.to_le_bytes()); // pref_address
        b[0x260..0x264].copy_from_slice(&0x20_0000u32.to_le_bytes()); // init_size
        for (i, x) in b[(setup_sects + 1) * 512..].iter_mut().enumerate() {
            *x = i as u8;
        }
        b
    }

    fn temp_file(tag: &str, bytes: &[u8]) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!("pacer-linux-{tag}-{}", std::process::id()));
        std::fs::write(&p, bytes).unwrap();
        p
    }

    #[test]
    fn bzimage_boot_end_to_end_in_memory() {
        let mem = create_guest_memory(64).unwrap();
        let kernel = temp_file("bz", &bzimage(0x020F, 0x7f, 0x3000));
        let initrd = temp_file("initrd", &[0x5a; 5000]);
        let b = load(
            &mem,
            &kernel,
            KernelFormat::BzImage,
            Some(&initrd),
            "quiet",
            2,
        )
        .unwrap();
        std::fs::remove_file(&kernel).unwrap();
        std::fs::remove_file(&initrd).unwrap();
        assert_eq!(b.entry, 0x10_0200);
        assert_eq!(b.cmdline, "console=ttyS0 reboot=k quiet");
        // The protected-mode part at 1 MiB.
        let first: [u8; 4] = mem.read_obj(GuestAddress(0x10_0000)).unwrap();
        assert_eq!(first, [0, 1, 2, 3]);
        // The initramfs page-aligned at the top of the 64 MiB.
        let (addr, size) = b.initrd.unwrap();
        assert_eq!((addr, size), ((64 << 20) - 0x2000, 5000));
        let x: u8 = mem.read_obj(GuestAddress(addr + 4999)).unwrap();
        assert_eq!(x, 0x5a);
        // The zero page: the file's header, the loader's fields.
        let p: boot_params = mem.read_obj(GuestAddress(ZERO_PAGE_ADDR)).unwrap();
        let (ptr, rd, rs, ldr, rsdp) = (
            p.hdr.cmd_line_ptr,
            p.hdr.ramdisk_image,
            p.hdr.ramdisk_size,
            p.hdr.type_of_loader,
            p.acpi_rsdp_addr,
        );
        assert_eq!(
            (ptr as u64, rd as u64, rs as u64),
            (CMDLINE_ADDR, addr, 5000)
        );
        assert_eq!((ldr, rsdp), (0xFF, 0xE0000));
        assert_eq!(p.hdr.setup_sects, 4);
        let mut cl = vec![0u8; b.cmdline.len() + 1];
        mem.read_slice(&mut cl, GuestAddress(CMDLINE_ADDR)).unwrap();
        assert_eq!(&cl[..b.cmdline.len()], b.cmdline.as_bytes());
        assert_eq!(cl[b.cmdline.len()], 0);
        // The firmware tables are where guests look.
        let rsdp: [u8; 8] = mem.read_obj(GuestAddress(0xE0000)).unwrap();
        assert_eq!(&rsdp, b"RSD PTR ");
        let mpf: [u8; 4] = mem.read_obj(GuestAddress(0xF0000)).unwrap();
        assert_eq!(&mpf, b"_MP_");
    }

    fn header(b: &[u8]) -> setup_header {
        let mut h = setup_header::default();
        let at = SETUP_HEADER_OFFSET as usize;
        h.as_mut_slice()
            .copy_from_slice(&b[at..at + std::mem::size_of::<setup_header>()]);
        h
    }

    #[test]
    fn bzimage_footprint_follows_the_decompressor() {
        let b = bzimage(0x020F, 0x7f, 0x3000);
        let len = b.len() as u64;
        // Loaded at 1 MiB, decompressed at 2 MiB (aligned up), 2 MiB used.
        let fp = bzimage_footprint(&header(&b), len).unwrap();
        assert_eq!(fp.kernel_end, 0x40_0000);
        assert_eq!(fp.initrd_limit, 0x8000_0000);
        // pref_address above the aligned load address wins.
        let mut b2 = b.clone();
        b2[0x258..0x260].copy_from_slice(&0x100_0000u64.to_le_bytes());
        let fp = bzimage_footprint(&header(&b2), len).unwrap();
        assert_eq!(fp.kernel_end, 0x120_0000);
        // A protected-mode part larger than the buffer sets the end.
        let big = bzimage(0x020F, 0x7f, 0x50_0000);
        let fp = bzimage_footprint(&header(&big), big.len() as u64).unwrap();
        assert_eq!(fp.kernel_end, 0x10_0000 + 0x50_0000);
        // A file shorter than its setup sectors, a load below 1 MiB.
        assert!(bzimage_footprint(&header(&b), 1000)
            .unwrap_err()
            .to_string()
            .contains("real-mode setup"));
        let mut low = b.clone();
        low[0x214..0x218].copy_from_slice(&0x9_0000u32.to_le_bytes());
        assert!(bzimage_footprint(&header(&low), len)
            .unwrap_err()
            .to_string()
            .contains("below 1 MiB"));
        // The file-reading path agrees, and needs the 64-bit entry.
        let path = temp_file("fp", &b);
        assert_eq!(footprint(&path).unwrap().kernel_end, 0x40_0000);
        std::fs::write(&path, bzimage(0x020B, 0x7f, 0x3000)).unwrap();
        let e = footprint(&path).unwrap_err().to_string();
        std::fs::remove_file(&path).unwrap();
        assert!(e.contains("no 64-bit entry"), "{e}");
    }

    #[test]
    fn initramfs_goes_above_the_decompression_buffer() {
        // 6 MiB of RAM, a kernel using memory up to 4 MiB: an initramfs of
        // 2 MiB + 1 byte no longer fits above it (the loader's kernel_end,
        // the end of the file's protected-mode part, is far lower).
        let mem = create_guest_memory(6).unwrap();
        let kernel = temp_file("buf", &bzimage(0x020F, 0x7f, 0x3000));
        let fits = temp_file("fits", &vec![1u8; 2 << 20]);
        let over = temp_file("over", &vec![1u8; (2 << 20) + 1]);
        let ok = load(&mem, &kernel, KernelFormat::BzImage, Some(&fits), "", 1);
        let e = load(&mem, &kernel, KernelFormat::BzImage, Some(&over), "", 1);
        for p in [&kernel, &fits, &over] {
            std::fs::remove_file(p).unwrap();
        }
        assert_eq!(ok.unwrap().initrd, Some((0x40_0000, 2 << 20)));
        assert!(matches!(e, Err(BootError::InitrdTooBig { .. })), "{e:?}");
    }

    #[test]
    fn bzimage_without_64bit_entry_is_refused() {
        let mem = create_guest_memory(64).unwrap();
        for (protocol, xlf) in [(0x020B, 0x7f), (0x020F, 0x7e)] {
            let kernel = temp_file("old", &bzimage(protocol, xlf, 0x1000));
            let e = load(&mem, &kernel, KernelFormat::BzImage, None, "", 1).unwrap_err();
            std::fs::remove_file(&kernel).unwrap();
            assert!(e.to_string().contains("no 64-bit entry"), "{e}");
        }
    }
}
