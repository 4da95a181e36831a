//! Per-vCPU CPUID: KVM_GET_SUPPORTED_CPUID adjusted so that APIC ids and the
//! topology leaves (0x1, 0x4, 0xB, 0x1F) describe one package with one core
//! per vCPU and one thread per core, consistent with the VM's vCPU count.
//! vCPU n has APIC id n ([`apic_id`]); the firmware tables (MP table, ACPI
//! MADT) use the same numbering.
//!
//! VM-wide adjustments: the TSC-deadline bit, the TSC frequency in the
//! hypervisor timing leaf 0x40000010 ([`set_tsc_khz`]), and, when Pacer's
//! own interrupt controller serves the VM, no KVM paravirtual feature that
//! only works with KVM's in-kernel local APIC (the engine's
//! [`vcpu_engine::apic_cpuid`], with x2APIC and the TSC-deadline bit).
//!
//! Note: on PVM hosts (KVM without hardware virtualization, see the
//! README), CPUID executed in guest user or native mode returns the host's
//! values, not these; the bench guest therefore gets its configuration
//! from the command line, never from CPUID.

use kvm_bindings::{
    kvm_cpuid_entry2, CpuId, KVM_CPUID_FLAG_SIGNIFCANT_INDEX, KVM_MAX_CPUID_ENTRIES,
};
use kvm_ioctls::Kvm;

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum CpuidError {
    #[error("KVM_GET_SUPPORTED_CPUID failed: {0}")]
    Supported(kvm_ioctls::Error),
    #[error("building the CPUID table failed: {0:?}")]
    Fam(vmm_sys_util::fam::Error),
    #[error("cpuid.{0} = true, but this host's KVM does not offer it")]
    Unsupported(&'static str),
}

/// CPUID feature bits a VM's config may switch off (`false`) or insist on
/// (`true`: the VM fails to start if KVM cannot offer it). Unset keeps
/// what KVM offers. Pacer has no CPU models; these are the bits whose
/// absence guests test (kvm-unit-tests' xAPIC variant of `apic` needs a
/// CPU without x2APIC).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CpuidOverrides {
    /// Leaf 1 ECX bit 21.
    pub x2apic: Option<bool>,
    /// Leaf 1 ECX bit 24 (TSC-deadline mode of the LAPIC timer).
    pub tsc_deadline: Option<bool>,
    /// Leaf 1 ECX bit 13 (CMPXCHG16B; Linux's SLUB uses it as soon as the
    /// CPU has it).
    pub cx16: Option<bool>,
}

/// Leaf 1 ECX: x2APIC.
pub const ECX_X2APIC: u32 = 1 << 21;
/// Leaf 1 ECX: TSC deadline timer.
pub const ECX_TSC_DEADLINE: u32 = 1 << 24;
/// Leaf 1 ECX: CMPXCHG16B.
pub const ECX_CX16: u32 = 1 << 13;

impl CpuidOverrides {
    fn bits(&self) -> [(&'static str, u32, Option<bool>); 3] {
        [
            ("x2apic", ECX_X2APIC, self.x2apic),
            ("tsc_deadline", ECX_TSC_DEADLINE, self.tsc_deadline),
            ("cx16", ECX_CX16, self.cx16),
        ]
    }

    /// Apply to a vCPU's table (after [`for_vcpu`]).
    pub fn apply(&self, cpuid: &mut CpuId) -> Result<(), CpuidError> {
        for e in cpuid.as_mut_slice() {
            if e.function != 0x1 {
                continue;
            }
            for (name, bit, want) in self.bits() {
                match want {
                    Some(false) => e.ecx &= !bit,
                    Some(true) if e.ecx & bit == 0 => return Err(CpuidError::Unsupported(name)),
                    _ => {}
                }
            }
        }
        Ok(())
    }
}

/// Leaf 0xB/0x1F level types.
const LEVEL_SMT: u32 = 1;
const LEVEL_CORE: u32 = 2;
/// Leaf 1 ECX: hypervisor present.
const ECX_HYPERVISOR: u32 = 1 << 31;
/// Leaf 1 EDX: HTT (more than one logical processor per package).
const EDX_HTT: u32 = 1 << 28;

/// The guest's physical address width (CPUID 0x80000008 EAX[7:0]; 36 if
/// the table does not say).
pub fn phys_addr_bits(table: &CpuId) -> u8 {
    table
        .as_slice()
        .iter()
        .find(|e| e.function == 0x8000_0008)
        .map(|e| (e.eax & 0xff) as u8)
        .filter(|&b| b >= 32)
        .unwrap_or(36)
}

/// The APIC id of vCPU `vcpu` (CPUID, MP table and MADT agree on it).
pub fn apic_id(vcpu: u32) -> u32 {
    vcpu
}

/// KVM's paravirtual leaves (`KVMKVMKVM`).
pub const KVM_CPUID_SIGNATURE: u32 = 0x4000_0000;
pub const KVM_CPUID_FEATURES: u32 = 0x4000_0001;
/// The hypervisor timing leaf (VMware's and KVM's convention): EAX the TSC
/// frequency in kHz, EBX the local APIC timer's (bus) frequency in kHz.
pub const CPUID_TIMING_LEAF: u32 = 0x4000_0010;
/// Both local APICs (KVM's, Pacer's) count their timer at 1 GHz before the
/// divider: 1 ns per count.
pub const APIC_BUS_KHZ: u32 = 1_000_000;

/// KVM_CPUID_FEATURES bits that need KVM's in-kernel local APIC (the
/// engine's list, which [`vcpu_engine::apic_cpuid`] clears).
pub use vcpu_engine::irq::KVM_FEATURES_NEEDING_IN_KERNEL_APIC;

/// Publish the guest's TSC frequency in the hypervisor timing leaf (only
/// when KVM's paravirtual leaves are there: the leaf belongs to that range).
pub fn set_tsc_khz(cpuid: &mut CpuId, tsc_khz: u32) -> Result<(), CpuidError> {
    let slice = cpuid.as_mut_slice();
    let Some(sig) = slice.iter_mut().find(|e| e.function == KVM_CPUID_SIGNATURE) else {
        return Ok(());
    };
    sig.eax = sig.eax.max(CPUID_TIMING_LEAF);
    let mut entries: Vec<kvm_cpuid_entry2> = slice
        .iter()
        .filter(|e| e.function != CPUID_TIMING_LEAF)
        .copied()
        .collect();
    entries.push(kvm_cpuid_entry2 {
        function: CPUID_TIMING_LEAF,
        eax: tsc_khz,
        ebx: APIC_BUS_KHZ,
        ..Default::default()
    });
    *cpuid = CpuId::from_entries(&entries).map_err(CpuidError::Fam)?;
    Ok(())
}

/// KVM_FEATURE_STEAL_TIME (KVM_CPUID_FEATURES EAX bit 5):
/// MSR_KVM_STEAL_TIME and `struct kvm_steal_time`.
pub const KVM_FEATURE_STEAL_TIME: u32 = 1 << 5;
/// KVM_FEATURE_PV_TLB_FLUSH (bit 9): a guest marks a preempted vCPU's
/// steal-time area instead of sending it a TLB-flush IPI, and the
/// hypervisor flushes that vCPU's TLB before it runs again.
pub const KVM_FEATURE_PV_TLB_FLUSH: u32 = 1 << 9;

/// Under Pacer's engine Pacer owns the steal-time area
/// (`vm/steal_time.rs`): offer KVM_FEATURE_STEAL_TIME (whether or not
/// KVM's table has it), and withdraw PV TLB flush, which rides on the
/// area's `preempted` byte: the flush it asks for happens inside KVM on
/// entry, and user space has no call to flush a vCPU's guest TLB.
/// Nothing changes without KVM's leaves.
pub fn pacer_steal_time(cpuid: &mut CpuId) {
    for e in cpuid.as_mut_slice() {
        if e.function == KVM_CPUID_FEATURES {
            e.eax = (e.eax | KVM_FEATURE_STEAL_TIME) & !KVM_FEATURE_PV_TLB_FLUSH;
        }
    }
}

/// KVM's supported CPUID table.
pub fn supported(kvm: &Kvm) -> Result<CpuId, CpuidError> {
    kvm.get_supported_cpuid(KVM_MAX_CPUID_ENTRIES)
        .map_err(CpuidError::Supported)
}

/// Advertise the LAPIC's TSC-deadline timer (leaf 1 ECX bit 24). KVM's
/// in-kernel LAPIC accepts TSC-deadline mode only when the guest's CPUID
/// has the bit, and KVM_GET_SUPPORTED_CPUID does not always set it.
pub fn set_tsc_deadline(cpuid: &mut CpuId) {
    for e in cpuid.as_mut_slice() {
        if e.function == 0x1 {
            e.ecx |= ECX_TSC_DEADLINE;
        }
    }
}

/// Bits needed to number `n` cores (the x2APIC id shift of the core level).
pub fn core_shift(n: u32) -> u32 {
    if n <= 1 {
        0
    } else {
        32 - (n - 1).leading_zeros()
    }
}

fn topology_leaf(function: u32, index: u32, vcpu: u32, nvcpus: u32) -> kvm_cpuid_entry2 {
    let (eax, ebx, ecx) = match index {
        // SMT level: one thread per core.
        0 => (0, 1, LEVEL_SMT << 8),
        // Core level: all vCPUs.
        1 => (core_shift(nvcpus), nvcpus, (LEVEL_CORE << 8) | 1),
        // Invalid level terminates the enumeration.
        i => (0, 0, i),
    };
    kvm_cpuid_entry2 {
        function,
        index,
        flags: KVM_CPUID_FLAG_SIGNIFCANT_INDEX,
        eax,
        ebx,
        ecx: ecx | (index & 0xff),
        edx: apic_id(vcpu),
        ..Default::default()
    }
}

/// The CPUID table of vCPU `vcpu` (0-based; also its APIC id) in a VM of
/// `nvcpus` vCPUs.
pub fn for_vcpu(base: &CpuId, vcpu: u32, nvcpus: u32) -> Result<CpuId, CpuidError> {
    let mut out: Vec<kvm_cpuid_entry2> = Vec::with_capacity(base.as_slice().len() + 4);
    let mut has_0b = false;
    let mut has_1f = false;
    for e in base.as_slice() {
        let mut e = *e;
        match e.function {
            0x1 => {
                // EBX[31:24] initial APIC id, EBX[23:16] logical processors
                // per package, EBX[15:8] CLFLUSH size (kept).
                e.ebx = (e.ebx & 0x0000_ffff) | (apic_id(vcpu) << 24) | ((nvcpus.min(255)) << 16);
                // x2APIC: both interrupt controllers (KVM's in-kernel one
                // and Pacer's) implement it.
                e.ecx |= ECX_HYPERVISOR | ECX_X2APIC;
                if nvcpus > 1 {
                    e.edx |= EDX_HTT;
                } else {
                    e.edx &= !EDX_HTT;
                }
            }
            0x4 => {
                // EAX[31:26] cores per package - 1; EAX[25:14] logical
                // processors sharing this cache - 1 (private L1/L2, shared
                // last level).
                let level = (e.eax >> 5) & 0x7;
                let sharing = if level >= 3 { nvcpus - 1 } else { 0 };
                e.eax =
                    (e.eax & 0x3fff) | ((nvcpus - 1).min(63) << 26) | ((sharing.min(0xfff)) << 14);
            }
            0xb => {
                has_0b = true;
                continue;
            }
            0x1f => {
                has_1f = true;
                continue;
            }
            _ => {}
        }
        out.push(e);
    }
    // Leaf 0xB is always provided (x2APIC topology); 0x1F only if KVM has it.
    let _ = has_0b;
    for i in 0..3 {
        out.push(topology_leaf(0xb, i, vcpu, nvcpus));
    }
    if has_1f {
        for i in 0..3 {
            out.push(topology_leaf(0x1f, i, vcpu, nvcpus));
        }
    }
    CpuId::from_entries(&out).map_err(CpuidError::Fam)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn base() -> CpuId {
        let leaf1 = kvm_cpuid_entry2 {
            function: 1,
            ebx: 0x0008_0800 | (7 << 24),
            ..Default::default()
        };
        let l1 = kvm_cpuid_entry2 {
            function: 4,
            index: 0,
            eax: (1 << 5) | 0x1 | (3 << 26) | (1 << 14),
            ..Default::default()
        };
        let l3 = kvm_cpuid_entry2 {
            function: 4,
            index: 3,
            eax: (3 << 5) | 0x3,
            ..Default::default()
        };
        let b = kvm_cpuid_entry2 {
            function: 0xb,
            index: 0,
            edx: 99,
            ..Default::default()
        };
        CpuId::from_entries(&[leaf1, l1, l3, b]).unwrap()
    }

    fn find(c: &CpuId, f: u32, i: u32) -> kvm_cpuid_entry2 {
        *c.as_slice()
            .iter()
            .find(|e| e.function == f && e.index == i)
            .unwrap()
    }

    #[test]
    fn apic_ids_and_topology() {
        let c = for_vcpu(&base(), 2, 3).unwrap();
        let l1 = find(&c, 1, 0);
        assert_eq!(l1.ebx >> 24, 2);
        assert_eq!((l1.ebx >> 16) & 0xff, 3);
        assert_eq!(l1.ebx & 0xffff, 0x0800);
        assert_ne!(l1.edx & EDX_HTT, 0);
        assert_ne!(l1.ecx & ECX_HYPERVISOR, 0);
        let c1 = find(&c, 4, 0);
        assert_eq!(c1.eax >> 26, 2);
        assert_eq!((c1.eax >> 14) & 0xfff, 0);
        let c3 = find(&c, 4, 3);
        assert_eq!((c3.eax >> 14) & 0xfff, 2);
        let smt = find(&c, 0xb, 0);
        assert_eq!((smt.ebx, smt.edx, (smt.ecx >> 8) & 0xff), (1, 2, 1));
        let core = find(&c, 0xb, 1);
        assert_eq!((core.eax, core.ebx, core.edx), (2, 3, 2));
        assert_eq!((core.ecx >> 8) & 0xff, 2);
        let end = find(&c, 0xb, 2);
        assert_eq!((end.ebx, (end.ecx >> 8) & 0xff), (0, 0));
        // The stale 0xB entry from the base is gone.
        assert_eq!(
            c.as_slice()
                .iter()
                .filter(|e| e.function == 0xb && e.index == 0)
                .count(),
            1
        );
    }

    #[test]
    fn tsc_deadline_bit() {
        let mut c = base();
        assert_eq!(find(&c, 1, 0).ecx & ECX_TSC_DEADLINE, 0);
        set_tsc_deadline(&mut c);
        assert_ne!(find(&c, 1, 0).ecx & ECX_TSC_DEADLINE, 0);
        // Carried into every vCPU's table.
        assert_ne!(
            find(&for_vcpu(&c, 1, 2).unwrap(), 1, 0).ecx & ECX_TSC_DEADLINE,
            0
        );
    }

    #[test]
    fn overrides_clear_and_insist() {
        let mut leaf1 = kvm_cpuid_entry2 {
            function: 1,
            ecx: ECX_X2APIC | ECX_TSC_DEADLINE | 1,
            ..Default::default()
        };
        let mut c = CpuId::from_entries(&[leaf1]).unwrap();
        let off = CpuidOverrides {
            x2apic: Some(false),
            ..Default::default()
        };
        off.apply(&mut c).unwrap();
        assert_eq!(find(&c, 1, 0).ecx, ECX_TSC_DEADLINE | 1);
        let mut with_cx16 = CpuId::from_entries(&[kvm_cpuid_entry2 {
            function: 1,
            ecx: ECX_CX16 | ECX_X2APIC,
            ..Default::default()
        }])
        .unwrap();
        CpuidOverrides {
            cx16: Some(false),
            ..Default::default()
        }
        .apply(&mut with_cx16)
        .unwrap();
        assert_eq!(find(&with_cx16, 1, 0).ecx, ECX_X2APIC);
        CpuidOverrides::default().apply(&mut c).unwrap();
        assert_eq!(find(&c, 1, 0).ecx, ECX_TSC_DEADLINE | 1);
        let on = CpuidOverrides {
            x2apic: Some(true),
            tsc_deadline: Some(true),
            cx16: None,
        };
        let e = on.apply(&mut c).unwrap_err();
        assert!(e.to_string().contains("cpuid.x2apic"), "{e}");
        leaf1.ecx = ECX_X2APIC;
        let mut c = CpuId::from_entries(&[leaf1]).unwrap();
        let e = on.apply(&mut c).unwrap_err();
        assert!(e.to_string().contains("cpuid.tsc_deadline"), "{e}");
    }

    #[test]
    fn tsc_frequency_in_the_timing_leaf() {
        let sig = kvm_cpuid_entry2 {
            function: KVM_CPUID_SIGNATURE,
            eax: KVM_CPUID_FEATURES,
            ebx: 0x4b4d_564b,
            ..Default::default()
        };
        let features = kvm_cpuid_entry2 {
            function: KVM_CPUID_FEATURES,
            eax: 0x0100_7efb,
            ..Default::default()
        };
        let mut c = CpuId::from_entries(&[sig, features]).unwrap();
        set_tsc_khz(&mut c, 2_596_120).unwrap();
        assert_eq!(find(&c, KVM_CPUID_SIGNATURE, 0).eax, CPUID_TIMING_LEAF);
        let t = find(&c, CPUID_TIMING_LEAF, 0);
        assert_eq!((t.eax, t.ebx), (2_596_120, 1_000_000));
        // Setting it again replaces the leaf.
        set_tsc_khz(&mut c, 1000).unwrap();
        assert_eq!(
            c.as_slice()
                .iter()
                .filter(|e| e.function == CPUID_TIMING_LEAF)
                .count(),
            1
        );
        assert_eq!(find(&c, CPUID_TIMING_LEAF, 0).eax, 1000);
        // Without KVM's leaves, nothing is added.
        let mut bare = base();
        set_tsc_khz(&mut bare, 1000).unwrap();
        assert!(!bare.as_slice().iter().any(|e| e.function >= 0x4000_0000));

        // Pacer's own local APIC: kvmclock, steal time, PV EOI and PV TLB
        // flush stay, the features that need KVM's local APIC go.
        vcpu_engine::apic_cpuid(&mut c);
        let f = find(&c, KVM_CPUID_FEATURES, 0).eax;
        assert_eq!(f, 0x0100_7efb & !KVM_FEATURES_NEEDING_IN_KERNEL_APIC);
        for kept in [0, 1, 3, 5, 6, 9, 12, 24] {
            assert_ne!(f & (1 << kept), 0, "bit {kept}");
        }
        for gone in [4, 7, 10, 11, 13, 14] {
            assert_eq!(f & (1 << gone), 0, "bit {gone}");
        }
        // Pacer's steal time: offered even where KVM's table lacks it,
        // PV TLB flush withdrawn, nothing else touched.
        for e in c.as_mut_slice() {
            if e.function == KVM_CPUID_FEATURES {
                e.eax &= !KVM_FEATURE_STEAL_TIME;
            }
        }
        pacer_steal_time(&mut c);
        let g = find(&c, KVM_CPUID_FEATURES, 0).eax;
        assert_eq!(g, (f | KVM_FEATURE_STEAL_TIME) & !KVM_FEATURE_PV_TLB_FLUSH);
        let mut bare = base();
        pacer_steal_time(&mut bare);
        assert!(!bare.as_slice().iter().any(|e| e.function >= 0x4000_0000));
    }

    #[test]
    fn single_vcpu() {
        let c = for_vcpu(&base(), 0, 1).unwrap();
        assert_eq!(find(&c, 1, 0).edx & EDX_HTT, 0);
        assert_eq!(find(&c, 0xb, 1).eax, 0);
        assert_eq!(core_shift(1), 0);
        assert_eq!(core_shift(2), 1);
        assert_eq!(core_shift(3), 2);
        assert_eq!(core_shift(4), 2);
        assert_eq!(core_shift(5), 3);
    }
}
