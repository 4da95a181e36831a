//! KVM's steal-time protocol, served by Pacer under its own engine.
//!
//! Under the scheduled policies a vCPU waiting for a host CPU is a parked
//! thread, not a runnable one: KVM's own steal accounting (the host
//! scheduler's run delay of the vCPU thread) sees nothing of that wait.
//! So Pacer takes the protocol over: MSR_KVM_STEAL_TIME goes to user space
//! (the MSR filter, `irqchip.rs`), CPUID offers KVM_FEATURE_STEAL_TIME
//! (`cpuid::pacer_steal_time`), and this module keeps, per vCPU, the
//! guest's MSR and writes `struct kvm_steal_time` in guest memory:
//!
//! ```text
//! offset 0  u64 steal      ns the vCPU waited runnable for a host CPU
//!        8  u32 version    odd while the hypervisor writes, even after
//!       12  u32 flags
//!       16  u8  preempted  bit 0 KVM_VCPU_PREEMPTED
//!       17..63 padding
//! ```
//!
//! - On each dispatch (the start of a turn, before the first entry) the
//!   engine hands in the ready wait `vcpu_sched` accounted for the vCPU;
//!   the growth since the last publication is added to `steal` between
//!   two version bumps, as KVM's `record_steal_time` does (a guest that
//!   left `version` odd gets it made even first), and `preempted` is
//!   cleared.
//! - When the engine takes a runnable vCPU off its CPU (quantum end, a
//!   kick, a yield) `preempted` is set: Linux's `vcpu_is_preempted` (its
//!   spin locks, its scheduler's idle-CPU search) reads it. A halted vCPU
//!   is not preempted (KVM sets it only for a runnable thread put off).
//!
//! The MSR value is KVM's: the 64-byte aligned guest-physical address |
//! bit 0 enable; bits 1-5 are reserved (a write with them set is refused
//! with #GP, as KVM does). An area outside guest RAM is accepted and never
//! written (KVM's cache fails to map it the same way); nothing a guest
//! writes there makes the VMM panic. As in KVM the published total starts
//! at 0 when the vCPU is created, so the guest's first update carries all
//! the wait of the vCPU's life.

use std::sync::atomic::{fence, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use vm_memory::{GuestAddress, GuestMemoryBackend, GuestMemoryMmap, VolatileMemory};

/// MSR_KVM_STEAL_TIME.
pub const MSR_KVM_STEAL_TIME: u32 = 0x4b56_4d03;
/// Bit 0 of the MSR: the area is in use.
pub const KVM_MSR_ENABLED: u64 = 1;
/// Bits 1-5 of the MSR, reserved.
pub const KVM_STEAL_RESERVED_MASK: u64 = 0x3e;
/// `preempted` bit: the vCPU is runnable but not running.
pub const KVM_VCPU_PREEMPTED: u8 = 1;
/// Size (and alignment) of `struct kvm_steal_time`.
pub const STEAL_AREA_SIZE: usize = 64;
const OFF_VERSION: usize = 8;
const OFF_PREEMPTED: usize = 16;

/// A guest write the MSR refuses (the guest gets #GP).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("MSR_KVM_STEAL_TIME {0:#x}: reserved bits 1-5 set")]
pub struct ReservedBits(pub u64);

#[derive(Debug, Default)]
struct VcpuSteal {
    /// The guest's MSR value.
    msr: u64,
    /// The ready wait already added to the guest's `steal`.
    published: u64,
}

/// The steal-time areas of one VM's vCPUs.
pub struct StealTime {
    mem: Arc<GuestMemoryMmap>,
    vcpus: Vec<Mutex<VcpuSteal>>,
    /// Per vCPU: the area's guest-physical address while enabled, else
    /// `u64::MAX` (read without the lock on every deschedule).
    area: Vec<AtomicU64>,
}

const NO_AREA: u64 = u64::MAX;

impl StealTime {
    pub fn new(mem: Arc<GuestMemoryMmap>, vcpus: u32) -> StealTime {
        StealTime {
            mem,
            vcpus: (0..vcpus)
                .map(|_| Mutex::new(VcpuSteal::default()))
                .collect(),
            area: (0..vcpus).map(|_| AtomicU64::new(NO_AREA)).collect(),
        }
    }

    fn state(&self, vcpu: u32) -> Option<std::sync::MutexGuard<'_, VcpuSteal>> {
        self.vcpus
            .get(vcpu as usize)
            .map(|m| m.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// The guest's RDMSR.
    pub fn msr_read(&self, vcpu: u32) -> u64 {
        self.state(vcpu).map_or(0, |s| s.msr)
    }

    /// The guest's WRMSR. Takes effect at the vCPU's next dispatch (its
    /// executor is the writer, so that is the next entry's turn start at
    /// the latest); an area outside RAM is kept but never written.
    pub fn msr_write(&self, vcpu: u32, value: u64) -> Result<(), ReservedBits> {
        if value & KVM_STEAL_RESERVED_MASK != 0 {
            return Err(ReservedBits(value));
        }
        let Some(mut s) = self.state(vcpu) else {
            return Ok(());
        };
        s.msr = value;
        let gpa = value & !(STEAL_AREA_SIZE as u64 - 1);
        let usable = value & KVM_MSR_ENABLED != 0
            && self
                .mem
                .get_slice(GuestAddress(gpa), STEAL_AREA_SIZE)
                .is_ok();
        if value & KVM_MSR_ENABLED != 0 && !usable {
            log::debug!("vcpu{vcpu}: steal-time area {gpa:#x} is not in guest RAM");
        }
        self.area[vcpu as usize].store(if usable { gpa } else { NO_AREA }, Ordering::Release);
        Ok(())
    }

    /// Whether `vcpu` has an area to publish into.
    pub fn enabled(&self, vcpu: u32) -> bool {
        self.area
            .get(vcpu as usize)
            .is_some_and(|a| a.load(Ordering::Acquire) != NO_AREA)
    }

    /// `vcpu` is dispatched and has waited `ready_wait` ns runnable over
    /// its life: publish the growth and clear `preempted`.
    pub fn dispatched(&self, vcpu: u32, ready_wait: u64) {
        let Some(mut s) = self.state(vcpu) else {
            return;
        };
        let gpa = self.area[vcpu as usize].load(Ordering::Acquire);
        if gpa == NO_AREA {
            return;
        }
        let Ok(area) = self.mem.get_slice(GuestAddress(gpa), STEAL_AREA_SIZE) else {
            return;
        };
        // Aligned to 64 bytes inside one region: every field is naturally
        // aligned, so the atomic views cannot fail; if they did, nothing
        // is written.
        let (Ok(steal), Ok(version), Ok(preempted)) = (
            area.get_atomic_ref::<AtomicU64>(0),
            area.get_atomic_ref::<AtomicU32>(OFF_VERSION),
            area.get_atomic_ref::<AtomicU8>(OFF_PREEMPTED),
        ) else {
            return;
        };
        preempted.store(0, Ordering::SeqCst);
        let mut v = version.load(Ordering::Relaxed);
        if v & 1 != 0 {
            v = v.wrapping_add(1);
        }
        v = v.wrapping_add(1);
        version.store(v, Ordering::Relaxed);
        fence(Ordering::Release);
        let delta = ready_wait.saturating_sub(s.published);
        s.published = s.published.max(ready_wait);
        steal.store(
            steal.load(Ordering::Relaxed).wrapping_add(delta),
            Ordering::Relaxed,
        );
        fence(Ordering::Release);
        version.store(v.wrapping_add(1), Ordering::Relaxed);
    }

    /// The runnable `vcpu` was taken off its CPU: set `preempted`.
    pub fn preempted(&self, vcpu: u32) {
        let Some(gpa) = self
            .area
            .get(vcpu as usize)
            .map(|a| a.load(Ordering::Acquire))
            .filter(|g| *g != NO_AREA)
        else {
            return;
        };
        let Ok(area) = self.mem.get_slice(GuestAddress(gpa), STEAL_AREA_SIZE) else {
            return;
        };
        if let Ok(b) = area.get_atomic_ref::<AtomicU8>(OFF_PREEMPTED) {
            b.fetch_or(KVM_VCPU_PREEMPTED, Ordering::SeqCst);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vm_memory::{Bytes, GuestAddress};

    fn ram() -> Arc<GuestMemoryMmap> {
        Arc::new(GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x10000)]).unwrap())
    }

    fn read(mem: &GuestMemoryMmap, gpa: u64) -> (u64, u32, u8) {
        (
            mem.read_obj::<u64>(GuestAddress(gpa)).unwrap(),
            mem.read_obj::<u32>(GuestAddress(gpa + 8)).unwrap(),
            mem.read_obj::<u8>(GuestAddress(gpa + 16)).unwrap(),
        )
    }

    #[test]
    fn publishes_growth_with_even_versions() {
        let mem = ram();
        let st = StealTime::new(mem.clone(), 2);
        // Before the guest enables it nothing is written, and the wait
        // of that time is carried by the first update (as in KVM).
        st.dispatched(0, 500);
        assert_eq!(read(&mem, 0x1000), (0, 0, 0));
        st.msr_write(0, 0x1000 | KVM_MSR_ENABLED).unwrap();
        assert_eq!(st.msr_read(0), 0x1001);
        assert!(st.enabled(0) && !st.enabled(1));
        st.dispatched(0, 700);
        assert_eq!(read(&mem, 0x1000), (700, 2, 0));
        st.preempted(0);
        assert_eq!(read(&mem, 0x1000).2, KVM_VCPU_PREEMPTED);
        st.dispatched(0, 1000);
        assert_eq!(read(&mem, 0x1000), (1000, 4, 0));
        // A total that went backwards adds nothing.
        st.dispatched(0, 900);
        assert_eq!(read(&mem, 0x1000), (1000, 6, 0));
        // The guest's own start value and an odd version it left.
        mem.write_obj(5u64, GuestAddress(0x2000)).unwrap();
        mem.write_obj(7u32, GuestAddress(0x2008)).unwrap();
        st.msr_write(1, 0x2001).unwrap();
        st.dispatched(1, 40);
        assert_eq!(read(&mem, 0x2000), (45, 10, 0));
        // The other vCPU's area is untouched.
        assert_eq!(read(&mem, 0x1000), (1000, 6, 0));
    }

    #[test]
    fn guest_controlled_values_are_checked() {
        let mem = ram();
        let st = StealTime::new(mem.clone(), 1);
        // Reserved bits: #GP, nothing kept.
        for bad in [0x1003u64, 0x1021, 0x103f] {
            assert_eq!(st.msr_write(0, bad), Err(ReservedBits(bad)));
        }
        assert_eq!(st.msr_read(0), 0);
        // Outside RAM, or ending past it: kept, never written.
        for gpa in [0x10000u64, !0x3f] {
            st.msr_write(0, gpa | 1).unwrap();
            assert_eq!(st.msr_read(0), gpa | 1);
            assert!(!st.enabled(0));
            st.dispatched(0, 10);
            st.preempted(0);
        }
        st.msr_write(0, 0xffc0 | 1).unwrap();
        assert!(st.enabled(0));
        st.dispatched(0, 10);
        assert_eq!(read(&mem, 0xffc0), (10, 2, 0));
        // Disabled (bit 0 clear): no more updates.
        st.msr_write(0, 0xffc0).unwrap();
        st.dispatched(0, 20);
        st.preempted(0);
        assert_eq!(read(&mem, 0xffc0), (10, 2, 0));
        // A vCPU index it does not know.
        st.msr_write(7, 0x1001).unwrap();
        st.dispatched(7, 1);
        st.preempted(7);
        assert_eq!(st.msr_read(7), 0);
    }
}
