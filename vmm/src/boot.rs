//! Direct 64-bit ELF boot (guests/PROTOCOL.md): load the ELF's PT_LOAD
//! segments with linux-loader, write the command line and the Linux
//! `boot_params` zero page (with the e820 map), a GDT at 0x500, identity page
//! tables at 0x9000.., and the long-mode register state of the boot vCPU.

use crate::memory::{e820_map, ram_end, MMIO_GAP_START};
use kvm_bindings::{kvm_fpu, kvm_regs, kvm_segment, kvm_sregs};
use linux_loader::cmdline::Cmdline;
use linux_loader::configurator::linux::LinuxBootConfigurator;
use linux_loader::configurator::{BootConfigurator, BootParams};
use linux_loader::loader::bootparam::boot_params;
use linux_loader::loader::elf::Elf;
use linux_loader::loader::{load_cmdline, KernelLoader};
use std::fs::File;
use std::path::Path;
use vm_memory::{Address, Bytes, GuestAddress, GuestMemoryMmap};

pub const GDT_ADDR: u64 = 0x500;
pub const IDT_ADDR: u64 = 0x520;
pub const ZERO_PAGE_ADDR: u64 = 0x7000;
pub const BOOT_STACK: u64 = 0x8FF0;
pub const PML4_ADDR: u64 = 0x9000;
pub const PDPT_ADDR: u64 = 0xA000;
pub const PD_ADDR: u64 = 0xB000;
pub const CMDLINE_ADDR: u64 = 0x20000;
pub const CMDLINE_MAX: usize = 4096;
pub const HIMEM_START: u64 = 0x10_0000;

/// GDT selectors of the boot state.
pub const CODE_SEL: u16 = 0x10;
pub const DATA_SEL: u16 = 0x18;
pub const TSS_SEL: u16 = 0x20;

const X86_CR0_PE: u64 = 1 << 0;
const X86_CR0_PG: u64 = 1 << 31;
/// CR0 of the boot state (PG, AM, WP, NE, ET, MP, PE).
pub const BOOT_CR0: u64 = 0x8005_0033;
/// CR4: PAE, OSFXSR, OSXMMEXCPT.
pub const BOOT_CR4: u64 = 0x620;
/// EFER: SCE, LME, LMA.
pub const BOOT_EFER: u64 = 0x501;

const KERNEL_BOOT_FLAG_MAGIC: u16 = 0xaa55;
const KERNEL_HDR_MAGIC: u32 = 0x5372_6448;
const KERNEL_LOADER_OTHER: u8 = 0xff;
const KERNEL_MIN_ALIGNMENT_BYTES: u32 = 0x100_0000;
const PAGE_SIZE: u64 = 4096;
const TWO_MIB: u64 = 2 << 20;

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum BootError {
    #[error("cannot open {path}: {source}")]
    Open {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot load ELF kernel {path}: {source}")]
    LoadKernel {
        path: String,
        source: linux_loader::loader::Error,
    },
    #[error("initrd {path} ({size} bytes) does not fit in guest RAM")]
    InitrdTooBig { path: String, size: u64 },
    #[error("cannot load initrd {path}: {reason}")]
    LoadInitrd { path: String, reason: String },
    #[error("kernel command line: {0}")]
    Cmdline(#[from] linux_loader::cmdline::Error),
    #[error("cannot write the command line: {0}")]
    WriteCmdline(linux_loader::loader::Error),
    #[error("cannot write boot_params: {0}")]
    BootParams(linux_loader::configurator::Error),
    #[error("cannot write {what} to guest memory: {source}")]
    Write {
        what: &'static str,
        source: vm_memory::GuestMemoryError,
    },
    #[error("guest RAM too small for the boot structures ({0:#x} bytes)")]
    TooSmall(u64),
}

/// Where the kernel (and initrd) went.
#[derive(Debug, Clone, Copy)]
pub struct LoadedKernel {
    pub entry: u64,
    pub kernel_end: u64,
    pub initrd: Option<(u64, u64)>,
}

/// Load the ELF kernel at its physical addresses (and the initrd, if any, at
/// the top of low RAM).
pub fn load_kernel(
    mem: &GuestMemoryMmap,
    kernel: &Path,
    initrd: Option<&Path>,
) -> Result<LoadedKernel, BootError> {
    if ram_end(mem) < CMDLINE_ADDR + CMDLINE_MAX as u64 {
        return Err(BootError::TooSmall(ram_end(mem)));
    }
    let mut f = File::open(kernel).map_err(|source| BootError::Open {
        path: kernel.display().to_string(),
        source,
    })?;
    let res = Elf::load(mem, None, &mut f, Some(GuestAddress(HIMEM_START))).map_err(|source| {
        BootError::LoadKernel {
            path: kernel.display().to_string(),
            source,
        }
    })?;
    let entry = res.kernel_load.raw_value();
    let kernel_end = res.kernel_end;
    let initrd = match initrd {
        Some(p) => Some(load_initrd(mem, p, kernel_end)?),
        None => None,
    };
    Ok(LoadedKernel {
        entry,
        kernel_end,
        initrd,
    })
}

fn load_initrd(
    mem: &GuestMemoryMmap,
    path: &Path,
    kernel_end: u64,
) -> Result<(u64, u64), BootError> {
    let name = path.display().to_string();
    let mut f = File::open(path).map_err(|source| BootError::Open {
        path: name.clone(),
        source,
    })?;
    let size = f
        .metadata()
        .map_err(|e| BootError::LoadInitrd {
            path: name.clone(),
            reason: e.to_string(),
        })?
        .len();
    let top = ram_end(mem).min(MMIO_GAP_START);
    let addr = top
        .checked_sub(size)
        .map(|a| a & !(PAGE_SIZE - 1))
        .filter(|&a| a >= kernel_end.max(HIMEM_START))
        .ok_or(BootError::InitrdTooBig {
            path: name.clone(),
            size,
        })?;
    mem.read_exact_volatile_from(GuestAddress(addr), &mut f, size as usize)
        .map_err(|e| BootError::LoadInitrd {
            path: name,
            reason: e.to_string(),
        })?;
    Ok((addr, size))
}

/// The full kernel command line: the config's part, then `tsc_khz=` and
/// `vcpus=`.
pub fn build_cmdline(base: &str, tsc_khz: u32, vcpus: u32) -> Result<Cmdline, BootError> {
    let mut cl = Cmdline::new(CMDLINE_MAX)?;
    if !base.trim().is_empty() {
        cl.insert_str(base.trim())?;
    }
    cl.insert("tsc_khz", &tsc_khz.to_string())?;
    cl.insert("vcpus", &vcpus.to_string())?;
    Ok(cl)
}

/// Write the command line, the zero page, the GDT/IDT and the page tables.
pub fn write_boot_structures(
    mem: &GuestMemoryMmap,
    cmdline: &Cmdline,
    kernel: &LoadedKernel,
) -> Result<(), BootError> {
    load_cmdline(mem, GuestAddress(CMDLINE_ADDR), cmdline).map_err(BootError::WriteCmdline)?;
    let cmdline_len = cmdline
        .as_cstring()
        .map(|c| c.as_bytes().len())
        .unwrap_or(0);

    let mut params = boot_params::default();
    params.hdr.boot_flag = KERNEL_BOOT_FLAG_MAGIC;
    params.hdr.header = KERNEL_HDR_MAGIC;
    params.hdr.type_of_loader = KERNEL_LOADER_OTHER;
    params.hdr.kernel_alignment = KERNEL_MIN_ALIGNMENT_BYTES;
    params.hdr.cmd_line_ptr = CMDLINE_ADDR as u32;
    params.hdr.cmdline_size = cmdline_len as u32;
    if let Some((addr, size)) = kernel.initrd {
        params.hdr.ramdisk_image = addr as u32;
        params.hdr.ramdisk_size = size as u32;
    }
    let size: u64 = ram_size(mem);
    let map = e820_map(size);
    for (slot, e) in params.e820_table.iter_mut().zip(map.iter()) {
        slot.addr = e.addr;
        slot.size = e.size;
        slot.r#type = e.kind;
    }
    params.e820_entries = map.len().min(params.e820_table.len()) as u8;
    LinuxBootConfigurator::write_bootparams::<GuestMemoryMmap>(
        &BootParams::new(&params, GuestAddress(ZERO_PAGE_ADDR)),
        mem,
    )
    .map_err(BootError::BootParams)?;

    write_gdt(mem)?;
    write_page_tables(mem)?;
    Ok(())
}

fn ram_size(mem: &GuestMemoryMmap) -> u64 {
    use vm_memory::{GuestMemoryBackend, GuestMemoryRegion};
    mem.iter().map(|r| r.len()).sum()
}

/// A GDT descriptor (flags in the 0xF0FF layout used by Linux/Firecracker).
pub fn gdt_entry(flags: u16, base: u32, limit: u32) -> u64 {
    ((u64::from(base) & 0xff00_0000) << (56 - 24))
        | ((u64::from(flags) & 0x0000_f0ff) << 40)
        | ((u64::from(limit) & 0x000f_0000) << (48 - 16))
        | ((u64::from(base) & 0x00ff_ffff) << 16)
        | (u64::from(limit) & 0x0000_ffff)
}

/// The boot GDT: null, null, 64-bit code (0x10), data (0x18), TSS (0x20, a
/// 16-byte system descriptor).
pub fn boot_gdt() -> [u64; 6] {
    [
        0,
        0,
        gdt_entry(0xa09b, 0, 0xfffff),
        gdt_entry(0xc093, 0, 0xfffff),
        gdt_entry(0x008b, 0, 0x67),
        0,
    ]
}

fn write_gdt(mem: &GuestMemoryMmap) -> Result<(), BootError> {
    for (i, e) in boot_gdt().iter().enumerate() {
        mem.write_obj(*e, GuestAddress(GDT_ADDR + 8 * i as u64))
            .map_err(|source| BootError::Write {
                what: "GDT",
                source,
            })?;
    }
    mem.write_obj(0u64, GuestAddress(IDT_ADDR))
        .map_err(|source| BootError::Write {
            what: "IDT",
            source,
        })?;
    Ok(())
}

/// Number of 2 MiB pages the boot page tables map: the first 4 GiB, or all
/// RAM below 4 GiB if less.
pub fn identity_map_pages(ram_end: u64) -> u64 {
    ram_end.min(4 << 30).div_ceil(TWO_MIB)
}

fn write_page_tables(mem: &GuestMemoryMmap) -> Result<(), BootError> {
    let w = |v: u64, a: u64| {
        mem.write_obj(v, GuestAddress(a))
            .map_err(|source| BootError::Write {
                what: "page tables",
                source,
            })
    };
    let pages = identity_map_pages(ram_end(mem));
    let pds = pages.div_ceil(512);
    // Present | writable, supervisor only.
    w(PDPT_ADDR | 0x3, PML4_ADDR)?;
    for i in 0..pds {
        w((PD_ADDR + i * PAGE_SIZE) | 0x3, PDPT_ADDR + 8 * i)?;
    }
    for p in 0..pages {
        // Present | writable | 2 MiB page.
        w((p * TWO_MIB) | 0x83, PD_ADDR + 8 * p)?;
    }
    Ok(())
}

fn segment(sel: u16, type_: u8, s: u8, l: u8, db: u8, g: u8, limit: u32) -> kvm_segment {
    kvm_segment {
        base: 0,
        limit,
        selector: sel,
        type_,
        present: 1,
        dpl: 0,
        db,
        s,
        l,
        g,
        avl: 0,
        unusable: 0,
        padding: 0,
    }
}

/// Put `sregs` in the 64-bit boot state (segments, GDT/IDT, paging).
pub fn configure_sregs(sregs: &mut kvm_sregs) {
    let code = segment(CODE_SEL, 0xb, 1, 1, 0, 1, 0xffff_ffff);
    let data = segment(DATA_SEL, 0x3, 1, 0, 1, 1, 0xffff_ffff);
    let mut tss = segment(TSS_SEL, 0xb, 0, 0, 0, 0, 0x67);
    tss.s = 0;
    sregs.cs = code;
    sregs.ds = data;
    sregs.es = data;
    sregs.fs = data;
    sregs.gs = data;
    sregs.ss = data;
    sregs.tr = tss;
    sregs.gdt.base = GDT_ADDR;
    sregs.gdt.limit = (boot_gdt().len() * 8 - 1) as u16;
    sregs.idt.base = IDT_ADDR;
    sregs.idt.limit = 0;
    sregs.cr0 = BOOT_CR0 | X86_CR0_PE | X86_CR0_PG;
    sregs.cr3 = PML4_ADDR;
    sregs.cr4 = BOOT_CR4;
    sregs.efer = BOOT_EFER;
}

/// General registers of vCPU `index` at the 64-bit entry: RDI carries the
/// vCPU index (0 = boot vCPU; PROTOCOL.md), RSI the zero page.
pub fn boot_regs(entry: u64, index: u32) -> kvm_regs {
    kvm_regs {
        rflags: 0x2,
        rip: entry,
        rsp: BOOT_STACK,
        rbp: BOOT_STACK,
        rsi: ZERO_PAGE_ADDR,
        rdi: index as u64,
        ..Default::default()
    }
}

/// FPU state as after FNINIT, MXCSR default.
pub fn boot_fpu() -> kvm_fpu {
    kvm_fpu {
        fcw: 0x37f,
        mxcsr: 0x1f80,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::create_guest_memory;

    #[test]
    fn gdt_entries_match_known_values() {
        let g = boot_gdt();
        assert_eq!(g[2], 0x00af_9b00_0000_ffff);
        assert_eq!(g[3], 0x00cf_9300_0000_ffff);
    }

    #[test]
    fn cmdline_appends_vmm_keys() {
        let c = build_cmdline("workload=cpu duration_ms=200", 2_596_120, 3).unwrap();
        assert_eq!(
            c.as_cstring().unwrap().to_str().unwrap(),
            "workload=cpu duration_ms=200 tsc_khz=2596120 vcpus=3"
        );
        let c = build_cmdline("", 1, 1).unwrap();
        assert_eq!(
            c.as_cstring().unwrap().to_str().unwrap(),
            "tsc_khz=1 vcpus=1"
        );
    }

    #[test]
    fn boot_structures_in_memory() {
        let mem = create_guest_memory(64).unwrap();
        let cl = build_cmdline("a=b", 1000, 2).unwrap();
        let k = LoadedKernel {
            entry: 0x100000,
            kernel_end: 0x200000,
            initrd: None,
        };
        write_boot_structures(&mem, &cl, &k).unwrap();
        let e820_entries: u8 = mem.read_obj(GuestAddress(ZERO_PAGE_ADDR + 0x1E8)).unwrap();
        assert_eq!(e820_entries, 3);
        let third_addr: u64 = mem
            .read_obj(GuestAddress(ZERO_PAGE_ADDR + 0x2D0 + 40))
            .unwrap();
        assert_eq!(third_addr, 0x100000);
        let ptr: u32 = mem.read_obj(GuestAddress(ZERO_PAGE_ADDR + 0x228)).unwrap();
        assert_eq!(ptr as u64, CMDLINE_ADDR);
        let len: u32 = mem.read_obj(GuestAddress(ZERO_PAGE_ADDR + 0x238)).unwrap();
        assert_eq!(len as usize, "a=b tsc_khz=1000 vcpus=2".len());
        let pml4: u64 = mem.read_obj(GuestAddress(PML4_ADDR)).unwrap();
        assert_eq!(pml4, PDPT_ADDR | 3);
        // 64 MiB -> 32 2-MiB pages in one PD.
        let last: u64 = mem.read_obj(GuestAddress(PD_ADDR + 8 * 31)).unwrap();
        assert_eq!(last, (31 << 21) | 0x83);
        let none: u64 = mem.read_obj(GuestAddress(PD_ADDR + 8 * 32)).unwrap();
        assert_eq!(none, 0);
        assert_eq!(identity_map_pages(8 << 30), 2048);
    }
}
