//! Per-vCPU CPUID: KVM_GET_SUPPORTED_CPUID adjusted so that APIC ids and the
//! topology leaves (0x1, 0x4, 0xB, 0x1F) describe one package with one core
//! per vCPU and one thread per core, consistent with the VM's vCPU count.
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
}

/// Leaf 1 ECX: x2APIC.
pub const ECX_X2APIC: u32 = 1 << 21;
/// Leaf 1 ECX: TSC deadline timer.
pub const ECX_TSC_DEADLINE: u32 = 1 << 24;

impl CpuidOverrides {
    fn bits(&self) -> [(&'static str, u32, Option<bool>); 2] {
        [
            ("x2apic", ECX_X2APIC, self.x2apic),
            ("tsc_deadline", ECX_TSC_DEADLINE, self.tsc_deadline),
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
        edx: vcpu,
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
                e.ebx = (e.ebx & 0x0000_ffff) | (vcpu << 24) | ((nvcpus.min(255)) << 16);
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
mod tests {
    use super::*;

    fn base() -> CpuId {
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
            tsc_deadline: None,
        };
        off.apply(&mut c).unwrap();
        assert_eq!(find(&c, 1, 0).ecx, ECX_TSC_DEADLINE | 1);
        CpuidOverrides::default().apply(&mut c).unwrap();
        assert_eq!(find(&c, 1, 0).ecx, ECX_TSC_DEADLINE | 1);
        let on = CpuidOverrides {
            x2apic: Some(true),
            tsc_deadline: Some(true),
        };
        let e = on.apply(&mut c).unwrap_err();
        assert!(e.to_string().contains("cpuid.x2apic"), "{e}");
        leaf1.ecx = ECX_X2APIC;
        let mut c = CpuId::from_entries(&[leaf1]).unwrap();
        let e = on.apply(&mut c).unwrap_err();
        assert!(e.to_string().contains("cpuid.tsc_deadline"), "{e}");
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
