//! Pacer's interrupt controller in a VM the engine schedules (no in-kernel
//! irqchip): the VM-wide `IrqChip`, its host side (`ChipHost`: the engine's
//! clock and timers, the guest TSC), and the routing of the local APIC's
//! MSRs to user space. Under `policy = "host"` KVM's
//! in-kernel irqchip serves the VM and nothing here runs.

use super::{DeviceSetupError, VmError};
use devices::irqchip::{GuestCpu, IrqChip};
use kvm_ioctls::{VcpuFd, VmFd};
use std::sync::Arc;
use vcpu_engine::{ChipHost, Engine, TscClock};
use vm_memory::GuestMemoryMmap;

/// Build the interrupt controller of a VM with `vcpus` vCPUs whose CPUID
/// `guest_cpu` describes: the local APIC's MSRs (and the steal-time MSR)
/// exit to user space ([`vcpu_engine::route_apic_msrs`]), and the guest
/// TSC is mapped to the engine's clock through the boot vCPU
/// ([`TscClock::from_vcpu`]). The engine attaches the chip's host to the
/// VM's slot when the VM is added.
pub(super) fn create_irqchip(
    engine: &Arc<Engine>,
    mem: &Arc<GuestMemoryMmap>,
    vm_fd: &VmFd,
    boot_vcpu: &VcpuFd,
    guest_cpu: GuestCpu,
    vcpus: u32,
) -> Result<Arc<IrqChip>, VmError> {
    // Not the local APIC's, but Pacer's under its engine too: the guest's
    // steal-time area (`steal_time.rs`).
    vcpu_engine::route_apic_msrs(vm_fd, &[super::steal_time::MSR_KVM_STEAL_TIME])
        .map_err(DeviceSetupError::MsrRouting)?;
    let tsc = TscClock::from_vcpu(boot_vcpu).map_err(DeviceSetupError::TscClock)?;
    let host = Arc::new(ChipHost::new(engine, tsc, guest_cpu, mem.clone()));
    Ok(IrqChip::new(vcpus, host))
}
