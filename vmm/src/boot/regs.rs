//! Initial register states: 64-bit long mode for the direct ELF entry
//! (guests/PROTOCOL.md) and 32-bit protected mode for the multiboot entry
//! (multiboot specification 1, "Machine state"), the boot GDT both use, and
//! the FPU state after FNINIT.

use super::layout::{BOOT_STACK, GDT_ADDR, IDT_ADDR, PML4_ADDR, ZERO_PAGE_ADDR};
use kvm_bindings::{kvm_fpu, kvm_regs, kvm_segment, kvm_sregs};

/// GDT selectors of the boot state (the same in both modes).
pub const CODE_SEL: u16 = 0x10;
pub const DATA_SEL: u16 = 0x18;
pub const TSS_SEL: u16 = 0x20;

const X86_CR0_PE: u64 = 1 << 0;
const X86_CR0_ET: u64 = 1 << 4;
const X86_CR0_PG: u64 = 1 << 31;
/// CR0 of the 64-bit boot state (PG, AM, WP, NE, ET, MP, PE).
pub const BOOT_CR0: u64 = 0x8005_0033;
/// CR4: PAE, OSFXSR, OSXMMEXCPT.
pub const BOOT_CR4: u64 = 0x620;
/// EFER: SCE, LME, LMA.
pub const BOOT_EFER: u64 = 0x501;

/// EAX at the multiboot entry.
pub const MULTIBOOT_BOOTLOADER_MAGIC: u32 = 0x2BAD_B002;

/// A GDT descriptor (flags in the 0xF0FF layout used by Linux/Firecracker).
pub fn gdt_entry(flags: u16, base: u32, limit: u32) -> u64 {
    ((u64::from(base) & 0xff00_0000) << (56 - 24))
        | ((u64::from(flags) & 0x0000_f0ff) << 40)
        | ((u64::from(limit) & 0x000f_0000) << (48 - 16))
        | ((u64::from(base) & 0x00ff_ffff) << 16)
        | (u64::from(limit) & 0x0000_ffff)
}

/// The 64-bit boot GDT: null, null, 64-bit code (0x10), data (0x18), TSS
/// (0x20, a 16-byte system descriptor).
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

/// The 32-bit boot GDT: null, null, flat 32-bit code (0x10), flat data
/// (0x18). The multiboot specification leaves GDTR undefined; a valid one
/// costs nothing and keeps a guest that reloads a segment register alive.
pub fn protected_mode_gdt() -> [u64; 4] {
    [
        0,
        0,
        gdt_entry(0xc09b, 0, 0xfffff),
        gdt_entry(0xc093, 0, 0xfffff),
    ]
}

fn segment(sel: u16, type_: u8, l: u8, db: u8) -> kvm_segment {
    kvm_segment {
        base: 0,
        limit: 0xffff_ffff,
        selector: sel,
        type_,
        present: 1,
        dpl: 0,
        db,
        s: 1,
        l,
        g: 1,
        avl: 0,
        unusable: 0,
        padding: 0,
    }
}

/// Put `sregs` in the 64-bit boot state (segments, GDT/IDT, paging).
pub fn long_mode_sregs(sregs: &mut kvm_sregs) {
    let code = segment(CODE_SEL, 0xb, 1, 0);
    let data = segment(DATA_SEL, 0x3, 0, 1);
    let tss = kvm_segment {
        limit: 0x67,
        selector: TSS_SEL,
        type_: 0xb,
        present: 1,
        ..Default::default()
    };
    load_segments(sregs, code, data);
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

/// CS = `code`, every data segment register = `data` (flat boot segments).
fn load_segments(sregs: &mut kvm_sregs, code: kvm_segment, data: kvm_segment) {
    sregs.cs = code;
    sregs.ds = data;
    sregs.es = data;
    sregs.fs = data;
    sregs.gs = data;
    sregs.ss = data;
}

/// Put `sregs` in the multiboot entry state: CS a 32-bit read/execute
/// segment and DS/ES/FS/GS/SS read/write data segments, all with base 0
/// and limit 4 GiB; CR0.PE set, paging off; no long mode. (A20 is always
/// enabled in a KVM guest.) TR and LDTR keep KVM's reset values.
pub fn protected_mode_sregs(sregs: &mut kvm_sregs) {
    let code = segment(CODE_SEL, 0xb, 0, 1);
    let data = segment(DATA_SEL, 0x3, 0, 1);
    load_segments(sregs, code, data);
    sregs.gdt.base = GDT_ADDR;
    sregs.gdt.limit = (protected_mode_gdt().len() * 8 - 1) as u16;
    sregs.idt.base = IDT_ADDR;
    sregs.idt.limit = 0;
    sregs.cr0 = X86_CR0_PE | X86_CR0_ET;
    sregs.cr3 = 0;
    sregs.cr4 = 0;
    sregs.efer = 0;
}

/// General registers of vCPU `index` at the 64-bit entry: RDI carries the
/// vCPU index (0 = boot vCPU; PROTOCOL.md), RSI the zero page.
pub fn long_mode_regs(entry: u64, index: u32) -> kvm_regs {
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

/// General registers at the multiboot entry: EAX the boot loader magic,
/// EBX the multiboot information, EFLAGS with IF and VM clear.
pub fn multiboot_regs(entry: u32, info_addr: u32) -> kvm_regs {
    kvm_regs {
        rflags: 0x2,
        rip: u64::from(entry),
        rax: u64::from(MULTIBOOT_BOOTLOADER_MAGIC),
        rbx: u64::from(info_addr),
        rsp: BOOT_STACK,
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

    #[test]
    fn gdt_entries_match_known_values() {
        let g = boot_gdt();
        assert_eq!(g[2], 0x00af_9b00_0000_ffff);
        assert_eq!(g[3], 0x00cf_9300_0000_ffff);
        let p = protected_mode_gdt();
        assert_eq!(p[2], 0x00cf_9b00_0000_ffff);
        assert_eq!(p[3], 0x00cf_9300_0000_ffff);
    }

    #[test]
    fn multiboot_entry_state() {
        let mut s = kvm_sregs::default();
        long_mode_sregs(&mut s);
        protected_mode_sregs(&mut s);
        assert_eq!(s.cr0 & X86_CR0_PG, 0);
        assert_eq!(s.cr0 & X86_CR0_PE, 1);
        assert_eq!(s.efer, 0);
        assert_eq!((s.cs.l, s.cs.db, s.cs.type_), (0, 1, 0xb));
        for seg in [s.ds, s.es, s.fs, s.gs, s.ss] {
            assert_eq!(
                (seg.base, seg.limit, seg.db, seg.type_),
                (0, 0xffff_ffff, 1, 3)
            );
        }
        let r = multiboot_regs(0x40_0000, 0x1_0000);
        assert_eq!(r.rax, 0x2BAD_B002);
        assert_eq!((r.rbx, r.rip), (0x1_0000, 0x40_0000));
        // IF (bit 9) and VM (bit 17) clear.
        assert_eq!(r.rflags & ((1 << 9) | (1 << 17)), 0);
    }
}
