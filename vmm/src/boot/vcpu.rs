//! Everything a vCPU needs before its first KVM_RUN: its CPUID table
//! (the VM-wide base from [`vm_cpuid`]: TSC frequency, TSC-deadline bit,
//! the paravirtual features the local APIC in use can serve; then the
//! topology for its index and the VM's CPUID overrides), the boot MSRs,
//! and the register state of the entry the kernel format asks for. Under the
//! in-kernel irqchip only vCPU 0 starts from this state; KVM holds the
//! others until the guest sends INIT/SIPI, which resets them as on
//! hardware.

use super::regs::{
    boot_fpu, long_mode_regs, long_mode_sregs, multiboot_regs, protected_mode_sregs,
};
use super::{BootError, EntryState};
use crate::cpuid::{self, CpuidError, CpuidOverrides};
use crate::msr;
use kvm_bindings::CpuId;
use kvm_ioctls::{Kvm, VcpuFd};

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

/// The CPUID table every vCPU of a VM starts from: what KVM supports, the
/// TSC frequency (`tsc_khz`, leaf 0x40000010), the TSC-deadline timer bit
/// where the local APIC has that mode, under Pacer's own interrupt
/// controller (`in_kernel_irqchip` false) without the KVM paravirtual
/// features only KVM's in-kernel local APIC implements, and with Pacer's
/// steal time where `pacer_steal_time` (the VMs Pacer's engine schedules,
/// under either local APIC; bench guest and Linux alike).
pub fn vm_cpuid(
    kvm: &Kvm,
    tsc_khz: u32,
    in_kernel_irqchip: bool,
    pacer_steal_time: bool,
) -> Result<CpuId, CpuidError> {
    let mut table = cpuid::supported(kvm)?;
    if !in_kernel_irqchip || kvm.check_extension(kvm_ioctls::Cap::TscDeadlineTimer) {
        // Pacer's LAPIC and KVM's in-kernel one (with the capability)
        // have the TSC-deadline timer mode; older kernels leave the
        // CPUID bit to the VMM.
        cpuid::set_tsc_deadline(&mut table);
    }
    cpuid::set_tsc_khz(&mut table, tsc_khz)?;
    if !in_kernel_irqchip {
        // x2APIC, TSC deadline, no PV feature needing KVM's local APIC.
        vcpu_engine::apic_cpuid(&mut table);
    }
    if pacer_steal_time {
        cpuid::pacer_steal_time(&mut table);
    }
    Ok(table)
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
