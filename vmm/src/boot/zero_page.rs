//! The Linux zero page (`struct boot_params`, Documentation/arch/x86/
//! boot.rst and zero-page.rst) for the 64-bit boot protocol: what a boot
//! loader hands the kernel in RSI.
//!
//! A bzImage brings its own setup header (the bytes at 0x1F1 of the file);
//! the loader copies it into the zero page and fills in the loader's
//! fields. An uncompressed vmlinux has none, so the header is made up with
//! the same fields, as Firecracker does. Either way the loader sets:
//!
//! | field | value |
//! |---|---|
//! | `hdr.type_of_loader` | 0xFF (a loader without an assigned id) |
//! | `hdr.cmd_line_ptr`, `ext_cmd_line_ptr` | the command line (below 4 GiB here) |
//! | `hdr.ramdisk_image` / `_size`, `ext_ramdisk_*` | the initramfs, if any |
//! | `e820_table`, `e820_entries` | the memory map (`memory::e820_map`) |
//! | `acpi_rsdp_addr` | the RSDP, so the kernel need not scan for it |
//! | `hdr.hardware_subarch` | 0, a PC |
//!
//! Pure data in, `boot_params` out, so the tests read every field back.

use crate::memory::E820Entry;
use linux_loader::loader::bootparam::{boot_params, setup_header};

pub const KERNEL_BOOT_FLAG_MAGIC: u16 = 0xAA55;
/// "HdrS".
pub const KERNEL_HDR_MAGIC: u32 = 0x5372_6448;
pub const KERNEL_LOADER_OTHER: u8 = 0xFF;
/// `loadflags`: the protected-mode code is loaded at 1 MiB or above.
pub const LOADED_HIGH: u8 = 1 << 0;
/// The boot protocol version a made-up header claims (2.15, Linux 5.5+).
pub const MADE_UP_PROTOCOL: u16 = 0x020F;
/// CONFIG_PHYSICAL_ALIGN of x86-64 kernels (2 MiB minimum, 16 MiB here as
/// in Firecracker).
pub const KERNEL_ALIGNMENT: u32 = 0x0100_0000;

/// What goes into the zero page.
#[derive(Debug, Clone, Copy)]
pub struct ZeroPage<'a> {
    /// The bzImage's setup header (None: an ELF vmlinux).
    pub setup_header: Option<setup_header>,
    pub cmdline_addr: u64,
    /// Bytes of the command line, without the terminating NUL.
    pub cmdline_len: usize,
    /// (address, size) of the initramfs.
    pub initrd: Option<(u64, u64)>,
    pub e820: &'a [E820Entry],
    pub rsdp_addr: u64,
}

fn low32(v: u64) -> u32 {
    v as u32
}
fn high32(v: u64) -> u32 {
    (v >> 32) as u32
}

/// Build the zero page. Memory maps longer than the zero page's e820
/// table (128 entries) are cut; Pacer's have at most 4.
pub fn build(z: &ZeroPage<'_>) -> boot_params {
    let mut p = boot_params::default();
    match z.setup_header {
        Some(h) => p.hdr = h,
        None => {
            p.hdr.boot_flag = KERNEL_BOOT_FLAG_MAGIC;
            p.hdr.header = KERNEL_HDR_MAGIC;
            p.hdr.version = MADE_UP_PROTOCOL;
            p.hdr.loadflags = LOADED_HIGH;
            p.hdr.kernel_alignment = KERNEL_ALIGNMENT;
            // A kernel-written field in a real header (the longest line it
            // takes); here the line's own length, as Firecracker does.
            p.hdr.cmdline_size = z.cmdline_len as u32;
        }
    }
    p.hdr.type_of_loader = KERNEL_LOADER_OTHER;
    p.hdr.hardware_subarch = 0;
    p.hdr.cmd_line_ptr = low32(z.cmdline_addr);
    p.ext_cmd_line_ptr = high32(z.cmdline_addr);
    if let Some((addr, size)) = z.initrd {
        p.hdr.ramdisk_image = low32(addr);
        p.hdr.ramdisk_size = low32(size);
        p.ext_ramdisk_image = high32(addr);
        p.ext_ramdisk_size = high32(size);
    }
    for (slot, e) in p.e820_table.iter_mut().zip(z.e820) {
        slot.addr = e.addr;
        slot.size = e.size;
        slot.r#type = e.kind;
    }
    p.e820_entries = z.e820.len().min(p.e820_table.len()) as u8;
    p.acpi_rsdp_addr = z.rsdp_addr;
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{e820_map, E820_RAM, E820_RESERVED};
    use vm_memory::ByteValued;

    fn field<const N: usize>(p: &boot_params, at: usize) -> [u8; N] {
        p.as_slice()[at..at + N].try_into().unwrap()
    }
    fn u32_at(p: &boot_params, at: usize) -> u32 {
        u32::from_le_bytes(field(p, at))
    }
    fn u64_at(p: &boot_params, at: usize) -> u64 {
        u64::from_le_bytes(field(p, at))
    }

    /// Offsets from Documentation/arch/x86/zero-page.rst and boot.rst,
    /// read back from the raw page (what the kernel sees).
    #[test]
    fn vmlinux_zero_page_fields() {
        let map = e820_map(512 << 20);
        let p = build(&ZeroPage {
            setup_header: None,
            cmdline_addr: 0x20000,
            cmdline_len: 42,
            initrd: Some((0x1fe8_a000, 0x16_1234)),
            e820: &map,
            rsdp_addr: 0xE0000,
        });
        assert_eq!(std::mem::size_of::<boot_params>(), 4096);
        assert_eq!(u64_at(&p, 0x070), 0xE0000, "acpi_rsdp_addr");
        assert_eq!(field::<1>(&p, 0x1E8), [3], "e820_entries");
        assert_eq!(u16::from_le_bytes(field(&p, 0x1FE)), 0xAA55, "boot_flag");
        assert_eq!(&field::<4>(&p, 0x202), b"HdrS");
        assert_eq!(u16::from_le_bytes(field(&p, 0x206)), 0x020F, "version");
        assert_eq!(field::<1>(&p, 0x210), [0xFF], "type_of_loader");
        assert_eq!(field::<1>(&p, 0x211), [LOADED_HIGH], "loadflags");
        assert_eq!(u32_at(&p, 0x218), 0x1fe8_a000, "ramdisk_image");
        assert_eq!(u32_at(&p, 0x21C), 0x16_1234, "ramdisk_size");
        assert_eq!(u32_at(&p, 0x228), 0x20000, "cmd_line_ptr");
        assert_eq!(u32_at(&p, 0x230), KERNEL_ALIGNMENT, "kernel_alignment");
        assert_eq!(u32_at(&p, 0x238), 42, "cmdline_size");
        assert_eq!(u32_at(&p, 0x23C), 0, "hardware_subarch");
        assert_eq!(u32_at(&p, 0x0C0), 0, "ext_ramdisk_image");
        assert_eq!(u32_at(&p, 0x0C8), 0, "ext_cmd_line_ptr");
        // e820_table at 0x2D0, 20 bytes per entry: addr, size, type.
        let e = |i: usize| {
            let at = 0x2D0 + 20 * i;
            (u64_at(&p, at), u64_at(&p, at + 8), u32_at(&p, at + 16))
        };
        assert_eq!(e(0), (0, 0xA0000, E820_RAM));
        assert_eq!(e(1), (0xA0000, 0x60000, E820_RESERVED));
        assert_eq!(e(2), (0x10_0000, (512 << 20) - 0x10_0000, E820_RAM));
        assert_eq!(e(3), (0, 0, 0));
    }

    #[test]
    fn bzimage_header_is_kept_and_loader_fields_set() {
        let mut h = setup_header {
            setup_sects: 27,
            boot_flag: KERNEL_BOOT_FLAG_MAGIC,
            header: KERNEL_HDR_MAGIC,
            version: 0x020F,
            loadflags: LOADED_HIGH | 0x20,
            code32_start: 0x10_0000,
            initrd_addr_max: 0x7fff_ffff,
            kernel_alignment: 0x20_0000,
            relocatable_kernel: 1,
            xloadflags: 0x7f,
            cmdline_size: 2047,
            init_size: 0x300_0000,
            ..Default::default()
        };
        h.type_of_loader = 0;
        // 6 GiB of RAM: the map continues above 4 GiB.
        let map = e820_map(6 << 30);
        let p = build(&ZeroPage {
            setup_header: Some(h),
            cmdline_addr: 0x20000,
            cmdline_len: 10,
            initrd: None,
            e820: &map,
            rsdp_addr: 0xE0000,
        });
        assert_eq!(field::<1>(&p, 0x1F1), [27], "setup_sects kept");
        assert_eq!(field::<1>(&p, 0x210), [0xFF], "type_of_loader");
        assert_eq!(
            field::<1>(&p, 0x211),
            [LOADED_HIGH | 0x20],
            "loadflags kept"
        );
        assert_eq!(u32_at(&p, 0x22C), 0x7fff_ffff, "initrd_addr_max kept");
        assert_eq!(u32_at(&p, 0x230), 0x20_0000, "kernel_alignment kept");
        assert_eq!(u32_at(&p, 0x238), 2047, "cmdline_size: the kernel's");
        assert_eq!(u32_at(&p, 0x260), 0x300_0000, "init_size kept");
        assert_eq!((u32_at(&p, 0x218), u32_at(&p, 0x21C)), (0, 0), "no ramdisk");
        assert_eq!(field::<1>(&p, 0x1E8), [4]);
        let last = 0x2D0 + 20 * 3;
        assert_eq!(u64_at(&p, last), 4 << 30);
        assert_eq!(u64_at(&p, last + 8), 3 << 30);
    }

    #[test]
    fn addresses_above_4g_use_the_ext_fields() {
        let p = build(&ZeroPage {
            setup_header: None,
            cmdline_addr: 0x1_0002_0000,
            cmdline_len: 1,
            initrd: Some((0x1_2000_0000, 0x1_0000_0010)),
            e820: &[],
            rsdp_addr: 0,
        });
        assert_eq!((u32_at(&p, 0x228), u32_at(&p, 0x0C8)), (0x20000, 1));
        assert_eq!((u32_at(&p, 0x218), u32_at(&p, 0x0C0)), (0x2000_0000, 1));
        assert_eq!((u32_at(&p, 0x21C), u32_at(&p, 0x0C4)), (0x10, 1));
        assert_eq!(field::<1>(&p, 0x1E8), [0]);
    }
}
