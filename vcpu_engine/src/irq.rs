//! Interrupt delivery for scheduled vCPUs: what the engine needs from a
//! VM's interrupt controller, and how a pending interrupt gets into a vCPU.
//!
//! Without KVM's in-kernel irqchip, Pacer injects every external interrupt
//! itself with KVM_INTERRUPT, and only when the guest can take it: KVM says
//! so in `ready_for_interrupt_injection` after each exit; when it cannot,
//! the vCPU asks for an interrupt-window exit. The vector is injected
//! *first* and acknowledged in the controller (IRR -> ISR) only once KVM
//! accepted it, and never while KVM may still hold the previous one
//! (injected with no entry since, or before an entry a kick cut short):
//! hardware KVM refuses a second (EEXIST), but the development machines'
//! software KVM takes it in place of the first, whose vector then stays in
//! service in the controller and never reaches the guest (a vCPU asleep
//! for good: two injections in one look before an entry, the second an
//! IPI that arrived meanwhile). [`VcpuRunner`] keeps that count.
//!
//! NMIs go to KVM (KVM_NMI) as they come; KVM delivers one and holds one
//! behind it until the guest's IRET. While KVM holds one the guest could
//! take, no fixed interrupt is injected (KVM would put it first): the
//! vCPU asks for an interrupt window instead, as a processor takes the
//! NMI before any maskable interrupt.
//!
//! One quirk of the development machines' software KVM (no VT-x): after a
//! signal-kicked KVM_RUN with the guest in ring 3 the ready flag reads 0
//! and no window exit follows, yet ring 3 always runs with interrupts
//! enabled and an injection there is delivered at once. So after an EINTR
//! the engine looks at the guest's privilege level (one KVM_GET_SREGS) and
//! injects in ring 3 anyway. On hardware KVM the flag is 1 in that case and
//! the extra look never happens.
//!
//! Except when the flag is right: there, every guest exception taken in
//! ring 3 (the bench guest's `ud2` system calls) passes through KVM, and a
//! kick that lands there leaves the vCPU in ring 3 with the exception
//! still held by KVM (KVM_GET_VCPU_EVENTS shows it). An interrupt injected
//! then goes in behind the exception, whose gate clears IF, and is
//! delivered only where the guest sets IF again: in `sti; hlt`, after the
//! STI and before the HLT, so the wake-up it carries is spent before the
//! guest halts, and it halts for good (two vCPUs waiting for each other's
//! IPI: the ping-pong hang). So the ring-3 override of the flag holds only
//! while KVM holds no event of its own ([`VcpuRunner::kvm_holds_event`]);
//! otherwise the vCPU asks for an interrupt window like any other, and the
//! window (or the guest's next exit) comes once it runs its handler.

use crate::vcpu::{VcpuExitReason, VcpuRunner, VcpuStep};

pub use crate::cpu_events::{CpuEvents, MAX_PENDING_NMIS};

/// What the engine needs from a VM's interrupt controller (Pacer's
/// LAPIC/IOAPIC model implements it; [`NoInterrupts`] is none). The
/// engine calls it from the thread that runs `vcpu` (before each entry,
/// after each exit) and from its timer thread; the controller in turn
/// calls [`crate::Engine::notify`] when something becomes pending, and
/// hands its timer deadlines to [`crate::Engine::set_guest_timer`].
/// [`InterruptSource::attached`] tells it which VM it serves.
pub trait InterruptSource: Send + Sync {
    /// The engine registered the VM this controller serves under `vm`
    /// ([`crate::Engine::add_vm`], [`crate::Engine::add_vm_gated`] call it
    /// once, before any of the VM's vCPUs can run): from now on its
    /// [`crate::Engine::notify`] and [`crate::Engine::set_guest_timer`]
    /// calls name `vm`. Pacer's controller (`devices::irqchip::IrqChip`
    /// over a [`ChipHost`]) attaches its host here, so an embedder never
    /// does it by hand. Default: nothing (a controller that learns its
    /// slot another way, or needs none).
    fn attached(&self, _vm: crate::VmSlot) {}
    /// Cheap: might `vcpu` have something to take? Checked before every entry.
    fn has_pending_hint(&self, vcpu: u32) -> bool;
    /// The highest-priority fixed interrupt deliverable now.
    fn pending_interrupt(&self, vcpu: u32) -> Option<u8>;
    /// `vector` was injected: move it from IRR to ISR.
    fn acknowledge(&self, vcpu: u32, vector: u8);
    /// NMI / INIT / SIPI delivered since the last call.
    fn take_events(&self, vcpu: u32) -> CpuEvents;
    /// The host timer armed for `vcpu`'s local timer fired.
    fn timer_expired(&self, vcpu: u32);
    /// The task priority as CR8 (KVM keeps the guest's CR8 in `kvm_run`
    /// when it has no local APIC of its own).
    fn cr8(&self, _vcpu: u32) -> u64 {
        0
    }
    /// The guest changed CR8.
    fn set_cr8(&self, _vcpu: u32, _cr8: u64) {}
    /// The controller's registers of `vcpu` for diagnostics
    /// ([`crate::Engine::vcpus_engine_now`], Pacer's SIGUSR1 snapshot: a
    /// halted vCPU with a vector requested, say), if it has any.
    fn debug_state(&self, _vcpu: u32) -> Option<serde_json::Value> {
        None
    }
    /// After an exit: an EOI the guest made through KVM's paravirtual EOI
    /// flag (no exit of its own) is done now. Cheap when none is offered.
    fn poll_pv_eoi(&self, _vcpu: u32) {}
}

/// A VM without an interrupt controller (tests, tiny guests).
pub struct NoInterrupts;

impl InterruptSource for NoInterrupts {
    fn has_pending_hint(&self, _vcpu: u32) -> bool {
        false
    }
    fn pending_interrupt(&self, _vcpu: u32) -> Option<u8> {
        None
    }
    fn acknowledge(&self, _vcpu: u32, _vector: u8) {}
    fn take_events(&self, _vcpu: u32) -> CpuEvents {
        CpuEvents::default()
    }
    fn timer_expired(&self, _vcpu: u32) {}
}

/// Inject the controller's highest pending interrupt into `runner` if the
/// guest can take it now, or ask for an interrupt window. `last` is how the
/// previous KVM_RUN ended. Returns the vector injected, if one was.
///
/// [`crate::EngineGate`] calls this before every entry; a VMM with a
/// [`crate::VcpuGate`] of its own (and a user-space interrupt controller)
/// calls it the same way.
pub fn deliver_interrupt(
    src: &dyn InterruptSource,
    runner: &mut VcpuRunner,
    last: &VcpuStep,
) -> Result<Option<u8>, VcpuExitReason> {
    let index = runner.index;
    let Some(vector) = src.pending_interrupt(index) else {
        runner.request_interrupt_window(false);
        return Ok(None);
    };
    // KVM may still hold the last vector injected (an entry cut short by
    // a kick, or none yet): it goes in first, and the window after it
    // brings this one.
    if runner.injection_outstanding()? {
        runner.request_interrupt_window(true);
        return Ok(None);
    }
    let (ready, _if_flag) = runner.interrupt_window();
    let can = ready
        || (*last == VcpuStep::Interrupted && runner.cpl()? == 3 && !runner.kvm_holds_event()?);
    // An NMI KVM still holds (the one latched behind an NMI handler, due
    // at its IRET) goes first: KVM would inject an earlier KVM_INTERRUPT
    // before it. So wait for the window after it.
    if !can || runner.nmi_deliverable_in_kvm()? {
        runner.request_interrupt_window(true);
        return Ok(None);
    }
    match runner.inject_interrupt(vector) {
        Ok(()) => {
            src.acknowledge(index, vector);
            runner.request_interrupt_window(false);
            Ok(Some(vector))
        }
        // Hardware KVM still holds an earlier injection that
        // `injection_outstanding` could not see (an entry a kick cut short
        // before the guest ran): it goes in first; this vector stays
        // pending in the controller.
        Err(VcpuExitReason::KvmError { errno }) if errno == libc::EEXIST => {
            runner.request_interrupt_window(true);
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// Keep CR8 and the controller's task priority one register: a guest
/// `mov cr8` shows in `kvm_run.cr8` after the exit; a TPR write through
/// MMIO or an MSR shows in the controller, and goes to `kvm_run.cr8`.
pub(crate) fn sync_cr8(src: &dyn InterruptSource, runner: &mut VcpuRunner) {
    let index = runner.index;
    let guest = runner.kvm_cr8();
    if guest != runner.cr8_synced {
        src.set_cr8(index, guest);
        runner.cr8_synced = guest;
    }
    let apic_exits = runner.stats.mmio_exits + runner.stats.msr_exits;
    if apic_exits != runner.apic_exits_synced {
        runner.apic_exits_synced = apic_exits;
        let chip = src.cr8(index);
        if chip != runner.cr8_synced {
            runner.set_kvm_cr8(chip);
            runner.cr8_synced = chip;
        }
    }
}

/// Whether a vCPU that just executed HLT must stay runnable: something it
/// can take is pending (`interruptible`: it halted with IF set).
pub(crate) fn halt_is_over(
    src: &dyn InterruptSource,
    index: u32,
    events: &CpuEvents,
    interruptible: bool,
) -> bool {
    events.nmis > 0
        || events.init
        || events.sipi.is_some()
        || (interruptible && src.pending_interrupt(index).is_some())
}

// ---------------------------------------------------------------------------
// Pacer's own interrupt controller (devices::irqchip) as the engine sees it.

use super::{Engine, VmSlot};
use devices::irqchip::{GuestCpu, IrqChip, IrqChipHost, NotifyCause, PvEoiAccess};
use std::sync::{OnceLock, Weak};

impl InterruptSource for IrqChip {
    fn attached(&self, vm: VmSlot) {
        // The chip's host is the engine's when it is a ChipHost; any other
        // host reaches its engine (if it has one) on its own.
        if let Some(host) = self
            .host()
            .as_any()
            .and_then(|a| a.downcast_ref::<ChipHost>())
        {
            host.attach(vm);
        }
    }
    fn has_pending_hint(&self, vcpu: u32) -> bool {
        IrqChip::has_pending_hint(self, vcpu)
    }
    fn pending_interrupt(&self, vcpu: u32) -> Option<u8> {
        IrqChip::pending_interrupt(self, vcpu)
    }
    fn acknowledge(&self, vcpu: u32, vector: u8) {
        if !self.acknowledge_vector(vcpu, vector) {
            log::debug!("vcpu{vcpu}: injected vector {vector:#x} was no longer requested");
        }
    }
    fn take_events(&self, vcpu: u32) -> CpuEvents {
        let e = IrqChip::take_events(self, vcpu);
        CpuEvents {
            nmis: e.nmis.min(MAX_PENDING_NMIS),
            init: e.init,
            sipi: e.sipi,
        }
    }
    fn timer_expired(&self, vcpu: u32) {
        IrqChip::timer_expired(self, vcpu)
    }
    fn cr8(&self, vcpu: u32) -> u64 {
        IrqChip::cr8(self, vcpu)
    }
    fn set_cr8(&self, vcpu: u32, cr8: u64) {
        IrqChip::set_cr8(self, vcpu, cr8)
    }
    fn debug_state(&self, vcpu: u32) -> Option<serde_json::Value> {
        serde_json::to_value(self.lapic_state(vcpu)?).ok()
    }
    fn poll_pv_eoi(&self, vcpu: u32) {
        IrqChip::poll_pv_eoi(self, vcpu)
    }
}

/// KVM_CPUID_FEATURES (leaf 0x40000001) EAX bits that need KVM's
/// in-kernel local APIC: interrupt based async page faults (ASYNC_PF 4,
/// ASYNC_PF_VMEXIT 10, ASYNC_PF_INT 14), PV unhalt / kick (7; the guest's
/// paravirtual spinlocks halt and wait for a kick the engine never sees),
/// PV IPIs (11), directed yield to an APIC id (13), extended destination
/// ids of the I/O APIC (15). PV EOI (6) is not among them: Pacer's local
/// APIC speaks it too (`devices/src/irqchip/lapic/pv_eoi.rs`).
pub const KVM_FEATURES_NEEDING_IN_KERNEL_APIC: u32 =
    (1 << 4) | (1 << 7) | (1 << 10) | (1 << 11) | (1 << 13) | (1 << 14) | (1 << 15);

/// KVM's paravirtual feature leaf.
const KVM_CPUID_FEATURES: u32 = 0x4000_0001;
/// Leaf 1 ECX: x2APIC, TSC-deadline timer mode.
const ECX_X2APIC: u32 = 1 << 21;
const ECX_TSC_DEADLINE: u32 = 1 << 24;

/// The CPUID changes a VM under Pacer's local APIC
/// (`devices::irqchip`, no KVM in-kernel irqchip) needs, on a table from
/// KVM_GET_SUPPORTED_CPUID, before the per-vCPU ones (APIC ids) and
/// KVM_SET_CPUID2:
/// - leaf 1 ECX: x2APIC (bit 21) and the TSC-deadline timer (bit 24), both
///   of which Pacer's local APIC implements and KVM's table may lack
///   without an in-kernel one (a guest without x2APIC uses the xAPIC page,
///   which works too: turn the bit off after this to offer only that);
/// - leaf 0x40000001 EAX: the KVM paravirtual features that only work
///   with KVM's in-kernel local APIC go
///   ([`KVM_FEATURES_NEEDING_IN_KERNEL_APIC`]: a guest relying on PV
///   unhalt would wait for a kick that never comes); PV EOI and the rest
///   of KVM's (kvmclock, steal time) stay.
///
/// The [`ChipHost`]'s `GuestCpu` then says `x2apic: true`, and
/// [`route_apic_msrs`] sends the MSRs these features use to the VMM.
pub fn apic_cpuid(cpuid: &mut kvm_bindings::CpuId) {
    for e in cpuid.as_mut_slice() {
        match e.function {
            0x1 => e.ecx |= ECX_X2APIC | ECX_TSC_DEADLINE,
            KVM_CPUID_FEATURES => e.eax &= !KVM_FEATURES_NEEDING_IN_KERNEL_APIC,
            _ => {}
        }
    }
}

/// How many MSRs [`route_apic_msrs`] may route besides its own: KVM
/// takes at most 16 filter ranges, the local APIC's use 3.
pub const MAX_EXTRA_ROUTED_MSRS: usize = 13;

/// Send the MSRs of a user-space local APIC to the VMM's exit handler
/// ([`crate::VcpuExitHandler::msr_read`] / `msr_write`): a VM that runs
/// under the engine has no KVM in-kernel irqchip, and Pacer's controller
/// (or the VMM's own) answers them. Call it once per VM, before its vCPUs
/// first run. `also`: single MSRs the VMM handles itself as well (Pacer's
/// VMM: MSR_KVM_STEAL_TIME), at most [`MAX_EXTRA_ROUTED_MSRS`].
///
/// What it enables (KVM_CAP_X86_USER_SPACE_MSR, KVM_X86_SET_MSR_FILTER):
/// - the x2APIC registers, 0x800-0x8ff: KVM refuses them itself without
///   an in-kernel local APIC, and an MSR filter cannot route them (KVM
///   ignores filter ranges there), so they reach user space only through
///   the `KVM_MSR_EXIT_REASON_INVAL` exit, which this enables;
/// - IA32_APIC_BASE (0x1b), IA32_TSC_DEADLINE (0x6e0) and
///   MSR_KVM_PV_EOI_EN: KVM would handle these itself, so a filter
///   denies them in KVM (`KVM_MSR_EXIT_REASON_FILTER`), which exits
///   instead; the same for each of `also`. Every other MSR stays KVM's
///   (the filter's default is allow);
/// - `KVM_MSR_EXIT_REASON_UNKNOWN`: an MSR KVM does not know at all goes
///   to the handler too, whose default refuses it with a #GP, as KVM
///   would without the host's `kvm.ignore_msrs`.
///
/// The INVAL exit also brings the handler any other access KVM would
/// answer with a #GP (a reserved value written to an MSR it knows); the
/// default handler refuses it, so the guest sees the same #GP. A later
/// KVM_X86_SET_MSR_FILTER of the VMM's own replaces this filter.
pub fn route_apic_msrs(vm: &kvm_ioctls::VmFd, also: &[u32]) -> std::io::Result<()> {
    use kvm_bindings::{
        KVM_MSR_EXIT_REASON_FILTER, KVM_MSR_EXIT_REASON_INVAL, KVM_MSR_EXIT_REASON_UNKNOWN,
    };
    let apic = [
        IA32_APIC_BASE,
        IA32_TSC_DEADLINE,
        devices::irqchip::regs::MSR_KVM_PV_EOI_EN,
    ];
    filter_to_user_space(
        vm,
        KVM_MSR_EXIT_REASON_INVAL | KVM_MSR_EXIT_REASON_UNKNOWN | KVM_MSR_EXIT_REASON_FILTER,
        &apic,
        also,
    )
}

/// Send single MSRs KVM would handle itself to the VMM's exit handler
/// ([`crate::VcpuExitHandler::msr_read`] / `msr_write`), and nothing else:
/// for a VM whose local APIC is KVM's (`DispatchKind::KvmIrqchip`) but
/// some of whose MSRs the VMM serves (Pacer's: MSR_KVM_STEAL_TIME, so the
/// guest's steal time is the engine's ready wait). Only the filter's
/// exits are enabled (`KVM_MSR_EXIT_REASON_FILTER`): an unknown MSR or a
/// reserved value stays KVM's to refuse. At most
/// [`MAX_EXTRA_ROUTED_MSRS`]; call it once per VM, before its vCPUs first
/// run. A later KVM_X86_SET_MSR_FILTER of the VMM's own replaces it.
pub fn route_msrs(vm: &kvm_ioctls::VmFd, msrs: &[u32]) -> std::io::Result<()> {
    filter_to_user_space(vm, kvm_bindings::KVM_MSR_EXIT_REASON_FILTER, &[], msrs)
}

/// Enable the user-space MSR exits `reasons` and deny `fixed` and `also`
/// (single MSRs) in KVM's filter, whose default allows the rest.
fn filter_to_user_space(
    vm: &kvm_ioctls::VmFd,
    reasons: u32,
    fixed: &[u32],
    also: &[u32],
) -> std::io::Result<()> {
    use kvm_bindings::{kvm_enable_cap, KVM_CAP_X86_USER_SPACE_MSR};
    use kvm_ioctls::{MsrFilterDefaultAction, MsrFilterRange, MsrFilterRangeFlags};
    if also.len() > MAX_EXTRA_ROUTED_MSRS {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "MSR routing: {} extra MSRs, at most {MAX_EXTRA_ROUTED_MSRS}",
                also.len()
            ),
        ));
    }
    let fail = |what: &str, e: kvm_ioctls::Error| {
        std::io::Error::new(
            std::io::Error::from_raw_os_error(e.errno()).kind(),
            format!("{what}: {e}"),
        )
    };
    let mut cap = kvm_enable_cap {
        cap: KVM_CAP_X86_USER_SPACE_MSR,
        ..Default::default()
    };
    cap.args[0] = u64::from(reasons);
    vm.enable_cap(&cap)
        .map_err(|e| fail("KVM_ENABLE_CAP(KVM_CAP_X86_USER_SPACE_MSR)", e))?;
    // A clear bit denies the access in KVM, which then exits to user space.
    let deny = [0u8; 1];
    let ranges: Vec<MsrFilterRange> = fixed
        .iter()
        .chain(also)
        .map(|&base| MsrFilterRange {
            flags: MsrFilterRangeFlags::READ | MsrFilterRangeFlags::WRITE,
            base,
            msr_count: 1,
            bitmap: &deny,
        })
        .collect();
    vm.set_msr_filter(MsrFilterDefaultAction::ALLOW, &ranges)
        .map_err(|e| fail("KVM_X86_SET_MSR_FILTER", e))
}

/// IA32_APIC_BASE.
const IA32_APIC_BASE: u32 = 0x1b;
/// IA32_TSC_DEADLINE.
const IA32_TSC_DEADLINE: u32 = 0x6e0;
/// IA32_TSC, the guest's time-stamp counter.
const IA32_TSC: u32 = 0x10;

/// The guest TSC as a linear function of the engine clock: one pair of
/// readings taken together, and the TSC frequency. [`ChipHost`] converts
/// the guest's TSC-deadline timer with it. Build one with
/// [`TscClock::from_vcpu`] (or from readings of your own).
#[derive(Debug, Clone, Copy)]
pub struct TscClock {
    /// The engine clock ([`crate::clock::now_ns`]) at the reading.
    pub base_ns: u64,
    /// The guest's TSC (IA32_TSC) at the same moment.
    pub base_tsc: u64,
    /// The guest TSC's frequency, kHz (KVM_GET_TSC_KHZ).
    pub khz: u64,
}

impl TscClock {
    /// The mapping of `vcpu`'s guest TSC, read now: the engine clock
    /// ([`crate::clock::now_ns`]) first, then the vCPU's IA32_TSC
    /// (KVM_GET_MSRS), so the mapping never lags the guest's TSC (a
    /// TSC deadline the guest has already passed fires at once), and the
    /// TSC frequency (KVM_GET_TSC_KHZ). Every vCPU of a VM shares one TSC
    /// unless the VMM offsets them, so the boot vCPU's is the VM's; read it
    /// before the vCPU first runs or at any time after. The error names the
    /// ioctl that failed.
    pub fn from_vcpu(vcpu: &kvm_ioctls::VcpuFd) -> std::io::Result<TscClock> {
        use kvm_bindings::{kvm_msr_entry, Msrs};
        let fail = |what: &str, e: kvm_ioctls::Error| {
            std::io::Error::new(
                std::io::Error::from_raw_os_error(e.errno()).kind(),
                format!("{what}: {e}"),
            )
        };
        let khz = vcpu.get_tsc_khz().map_err(|e| fail("KVM_GET_TSC_KHZ", e))?;
        let mut msrs = Msrs::from_entries(&[kvm_msr_entry {
            index: IA32_TSC,
            ..Default::default()
        }])
        .map_err(|e| std::io::Error::other(format!("IA32_TSC: {e:?}")))?;
        let base_ns = crate::clock::now_ns();
        let read = vcpu
            .get_msrs(&mut msrs)
            .map_err(|e| fail("KVM_GET_MSRS (IA32_TSC)", e))?;
        if read != 1 {
            return Err(std::io::Error::other("KVM_GET_MSRS: IA32_TSC not read"));
        }
        Ok(TscClock {
            base_ns,
            base_tsc: msrs.as_slice()[0].data,
            khz: u64::from(khz),
        })
    }

    /// The engine-clock time at which the guest TSC reads `tsc`.
    pub fn tsc_to_ns(&self, tsc: u64) -> u64 {
        let d = i128::from(tsc) - i128::from(self.base_tsc);
        let ns = i128::from(self.base_ns) + d * 1_000_000 / i128::from(self.khz.max(1));
        ns.clamp(0, i128::from(u64::MAX)) as u64
    }

    /// The guest TSC at engine-clock time `ns`.
    pub fn ns_to_tsc(&self, ns: u64) -> u64 {
        let d = i128::from(ns) - i128::from(self.base_ns);
        let tsc = i128::from(self.base_tsc) + d * i128::from(self.khz) / 1_000_000;
        tsc.clamp(0, i128::from(u64::MAX)) as u64
    }
}

/// What Pacer's interrupt controller of one VM needs from the engine: its
/// clock, the guest TSC, host timers, and wake-ups
/// ([`devices::irqchip::IrqChipHost`]).
///
/// Make one per VM with [`ChipHost::new`], build the VM's
/// `devices::irqchip::IrqChip` over it and register the VM with the chip
/// as its [`InterruptSource`] ([`crate::Engine::add_vm`],
/// [`crate::Engine::add_vm_gated`]): the engine attaches the host to the
/// VM's slot then ([`InterruptSource::attached`]); until that, the
/// chip's timers and wake-ups go nowhere.
pub struct ChipHost {
    engine: Weak<Engine>,
    /// The VM's slot in the engine, known once its vCPUs are added.
    vm: OnceLock<VmSlot>,
    /// The run's trace and the VM's trace id, when recorded.
    trace: OnceLock<(crate::trace::Trace, u16)>,
    tsc: TscClock,
    cpu: GuestCpu,
    /// Guest RAM, for the guest's PV EOI flags.
    mem: std::sync::Arc<vm_memory::GuestMemoryMmap>,
}

impl ChipHost {
    /// The host side of one VM's controller: `tsc` maps its guest TSC,
    /// `cpu` is what the guest's CPUID says about the local APIC, `mem` is
    /// guest RAM (for the guest's paravirtual EOI flags).
    pub fn new(
        engine: &std::sync::Arc<Engine>,
        tsc: TscClock,
        cpu: GuestCpu,
        mem: std::sync::Arc<vm_memory::GuestMemoryMmap>,
    ) -> ChipHost {
        ChipHost {
            engine: std::sync::Arc::downgrade(engine),
            vm: OnceLock::new(),
            trace: OnceLock::new(),
            tsc,
            cpu,
            mem,
        }
    }

    /// Attach to the VM's engine slot (the chip's
    /// [`InterruptSource::attached`], when the engine adds the VM).
    pub(crate) fn attach(&self, vm: VmSlot) {
        let _ = self.vm.set(vm);
        if let Some(e) = self.engine.upgrade() {
            if let (Some(t), Some(v)) = (e.trace(), e.vm(vm.0)) {
                let _ = self.trace.set((t.clone(), v.trace_id));
            }
        }
    }
}

impl IrqChipHost for ChipHost {
    fn now_ns(&self) -> u64 {
        super::clock::now_ns()
    }
    fn guest_tsc_to_ns(&self, _vcpu: u32, tsc: u64) -> u64 {
        self.tsc.tsc_to_ns(tsc)
    }
    fn ns_to_guest_tsc(&self, _vcpu: u32, ns: u64) -> u64 {
        self.tsc.ns_to_tsc(ns)
    }
    fn set_timer(&self, vcpu: u32, deadline_ns: Option<u64>) {
        if let (Some(e), Some(vm)) = (self.engine.upgrade(), self.vm.get()) {
            e.set_guest_timer(*vm, vcpu, deadline_ns);
        }
    }
    fn notify(&self, vcpu: u32) {
        if let (Some(e), Some(vm)) = (self.engine.upgrade(), self.vm.get()) {
            e.notify(*vm, vcpu);
        }
    }
    fn notify_because(&self, vcpu: u32, cause: NotifyCause) {
        if self.trace.get().is_none() {
            return self.notify(vcpu);
        }
        let cause = match cause {
            NotifyCause::Timer => crate::trace::Cause::Timer {
                deadline_ns: super::trace_points::firing_deadline(),
            },
            NotifyCause::Ipi { from } => crate::trace::Cause::Ipi {
                from: u16::try_from(from).unwrap_or(u16::MAX),
            },
            NotifyCause::Line { pin } => crate::trace::Cause::Line { pin },
        };
        if let (Some(e), Some(vm)) = (self.engine.upgrade(), self.vm.get()) {
            e.notify_because(*vm, vcpu, cause);
        }
    }
    fn eoi(&self, vcpu: u32, vector: u8) {
        if let Some((t, vm)) = self.trace.get() {
            t.emit(crate::trace::Event::Eoi {
                vcpu: crate::trace::VcpuRef {
                    vm: *vm,
                    vcpu: vcpu as u16,
                },
                vector,
            });
        }
    }
    fn guest_cpu(&self) -> GuestCpu {
        self.cpu
    }
    fn pv_eoi_flag(&self, gpa: u64, access: PvEoiAccess) -> Option<bool> {
        use std::sync::atomic::{AtomicU32, Ordering};
        use vm_memory::{GuestAddress, GuestMemoryBackend, VolatileMemory};
        // The guest's word, as the guest's own `lock btr` sees it.
        let slice = self.mem.get_slice(GuestAddress(gpa), 4).ok()?;
        let word = slice.get_atomic_ref::<AtomicU32>(0).ok()?;
        let old = match access {
            PvEoiAccess::Set => word.fetch_or(1, Ordering::SeqCst),
            PvEoiAccess::Take => word.fetch_and(!1, Ordering::SeqCst),
            PvEoiAccess::Read => word.load(Ordering::SeqCst),
        };
        Some(old & 1 != 0)
    }
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A host for a chip that never arms timers or wakes anyone.
    struct StillHost;

    impl IrqChipHost for StillHost {
        fn now_ns(&self) -> u64 {
            0
        }
        fn guest_tsc_to_ns(&self, _vcpu: u32, tsc: u64) -> u64 {
            tsc
        }
        fn ns_to_guest_tsc(&self, _vcpu: u32, ns: u64) -> u64 {
            ns
        }
        fn set_timer(&self, _vcpu: u32, _deadline_ns: Option<u64>) {}
        fn notify(&self, _vcpu: u32) {}
        fn guest_cpu(&self) -> GuestCpu {
            GuestCpu {
                phys_addr_bits: 39,
                x2apic: true,
            }
        }
    }

    #[test]
    fn nmis_keep_their_count_up_to_one_latched() {
        let chip = IrqChip::new(1, Arc::new(StillHost));
        // x2APIC mode, then NMIs to itself (physical destination 0).
        chip.msr_write(0, 0x1b, 0xfee0_0000 | 0x800 | 0x400 | 0x100)
            .unwrap();
        let nmi = || chip.msr_write(0, 0x830, 0x4400).unwrap();
        nmi();
        nmi();
        let src: &dyn InterruptSource = &*chip;
        assert!(src.has_pending_hint(0));
        // Two NMIs before the vCPU looked: one to deliver, one latched.
        assert_eq!(src.take_events(0).nmis, 2);
        assert!(!src.has_pending_hint(0));
        for _ in 0..3 {
            nmi();
        }
        let mut events = src.take_events(0);
        assert_eq!(events.nmis, MAX_PENDING_NMIS, "a third one is lost");
        events.merge(CpuEvents {
            nmis: 1,
            ..CpuEvents::default()
        });
        assert_eq!(events.nmis, MAX_PENDING_NMIS);
        let mut one = CpuEvents {
            nmis: 1,
            ..CpuEvents::default()
        };
        one.merge(CpuEvents {
            nmis: 1,
            ..CpuEvents::default()
        });
        assert_eq!(one.nmis, 2);
    }

    #[test]
    fn the_snapshot_shows_a_requested_vector() {
        let chip = IrqChip::new(1, Arc::new(StillHost));
        // x2APIC mode, software-enabled, then a fixed IPI 0xfd to itself.
        chip.msr_write(0, 0x1b, 0xfee0_0000 | 0x800 | 0x400 | 0x100)
            .unwrap();
        chip.msr_write(0, 0x80f, 0x1ff).unwrap();
        let src: &dyn InterruptSource = &*chip;
        let irr_word_7 = |src: &dyn InterruptSource| {
            src.debug_state(0).expect("a local APIC")["irr"][7]
                .as_u64()
                .unwrap()
        };
        assert_eq!(irr_word_7(src), 0);
        chip.msr_write(0, 0x830, 0xfd).unwrap();
        assert_eq!(irr_word_7(src), 1 << (0xfd - 0xe0), "vector 0xfd requested");
        assert!(src.debug_state(1).is_none(), "no such vCPU");
    }

    #[test]
    fn tsc_clock_is_linear_both_ways() {
        let c = TscClock {
            base_ns: 1_000_000_000,
            base_tsc: 5_000_000_000,
            khz: 2_500_000,
        };
        assert_eq!(c.tsc_to_ns(5_000_000_000), 1_000_000_000);
        assert_eq!(c.tsc_to_ns(5_002_500_000), 1_001_000_000);
        assert_eq!(c.ns_to_tsc(1_001_000_000), 5_002_500_000);
        assert_eq!(c.ns_to_tsc(999_000_000), 4_997_500_000);
        // Far before the base: clamped, never wrapped.
        assert_eq!(c.tsc_to_ns(0), 0);
        for ns in [0u64, 123_456_789, 1 << 50] {
            let back = c.tsc_to_ns(c.ns_to_tsc(ns));
            assert!(
                back.abs_diff(ns) <= 1 || c.ns_to_tsc(ns) == 0,
                "{ns} -> {back}"
            );
        }
    }
}
