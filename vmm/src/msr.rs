//! Boot MSRs (as Firecracker sets them): SYSENTER/SYSCALL MSRs cleared, TSC
//! 0, fast strings on, MTRRs enabled with write-back default. Only the MSRs
//! KVM lists in KVM_GET_MSR_INDEX_LIST are written.

use kvm_bindings::{kvm_msr_entry, Msrs};
use kvm_ioctls::{Kvm, VcpuFd};

pub const MSR_IA32_TSC: u32 = 0x10;
pub const MSR_IA32_SYSENTER_CS: u32 = 0x174;
pub const MSR_IA32_SYSENTER_ESP: u32 = 0x175;
pub const MSR_IA32_SYSENTER_EIP: u32 = 0x176;
pub const MSR_IA32_MISC_ENABLE: u32 = 0x1a0;
pub const MSR_MTRR_DEF_TYPE: u32 = 0x2ff;
pub const MSR_STAR: u32 = 0xc000_0081;
pub const MSR_LSTAR: u32 = 0xc000_0082;
pub const MSR_CSTAR: u32 = 0xc000_0083;
pub const MSR_SYSCALL_MASK: u32 = 0xc000_0084;
pub const MSR_KERNEL_GS_BASE: u32 = 0xc000_0102;

const MISC_ENABLE_FAST_STRING: u64 = 1;
const MTRR_ENABLE: u64 = 1 << 11;
const MTRR_MEM_TYPE_WB: u64 = 6;

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum MsrError {
    #[error("KVM_GET_MSR_INDEX_LIST failed: {0}")]
    IndexList(kvm_ioctls::Error),
    #[error("building the MSR list failed: {0:?}")]
    Fam(vmm_sys_util::fam::Error),
    #[error("KVM_SET_MSRS failed: {0}")]
    Set(kvm_ioctls::Error),
    #[error("KVM_SET_MSRS set only {set} of {wanted} MSRs")]
    Partial { set: usize, wanted: usize },
}

/// The boot MSR values.
pub fn boot_msr_entries() -> Vec<(u32, u64)> {
    vec![
        (MSR_IA32_SYSENTER_CS, 0),
        (MSR_IA32_SYSENTER_ESP, 0),
        (MSR_IA32_SYSENTER_EIP, 0),
        (MSR_STAR, 0),
        (MSR_CSTAR, 0),
        (MSR_KERNEL_GS_BASE, 0),
        (MSR_SYSCALL_MASK, 0),
        (MSR_LSTAR, 0),
        (MSR_IA32_TSC, 0),
        (MSR_IA32_MISC_ENABLE, MISC_ENABLE_FAST_STRING),
        (MSR_MTRR_DEF_TYPE, MTRR_ENABLE | MTRR_MEM_TYPE_WB),
    ]
}

/// The MSR indices KVM supports.
pub fn supported_msrs(kvm: &Kvm) -> Result<Vec<u32>, MsrError> {
    Ok(kvm
        .get_msr_index_list()
        .map_err(MsrError::IndexList)?
        .as_slice()
        .to_vec())
}

/// Write the boot MSRs that KVM supports.
pub fn setup_msrs(vcpu: &VcpuFd, supported: &[u32]) -> Result<(), MsrError> {
    let entries: Vec<kvm_msr_entry> = boot_msr_entries()
        .into_iter()
        .filter(|(i, _)| supported.contains(i))
        .map(|(index, data)| kvm_msr_entry {
            index,
            data,
            ..Default::default()
        })
        .collect();
    let msrs = Msrs::from_entries(&entries).map_err(MsrError::Fam)?;
    let set = vcpu.set_msrs(&msrs).map_err(MsrError::Set)?;
    if set != entries.len() {
        return Err(MsrError::Partial {
            set,
            wanted: entries.len(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_values() {
        let e = boot_msr_entries();
        assert!(e.contains(&(MSR_MTRR_DEF_TYPE, 0x806)));
        assert!(e.contains(&(MSR_IA32_MISC_ENABLE, 1)));
        assert_eq!(e.len(), 11);
    }
}
