//! Everything a vCPU needs before its first KVM_RUN: its CPUID table
//! (topology for its index, the VM's CPUID overrides), the boot MSRs, and
//! the register state of the entry the kernel format asks for. Under the
//! in-kernel irqchip only vCPU 0 starts from this state; KVM holds the
//! others until the guest sends INIT/SIPI, which resets them as on
//! hardware.

use super::regs::{
    boot_fpu, long_mode_regs, long_mode_sregs, multiboot_regs, protected_mode_sregs,
};
use super::{BootError, EntryState};
use crate::cpuid::{self, CpuidOverrides};
use crate::msr;
use kvm_bindings::CpuId;
use kvm_ioctls::VcpuFd;

/// What every vCPU of a VM shares at boot.
pub struct VcpuBoot<'a> {
    /// KVM_GET_SUPPORTED_CPUID.
    pub supported_cpuid: &'a CpuId,
    /// KVM_GET_MSR_INDEX_LIST.
    pub supported_msrs: &'a [u32],
    /// vCPUs in the VM.
    pub vcpus: u32,
    pub cpuid: &'a CpuidOverrides,
    pub entry: EntryState,
    /// For log lines.
    pub vm_name: &'a str,
}

fn regs_err(what: &'static str) -> impl FnOnce(kvm_ioctls::Error) -> BootError {
    move |source| BootError::Regs { what, source }
}

/// Configure vCPU `index` for boot.
pub fn configure_vcpu(fd: &VcpuFd, index: u32, b: &VcpuBoot<'_>) -> Result<(), BootError> {
    let mut table = cpuid::for_vcpu(b.supported_cpuid, index, b.vcpus)?;
    b.cpuid.apply(&mut table)?;
    fd.set_cpuid2(&table).map_err(regs_err("cpuid"))?;
    if let Err(e) = msr::setup_msrs(fd, b.supported_msrs) {
        log::warn!("[{}] vcpu{index}: {e}", b.vm_name);
    }
    let mut sregs = fd.get_sregs().map_err(regs_err("sregs"))?;
    let regs = match b.entry {
        EntryState::LongMode { entry } => {
            long_mode_sregs(&mut sregs);
            long_mode_regs(entry, index)
        }
        EntryState::Multiboot { entry, info_addr } => {
            protected_mode_sregs(&mut sregs);
            multiboot_regs(entry, info_addr)
        }
    };
    fd.set_sregs(&sregs).map_err(regs_err("sregs"))?;
    fd.set_regs(&regs).map_err(regs_err("regs"))?;
    fd.set_fpu(&boot_fpu()).map_err(regs_err("fpu"))?;
    Ok(())
}
