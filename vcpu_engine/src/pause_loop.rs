//! What a spin-wait loop looks like from outside the guest, for the spin
//! watch (`crate::spin_watch`).
//!
//! "A spin-wait loop" is what every x86 spin loop contains: the PAUSE
//! instruction (`F3 90`, the spin-loop hint Intel and AMD ask for, which
//! Linux's `cpu_relax` and Windows' `YieldProcessor` emit), within
//! [`SPIN_WINDOW`] bytes of the interrupted instruction pointer. A compute
//! loop has no PAUSE; a lock holder in its critical section is not in the
//! wait loop. The instruction pointer is translated by walking the
//! guest's page tables in guest memory (4-level paging in long mode;
//! anything else is "not spinning"), and the bytes are read from guest
//! memory through the VMM ([`crate::vcpu::VcpuExitHandler::read_guest`]).
//! No guest change is needed, and a guest cannot make the engine
//! misbehave by it: at worst it makes its own vCPUs yield.

use kvm_bindings::kvm_sregs;

/// How far from the instruction pointer a PAUSE counts, bytes (either
/// side, within its page): a spin loop is a handful of instructions, and
/// the signal lands anywhere in it.
pub const SPIN_WINDOW: u64 = 16;

/// The PAUSE instruction.
const PAUSE: [u8; 2] = [0xf3, 0x90];

const CR0_PG: u64 = 1 << 31;
const CR4_PAE: u64 = 1 << 5;
const CR4_LA57: u64 = 1 << 12;
const EFER_LMA: u64 = 1 << 10;
const PTE_PRESENT: u64 = 1;
const PTE_LARGE: u64 = 1 << 7;
/// Bits 12-51 of a page-table entry or CR3: the next table or the page.
const PTE_ADDR: u64 = 0x000f_ffff_ffff_f000;
const PAGE: u64 = 4096;

/// Reads guest-physical memory: false if `gpa..gpa + buf.len()` is not
/// guest RAM.
pub type ReadGuest<'a> = &'a dyn Fn(u64, &mut [u8]) -> bool;

/// The guest-physical address of `va` under 4-level long-mode paging
/// (None: not present, not long mode, 5-level paging, or the tables are
/// not in guest RAM).
pub fn translate(sregs: &kvm_sregs, va: u64, read: ReadGuest) -> Option<u64> {
    let long = sregs.cr0 & CR0_PG != 0 && sregs.cr4 & CR4_PAE != 0 && sregs.efer & EFER_LMA != 0;
    if !long || sregs.cr4 & CR4_LA57 != 0 {
        return None;
    }
    let mut table = sregs.cr3 & PTE_ADDR;
    for level in (1..=4u32).rev() {
        let shift = 12 + 9 * (level - 1);
        let index = (va >> shift) & 0x1ff;
        let mut raw = [0u8; 8];
        if !read(table + index * 8, &mut raw) {
            return None;
        }
        let entry = u64::from_le_bytes(raw);
        if entry & PTE_PRESENT == 0 {
            return None;
        }
        // A 1 GiB (level 3) or 2 MiB (level 2) page, or the 4 KiB one.
        if level == 1 || (level <= 3 && entry & PTE_LARGE != 0) {
            let size = 1u64 << shift;
            return Some((entry & PTE_ADDR & !(size - 1)) | (va & (size - 1)));
        }
        table = entry & PTE_ADDR;
    }
    None
}

/// Whether the vCPU, interrupted at `rip` with `sregs`, sits in a
/// spin-wait loop: a PAUSE within [`SPIN_WINDOW`] bytes of `rip`, in
/// `rip`'s page.
pub fn spinning(rip: u64, sregs: &kvm_sregs, read: ReadGuest) -> bool {
    let Some(at) = translate(sregs, rip, read) else {
        return false;
    };
    let page = at & !(PAGE - 1);
    let from = at.saturating_sub(SPIN_WINDOW).max(page);
    let to = at.saturating_add(SPIN_WINDOW).min(page + PAGE);
    let mut bytes = [0u8; 2 * SPIN_WINDOW as usize];
    let window = &mut bytes[..(to - from) as usize];
    read(from, window) && window.windows(2).any(|w| w == PAUSE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// Guest RAM of `pages` pages with 4-level tables at 0x1000-0x4000
    /// mapping `va` to `gpa` (`large`: as a 2 MiB page at level 2).
    struct Ram(RefCell<Vec<u8>>);

    impl Ram {
        fn new(pages: u64) -> Ram {
            Ram(RefCell::new(vec![0; (pages * PAGE) as usize]))
        }
        fn put(&self, gpa: u64, bytes: &[u8]) {
            self.0.borrow_mut()[gpa as usize..gpa as usize + bytes.len()].copy_from_slice(bytes);
        }
        fn entry(&self, table: u64, index: u64, value: u64) {
            self.put(table + index * 8, &value.to_le_bytes());
        }
        fn map(&self, va: u64, gpa: u64, large: bool) {
            let idx = |level: u32| (va >> (12 + 9 * (level - 1))) & 0x1ff;
            self.entry(0x1000, idx(4), 0x2000 | PTE_PRESENT);
            self.entry(0x2000, idx(3), 0x3000 | PTE_PRESENT);
            if large {
                self.entry(0x3000, idx(2), (gpa & !0x1f_ffff) | PTE_PRESENT | PTE_LARGE);
            } else {
                self.entry(0x3000, idx(2), 0x4000 | PTE_PRESENT);
                self.entry(0x4000, idx(1), (gpa & PTE_ADDR) | PTE_PRESENT);
            }
        }
        fn read(&self, gpa: u64, buf: &mut [u8]) -> bool {
            let ram = self.0.borrow();
            let end = gpa as usize + buf.len();
            if end > ram.len() {
                return false;
            }
            buf.copy_from_slice(&ram[gpa as usize..end]);
            true
        }
    }

    fn long_mode() -> kvm_sregs {
        kvm_sregs {
            cr0: 0x8005_0033,
            cr3: 0x1000,
            cr4: 0x620,
            efer: 0x501,
            ..Default::default()
        }
    }

    /// A test-and-test-and-set wait loop as compilers emit it:
    /// `mov eax,[rdi]; test eax,eax; je out; pause; jmp loop`.
    const WAIT_LOOP: [u8; 9] = [0x8b, 0x07, 0x85, 0xc0, 0x74, 0x04, 0xf3, 0x90, 0xeb];
    /// A compute loop: `dec rcx; jnz .-3` and the like, no PAUSE.
    const COMPUTE_LOOP: [u8; 9] = [0x48, 0xff, 0xc9, 0x75, 0xfb, 0x48, 0x01, 0xc0, 0x90];

    #[test]
    fn a_pause_near_the_instruction_pointer_is_a_spin_and_a_compute_loop_is_not() {
        let ram = Ram::new(16);
        let s = long_mode();
        // User code at 0x40_0000 in guest page 0x8000.
        ram.map(0x40_0000, 0x8000, false);
        ram.put(0x8100, &WAIT_LOOP);
        ram.put(0x8200, &COMPUTE_LOOP);
        let read = |g: u64, b: &mut [u8]| ram.read(g, b);
        assert_eq!(translate(&s, 0x40_0108, &read), Some(0x8108));
        for rip in 0x40_0100..0x40_0109 {
            assert!(spinning(rip, &s, &read), "{rip:#x} is in the wait loop");
        }
        for rip in 0x40_0200..0x40_0209 {
            assert!(!spinning(rip, &s, &read), "{rip:#x} is in the compute loop");
        }
        // Too far from the PAUSE.
        assert!(!spinning(0x40_0106 + SPIN_WINDOW + 2, &s, &read));
    }

    #[test]
    fn a_large_page_translates_and_the_window_stays_in_its_page() {
        let ram = Ram::new(1024);
        let s = long_mode();
        ram.map(0x20_0000, 0x20_0000, true);
        let read = |g: u64, b: &mut [u8]| ram.read(g, b);
        assert_eq!(translate(&s, 0x23_4567, &read), Some(0x23_4567));
        // A PAUSE at the very start of a page, the RIP at its end: the
        // window does not reach across (nothing read beyond RAM either).
        ram.put(0x21_0000, &PAUSE);
        assert!(!spinning(0x20_fffe, &s, &read));
        assert!(spinning(0x21_0003, &s, &read));
    }

    #[test]
    fn nothing_is_a_spin_without_long_mode_paging_or_a_mapping() {
        let ram = Ram::new(16);
        ram.map(0x40_0000, 0x8000, false);
        ram.put(0x8100, &WAIT_LOOP);
        let read = |g: u64, b: &mut [u8]| ram.read(g, b);
        let mut s = long_mode();
        assert!(spinning(0x40_0106, &s, &read));
        // Not mapped.
        assert!(!spinning(0x80_0106, &s, &read));
        // Paging off, 32-bit paging, 5-level paging.
        s.cr0 &= !CR0_PG;
        assert!(!spinning(0x40_0106, &s, &read));
        let mut s = long_mode();
        s.efer &= !EFER_LMA;
        assert!(!spinning(0x40_0106, &s, &read));
        let mut s = long_mode();
        s.cr4 |= CR4_LA57;
        assert!(!spinning(0x40_0106, &s, &read));
        // Tables outside guest RAM.
        let mut s = long_mode();
        s.cr3 = 0x100_0000;
        assert!(!spinning(0x40_0106, &s, &read));
    }
}
