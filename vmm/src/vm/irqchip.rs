//! Pacer's interrupt controller in a VM the engine schedules (no in-kernel
//! irqchip): the VM-wide `IrqChip`, its host side (`ChipHost`: the engine's
//! clock and timers, the guest TSC), and the MSR filter that sends the
//! local APIC's MSRs to user space. Under `policy = "host"` KVM's
//! in-kernel irqchip serves the VM and nothing here runs.

use super::VmError;
use devices::irqchip::{GuestCpu, IrqChip};
use kvm_ioctls::{VcpuFd, VmFd};
use std::sync::Arc;
use vcpu_engine::irq::{ChipHost, TscClock};
use vcpu_engine::Engine;
use vm_memory::GuestMemoryMmap;

/// Build the interrupt controller of a VM with `vcpus` vCPUs whose CPUID
/// `guest_cpu` describes: the local APIC MSRs exit to user space, and the
/// guest TSC is mapped to the engine's clock through the boot vCPU's
/// IA32_TSC.
pub(super) fn create_irqchip(
    engine: &Arc<Engine>,
    mem: &Arc<GuestMemoryMmap>,
    vm_fd: &VmFd,
    boot_vcpu: &VcpuFd,
    tsc_khz: u32,
    guest_cpu: GuestCpu,
    vcpus: u32,
) -> Result<(Arc<ChipHost>, Arc<IrqChip>), VmError> {
    user_space_apic_msrs(vm_fd)?;
    let tsc = tsc_clock(boot_vcpu, tsc_khz)?;
    let host = Arc::new(ChipHost::new(engine, tsc, guest_cpu, mem.clone()));
    let chip = IrqChip::new(vcpus, host.clone());
    Ok((host, chip))
}

/// Send the interrupt controller's MSRs (IA32_APIC_BASE, IA32_TSC_DEADLINE,
/// the x2APIC range, KVM's MSR_KVM_PV_EOI_EN, and MSR_KVM_STEAL_TIME) to user space: without an
/// in-kernel local APIC KVM would handle or refuse them itself.
fn user_space_apic_msrs(vm_fd: &VmFd) -> Result<(), VmError> {
    use kvm_bindings::{
        kvm_enable_cap, kvm_msr_filter, kvm_msr_filter_range, KVM_CAP_X86_USER_SPACE_MSR,
        KVM_MSR_EXIT_REASON_FILTER, KVM_MSR_EXIT_REASON_INVAL, KVM_MSR_EXIT_REASON_UNKNOWN,
        KVM_MSR_FILTER_DEFAULT_ALLOW, KVM_MSR_FILTER_READ, KVM_MSR_FILTER_WRITE,
    };
    let mut cap = kvm_enable_cap {
        cap: KVM_CAP_X86_USER_SPACE_MSR,
        ..Default::default()
    };
    cap.args[0] = u64::from(
        KVM_MSR_EXIT_REASON_INVAL | KVM_MSR_EXIT_REASON_UNKNOWN | KVM_MSR_EXIT_REASON_FILTER,
    );
    vm_fd
        .enable_cap(&cap)
        .map_err(|e| VmError::Device(format!("KVM_CAP_X86_USER_SPACE_MSR: {e}")))?;
    // A clear bit denies the access in KVM, which then exits to user space.
    let deny_x2apic = [0u8; 0x100 / 8];
    let deny_one = [0u8; 1];
    let range = |base: u32, nmsrs: u32, bitmap: &[u8]| kvm_msr_filter_range {
        flags: KVM_MSR_FILTER_READ | KVM_MSR_FILTER_WRITE,
        nmsrs,
        base,
        bitmap: bitmap.as_ptr() as *mut u8,
    };
    let mut filter = kvm_msr_filter {
        flags: KVM_MSR_FILTER_DEFAULT_ALLOW,
        ..Default::default()
    };
    filter.ranges[0] = range(0x800, 0x100, &deny_x2apic);
    filter.ranges[1] = range(0x1b, 1, &deny_one);
    filter.ranges[2] = range(0x6e0, 1, &deny_one);
    filter.ranges[3] = range(devices::irqchip::regs::MSR_KVM_PV_EOI_EN, 1, &deny_one);
    // Not the local APIC's, but Pacer's under its engine too: the guest's
    // steal-time area (`steal_time.rs`).
    filter.ranges[4] = range(super::steal_time::MSR_KVM_STEAL_TIME, 1, &deny_one);
    // SAFETY: every range's bitmap points to a live local array of at
    // least nmsrs bits, valid for the duration of the ioctl (KVM copies it).
    unsafe { vm_fd.set_msr_filter_unchecked(&filter) }
        .map_err(|e| VmError::Device(format!("KVM_X86_SET_MSR_FILTER: {e}")))
}

/// The guest TSC against the engine clock: the clock read first, then the
/// guest's IA32_TSC, so the mapping never lags the guest's TSC (a deadline
/// already passed fires at once).
fn tsc_clock(vcpu: &VcpuFd, tsc_khz: u32) -> Result<TscClock, VmError> {
    use kvm_bindings::{kvm_msr_entry, Msrs};
    let mut msrs = Msrs::from_entries(&[kvm_msr_entry {
        index: 0x10,
        ..Default::default()
    }])
    .map_err(|e| VmError::Device(format!("IA32_TSC: {e:?}")))?;
    let base_ns = vcpu_engine::clock::now_ns();
    vcpu.get_msrs(&mut msrs)
        .map_err(|e| VmError::Device(format!("reading IA32_TSC: {e}")))?;
    Ok(TscClock {
        base_ns,
        base_tsc: msrs.as_slice()[0].data,
        khz: u64::from(tsc_khz),
    })
}
