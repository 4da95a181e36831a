//! Direct 64-bit ELF boot of the bench guest (guests/PROTOCOL.md): load the
//! ELF's PT_LOAD segments with linux-loader, write the command line and the
//! Linux `boot_params` zero page (with the e820 map), a GDT at 0x500 and
//! identity page tables at 0x9000.. (the long-mode registers are in
//! `regs.rs`).

use super::layout::{
    CMDLINE_ADDR, CMDLINE_MAX, HIMEM_START, PAGE_SIZE, PDPT_ADDR, PD_ADDR, PML4_ADDR, TWO_MIB,
    ZERO_PAGE_ADDR,
};
use super::regs::boot_gdt;
use super::{write_gdt, BootError};
use crate::memory::{e820_map, ram_end, ram_size, MMIO_GAP_START};
use linux_loader::cmdline::Cmdline;
use linux_loader::configurator::linux::LinuxBootConfigurator;
use linux_loader::configurator::{BootConfigurator, BootParams};
use linux_loader::loader::bootparam::boot_params;
use linux_loader::loader::elf::Elf;
use linux_loader::loader::{load_cmdline, KernelLoader};
use std::fs::File;
use std::path::Path;
use vm_memory::{Address, Bytes, GuestAddress, GuestMemoryMmap};

const KERNEL_BOOT_FLAG_MAGIC: u16 = 0xaa55;
const KERNEL_HDR_MAGIC: u32 = 0x5372_6448;
const KERNEL_LOADER_OTHER: u8 = 0xff;
const KERNEL_MIN_ALIGNMENT_BYTES: u32 = 0x100_0000;

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
        Some(p) => Some(load_initrd(mem, p, kernel_end, MMIO_GAP_START)?),
        None => None,
    };
    Ok(LoadedKernel {
        entry,
        kernel_end,
        initrd,
    })
}

/// Load the initrd page-aligned as high as possible: ending at or below
/// `limit` (and the end of RAM), starting above the kernel.
pub(crate) fn load_initrd(
    mem: &GuestMemoryMmap,
    path: &Path,
    kernel_end: u64,
    limit: u64,
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
    let top = ram_end(mem).min(limit);
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
    write_zero_page_and_tables(mem, &params)
}

/// The zero page at its address, then the boot GDT and the identity-mapped
/// page tables every 64-bit entry (bench guest, Linux) starts on.
pub(crate) fn write_zero_page_and_tables(
    mem: &GuestMemoryMmap,
    params: &boot_params,
) -> Result<(), BootError> {
    LinuxBootConfigurator::write_bootparams::<GuestMemoryMmap>(
        &BootParams::new(params, GuestAddress(ZERO_PAGE_ADDR)),
        mem,
    )
    .map_err(BootError::BootParams)?;
    write_gdt(mem, &boot_gdt())?;
    write_page_tables(mem)
}

/// Number of 2 MiB pages the boot page tables map: the first 4 GiB, or all
/// RAM below 4 GiB if less.
pub fn identity_map_pages(ram_end: u64) -> u64 {
    ram_end.min(4 << 30).div_ceil(TWO_MIB)
}

/// Identity-map the first 4 GiB (or all RAM below it) with 2 MiB pages.
pub(crate) fn write_page_tables(mem: &GuestMemoryMmap) -> Result<(), BootError> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::create_guest_memory;

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
