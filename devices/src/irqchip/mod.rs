//! Pacer's own interrupt controller: one local APIC per vCPU and one I/O
//! APIC, in user space, for VMs that run without KVM's in-kernel irqchip
//! (so that a guest HLT exits to the VMM as a block event and every
//! interrupt for a halted vCPU is a wake event for the scheduler).
//!
//! # What is modelled (Intel SDM vol. 3, "Advanced Programmable Interrupt
//! Controller"; 82093AA datasheet)
//!
//! - Local APIC (`lapic.rs`, `lapic/access.rs`, `lapic/timer.rs`;
//!   constants in `regs.rs`): xAPIC page (per-vCPU base from
//!   IA32_APIC_BASE) and x2APIC MSRs 0x800-0x8FF with their #GP rules;
//!   IA32_APIC_BASE mode transitions; ID (writable in xAPIC), version 0x14
//!   with 6 LVT entries and no directed EOI, TPR/APR/PPR, EOI, LDR/DFR, SVR
//!   (software enable, focus check, spurious vector), ISR/TMR/IRR, ESR
//!   (errors latch on write; illegal-vector errors; LVT error interrupt),
//!   ICR, SELF IPI, six LVT entries, the timer (one-shot, periodic,
//!   TSC-deadline; 1 ns per count before division) and CR8 as TPR bits 7:4.
//! - IPIs: fixed, lowest priority, NMI, INIT (level de-assert ignored),
//!   start-up; shorthands; physical (with broadcast) and logical (xAPIC flat
//!   and cluster, x2APIC cluster) destinations. Delivery is instantaneous,
//!   so delivery status always reads idle.
//! - Lowest priority picks one destination deterministically: among the
//!   matching software-enabled APICs, the first (by vCPU index) that has
//!   the vector requested or in service with focus checking enabled (SVR
//!   bit 9 clear); otherwise the lowest arbitration priority (APR), ties
//!   split by vector: the (vector mod n)-th of the n tied APICs.
//! - I/O APIC (`ioapic.rs`): 24 pins, edge and level, polarity, mask,
//!   remote IRR and EOI broadcast (the local APIC sends the EOI of a vector
//!   whose TMR bit is set).
//!
//! # What is not
//!
//! No 8259 PIC: ExtINT messages (I/O APIC entries, LVT LINT0) are dropped.
//! SMI and remote read are ignored. Nothing drives LINT0/LINT1, the thermal
//! or the performance-counter LVT entries (their registers work). No CMCI
//! entry, no directed EOI / EOI-broadcast suppression, no ESR bit 7
//! (illegal register address: reserved xAPIC offsets read 0, writes are
//! ignored, as KVM). A hardware-disabled APIC (IA32_APIC_BASE.EN = 0) takes
//! no messages at all, INIT included, and its registers return to the
//! power-up state. Mixed xAPIC/x2APIC VMs: each APIC compares a message's
//! destination in its own mode; an 8-bit destination 0xFF (I/O APIC, xAPIC
//! senders) is broadcast to x2APIC-mode APICs too.
//!
//! # Concurrency and lock order
//!
//! Every vCPU thread, timer thread and device calls into one `IrqChip`.
//! Each local APIC sits behind its own mutex, the I/O APIC behind another.
//! Lock order: **I/O APIC, then at most one local APIC at a time.** A local
//! APIC's lock is never held while taking another lock; an IPI or EOI
//! broadcast produced under it is routed after it is released (the target
//! APICs are then locked one after the other). Each APIC also publishes
//! what matching a destination needs in an atomic (`RouteKey`), so the
//! router locks only the APICs a message is for.
//! [`IrqChipHost::notify_because`] (which names the cause: timer, IPI and
//! its sender, I/O APIC pin) and [`IrqChipHost::eoi`] (the vector an EOI
//! retired) are called with no chip lock held;
//! [`IrqChipHost::set_timer`] and the clock functions are called with that
//! vCPU's local-APIC lock held (so one vCPU's `set_timer` calls arrive in
//! order; an INIT from an I/O APIC pin also holds the I/O APIC's) and must
//! not call back into the chip. The I/O APIC's MMIO device sits behind the
//! MMIO bus's own mutex, taken before all of these.
//!
//! `has_pending_hint` is an atomic per vCPU, rewritten under the APIC's
//! lock after every operation on it, from the APIC's state (a deliverable
//! interrupt or a pending NMI/INIT/SIPI): it is set before `notify` is
//! called and cleared only when nothing is pending.
//!
//! # How a vCPU loop uses it
//!
//! Before KVM_RUN: `kvm_run.cr8 = cr8(v)`; if `has_pending_hint(v)`:
//! `take_events(v)` (INIT: reset and wait for SIPI; SIPI: start if waiting;
//! NMI: KVM_NMI), then `pending_interrupt(v)`: if the guest can take it
//! now, `acknowledge(v)` and KVM_INTERRUPT, else request an interrupt
//! window. After an exit: `set_cr8(v, kvm_run.cr8)`; MMIO exits go to
//! `lapic_mmio_*` first; MSR exits for which `handles_msr` is true go to
//! `msr_*` (#GP on `Err`). A HLT blocks the vCPU unless `pending_interrupt`
//! or events say otherwise; `notify` wakes it.

mod ioapic;
mod lapic;
mod message;
pub mod regs;

#[cfg(test)]
mod tests;

pub use lapic::{ApicMode, LapicState};

use crate::bus::IoContext;
use crate::irq::InterruptLine;
use crate::mmio::MmioDevice;
use ioapic::IoApic;
use lapic::{Effects, Lapic};
use message::{DeliveryMode, Destination, Message, RouteKey};
use serde::Serialize;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// What the interrupt controller needs from the VMM (implemented in vmm).
pub trait IrqChipHost: Send + Sync {
    /// The chip's monotonic clock, ns (the LAPIC timer's time base).
    fn now_ns(&self) -> u64;
    /// Convert between the guest's TSC and the chip clock (TSC-deadline mode).
    /// A deadline fires once `ns_to_guest_tsc(now_ns())` reaches it, so that
    /// conversion must not lag the guest's real TSC: a deadline the guest
    /// has already passed (e.g. `wrmsr(TSC_DEADLINE, rdtsc())`) is then
    /// raised during the WRMSR itself.
    fn guest_tsc_to_ns(&self, vcpu: u32, tsc: u64) -> u64;
    fn ns_to_guest_tsc(&self, vcpu: u32, ns: u64) -> u64;
    /// Arm (Some(absolute deadline ns)) or cancel (None) vCPU `vcpu`'s LAPIC
    /// timer. When it fires the VMM calls `IrqChip::timer_expired(vcpu)`.
    /// A later call replaces an earlier one. Called with that vCPU's
    /// local-APIC lock held (so one vCPU's calls arrive in order), maybe the
    /// I/O APIC's too: must not call into the chip. The clock and TSC
    /// functions are called the same way.
    fn set_timer(&self, vcpu: u32, deadline_ns: Option<u64>);
    /// vCPU `vcpu` has something new to take (a fixed interrupt that may now
    /// be deliverable, an NMI, INIT or SIPI): the VMM wakes it if halted or
    /// kicks it out of KVM_RUN. Always called with no chip lock held; may
    /// name the calling vCPU itself.
    fn notify(&self, vcpu: u32);
    /// [`IrqChipHost::notify`], saying why (the chip always calls this
    /// one; a VMM that records what wakes its vCPUs overrides it).
    fn notify_because(&self, vcpu: u32, _cause: NotifyCause) {
        self.notify(vcpu);
    }
    /// vCPU `vcpu` wrote EOI and so retired `vector`: its handler for it
    /// ran (for traces; no chip lock held).
    fn eoi(&self, _vcpu: u32, _vector: u8) {}
    /// What the guest's CPUID says that IA32_APIC_BASE depends on.
    fn guest_cpu(&self) -> GuestCpu;
    /// The guest's PV EOI flag: bit 0 of the 32-bit word at guest-physical
    /// `gpa` (see `lapic/pv_eoi.rs`), set, taken (cleared, atomically) or
    /// read; the bit's previous value, or None if `gpa` is not guest RAM.
    /// The default (no access to guest memory) turns PV EOI off: the
    /// guest then always writes EOI. Called with the vCPU's local-APIC
    /// lock held; must not call into the chip.
    fn pv_eoi_flag(&self, _gpa: u64, _access: PvEoiAccess) -> Option<bool> {
        None
    }
    /// This host as `Any`, so that code given only the chip
    /// ([`IrqChip::host`]) can reach a host type it knows (the engine's
    /// `vcpu_engine::ChipHost` attaches itself to its VM this way). The
    /// default: not reachable.
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        None
    }
}

/// What [`IrqChipHost::pv_eoi_flag`] does to the guest's flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PvEoiAccess {
    /// Set bit 0: the guest may end the interrupt in service by clearing it.
    Set,
    /// Clear it, atomically, returning what it was.
    Take,
    /// Only read it.
    Read,
}

/// Why the chip notifies a vCPU ([`IrqChipHost::notify_because`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotifyCause {
    /// Its local APIC timer expired (or a TSC deadline written in the past).
    Timer,
    /// An IPI from vCPU `from` (ICR or SELF IPI write).
    Ipi { from: u32 },
    /// An I/O APIC pin: a device line (`Some(pin)`), or an EOI or a
    /// redirection-entry write that delivered a pin's interrupt (`None`).
    Line { pin: Option<u8> },
}

/// The guest's CPUID as far as its local APIC is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GuestCpu {
    /// MAXPHYADDR (CPUID 0x80000008 EAX bits 7:0): IA32_APIC_BASE bits at
    /// and above it are reserved.
    pub phys_addr_bits: u8,
    /// CPUID.1:ECX.x2APIC (bit 21): without it IA32_APIC_BASE.EXTD is
    /// reserved (a write setting it faults), so the APIC never leaves
    /// xAPIC mode.
    pub x2apic: bool,
}

/// Why an MSR access faults: the guest gets #GP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MsrFault {
    #[error("MSR {0:#x} is not an interrupt-controller MSR")]
    NotHandled(u32),
    #[error("no vCPU {0}")]
    NoSuchVcpu(u32),
    #[error("x2APIC MSR {0:#x} accessed while the APIC is not in x2APIC mode")]
    NotX2Apic(u32),
    #[error("x2APIC MSR {0:#x} is not a register")]
    NoSuchRegister(u32),
    #[error("x2APIC register MSR {0:#x} is read-only")]
    ReadOnly(u32),
    #[error("x2APIC register MSR {0:#x} is write-only")]
    WriteOnly(u32),
    #[error("write of {value:#x} to MSR {msr:#x} sets reserved bits")]
    ReservedBits { msr: u32, value: u64 },
    #[error("IA32_APIC_BASE write {value:#x} is an illegal mode transition")]
    IllegalTransition { value: u64 },
}

/// Events for the vCPU itself, collected by [`IrqChip::take_events`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CpuEvents {
    /// NMIs received (each one a KVM_NMI for the VMM).
    pub nmis: u32,
    /// An INIT was received: the LAPIC is already in its INIT state; the
    /// VMM resets the vCPU and makes it wait for SIPI.
    pub init: bool,
    /// The vector of the last start-up IPI received since the last INIT
    /// (an INIT drops earlier ones). Whether it is honoured (vCPU waiting
    /// for SIPI) is the VMM's business.
    pub sipi: Option<u8>,
}

impl CpuEvents {
    pub fn is_empty(&self) -> bool {
        *self == CpuEvents::default()
    }
}

/// One local APIC, its pending-work hint and its routing key, the last
/// two rewritten under the lock after every operation on it.
struct LapicSlot {
    lapic: Mutex<Lapic>,
    hint: AtomicBool,
    /// The APIC offered the guest a PV EOI (mirror, for the cheap poll).
    pv_eoi_offered: AtomicBool,
    /// [`RouteKey`] packed: lets the router skip APICs without locking them.
    route: AtomicU64,
}

/// vCPUs to notify once every lock is released (the first one without
/// allocating: most messages have one destination), and why.
struct Notify {
    cause: NotifyCause,
    first: Option<u32>,
    rest: Vec<u32>,
}

impl Notify {
    fn new(cause: NotifyCause) -> Notify {
        Notify {
            cause,
            first: None,
            rest: Vec::new(),
        }
    }
    fn add(&mut self, vcpu: u32) {
        if self.first == Some(vcpu) || self.rest.contains(&vcpu) {
            return;
        }
        match self.first {
            None => self.first = Some(vcpu),
            Some(_) => self.rest.push(vcpu),
        }
    }
    fn send(self, host: &dyn IrqChipHost) {
        for vcpu in self.first.into_iter().chain(self.rest) {
            host.notify_because(vcpu, self.cause);
        }
    }
}

/// The VM-wide interrupt controller.
pub struct IrqChip {
    host: Arc<dyn IrqChipHost>,
    cpu: GuestCpu,
    lapics: Box<[LapicSlot]>,
    ioapic: Mutex<IoApic>,
}

fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere must not take the VM's interrupts down with it.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl IrqChip {
    /// A chip for `vcpus` vCPUs in their power-up state. APIC id = vCPU
    /// index; vCPU 0 is the BSP.
    pub fn new(vcpus: u32, host: Arc<dyn IrqChipHost>) -> Arc<IrqChip> {
        let lapics = (0..vcpus)
            .map(|v| {
                let lapic = Lapic::new(v);
                LapicSlot {
                    route: AtomicU64::new(lapic.route_key().pack()),
                    lapic: Mutex::new(lapic),
                    hint: AtomicBool::new(false),
                    pv_eoi_offered: AtomicBool::new(false),
                }
            })
            .collect();
        Arc::new(IrqChip {
            cpu: host.guest_cpu(),
            host,
            lapics,
            ioapic: Mutex::new(IoApic::new()),
        })
    }

    pub fn vcpus(&self) -> u32 {
        self.lapics.len() as u32
    }

    /// The host the chip was built over ([`IrqChip::new`]).
    pub fn host(&self) -> &Arc<dyn IrqChipHost> {
        &self.host
    }

    /// Run `f` on vCPU `vcpu`'s APIC under its lock and refresh the hint.
    /// A PV EOI offered to the guest is settled first (taken back, or
    /// done if the guest used it), so `f` sees the in-service register
    /// the guest's EOIs have left.
    fn with_lapic<R>(
        &self,
        vcpu: u32,
        f: impl FnOnce(&mut Lapic, &dyn IrqChipHost) -> R,
    ) -> Option<R> {
        self.settled(vcpu, PvEoiAccess::Take, f)
    }

    /// [`IrqChip::with_lapic`], settling an outstanding PV EOI offer with
    /// `access` (Take: withdraw it; Read: only see whether it was used).
    fn settled<R>(
        &self,
        vcpu: u32,
        access: PvEoiAccess,
        f: impl FnOnce(&mut Lapic, &dyn IrqChipHost) -> R,
    ) -> Option<R> {
        let slot = self.lapics.get(vcpu as usize)?;
        let mut lapic = lock(&slot.lapic);
        let mut settled = Effects::default();
        if lapic.pv_eoi_offered() {
            lapic.settle_pv_eoi(access, &*self.host, &mut settled);
        }
        let result = f(&mut lapic, &*self.host);
        // SeqCst: pairs with the VMM's "in guest" flag (store, then load
        // the other) so that either the VMM sees the hint or we see it in
        // guest and kick it.
        slot.hint.store(lapic.has_work(), Ordering::SeqCst);
        slot.route
            .store(lapic.route_key().pack(), Ordering::Release);
        slot.pv_eoi_offered
            .store(lapic.pv_eoi_offered(), Ordering::Release);
        drop(lapic);
        if let Some(vector) = settled.eoi {
            // Edge-triggered only (no broadcast): the handler ended.
            self.host.eoi(vcpu, vector);
        }
        Some(result)
    }

    /// Route what a register access sent out, then notify.
    fn finish(&self, vcpu: u32, effects: Effects) {
        if let Some(vector) = effects.eoi {
            self.host.eoi(vcpu, vector);
        }
        if effects.notify_self {
            self.host.notify_because(vcpu, NotifyCause::Timer);
        }
        if let Some(msg) = effects.ipi {
            let mut notify = Notify::new(NotifyCause::Ipi { from: vcpu });
            self.route(&msg, &mut notify);
            notify.send(&*self.host);
        }
        if let Some(vector) = effects.eoi_broadcast {
            let mut notify = Notify::new(NotifyCause::Line { pin: None });
            lock(&self.ioapic).eoi(vector, &mut |m| self.route(m, &mut notify));
            notify.send(&*self.host);
        }
    }

    /// Deliver a message to every APIC it is for (lowest priority: to one).
    /// Takes each APIC's lock in turn. Returns whether any accepted it.
    fn route(&self, msg: &Message, notify: &mut Notify) -> bool {
        if msg.mode == DeliveryMode::LowestPriority {
            return match self.lowest_priority_target(msg) {
                Some(target) => self.deliver_to(target, msg, notify),
                None => false,
            };
        }
        let mut accepted = false;
        match msg.dest {
            Destination::SelfOnly => {
                return msg.source.is_some_and(|s| self.deliver_to(s, msg, notify));
            }
            // Unicast (the common case): compare the published ids only.
            Destination::Physical { id, format } if id != format.broadcast() => {
                for (target, slot) in self.lapics.iter().enumerate() {
                    if RouteKey::physical_id(slot.route.load(Ordering::Acquire)) == Some(id) {
                        accepted |= self.deliver_to(target as u32, msg, notify);
                    }
                }
            }
            _ => {
                for target in 0..self.vcpus() {
                    accepted |= self.deliver_to(target, msg, notify);
                }
            }
        }
        accepted
    }

    /// Could `msg` be for `target`, by its published routing key? (Checked
    /// again under its lock: an APIC changing its id or mode concurrently
    /// sees the message as sent before or after the change.)
    fn may_match(&self, target: u32, msg: &Message) -> bool {
        self.lapics.get(target as usize).is_some_and(|slot| {
            RouteKey::unpack(slot.route.load(Ordering::Acquire))
                .matches(target, &msg.dest, msg.source)
        })
    }

    fn deliver_to(&self, target: u32, msg: &Message, notify: &mut Notify) -> bool {
        if !self.may_match(target, msg) {
            return false;
        }
        let acceptance = self
            .with_lapic(target, |l, host| {
                l.matches(&msg.dest, msg.source)
                    .then(|| l.accept(msg, host))
            })
            .flatten()
            .unwrap_or_default();
        if acceptance.notify {
            notify.add(target);
        }
        acceptance.accepted
    }

    /// The one destination of a lowest-priority message (see the module
    /// comment for the rule).
    fn lowest_priority_target(&self, msg: &Message) -> Option<u32> {
        let mut candidates = Vec::new();
        for vcpu in (0..self.vcpus()).filter(|&v| self.may_match(v, msg)) {
            let bid = self.with_lapic(vcpu, |l, _| {
                (l.matches(&msg.dest, msg.source) && l.sw_enabled())
                    .then(|| (l.is_focus_for(msg.vector), l.apr()))
            });
            if let Some(Some((focus, apr))) = bid {
                if focus {
                    return Some(vcpu);
                }
                candidates.push((vcpu, apr));
            }
        }
        let lowest = candidates.iter().map(|&(_, apr)| apr).min()?;
        let tied: Vec<u32> = candidates
            .iter()
            .filter(|&&(_, apr)| apr == lowest)
            .map(|&(v, _)| v)
            .collect();
        tied.get(usize::from(msg.vector) % tied.len()).copied()
    }

    /// xAPIC MMIO read of vCPU `vcpu`'s APIC page. False (data untouched)
    /// if `gpa` is not in that page or the APIC is not in xAPIC mode. Sizes:
    /// each byte reads from its lane of the 32-bit register (bytes 4-15 of a
    /// register slot read 0); an access must lie within the page.
    pub fn lapic_mmio_read(&self, vcpu: u32, gpa: u64, data: &mut [u8]) -> bool {
        self.with_lapic(vcpu, |l, host| l.mmio_read(gpa, data, host))
            .unwrap_or(false)
    }

    /// xAPIC MMIO write; false if not claimed (as for reads). Only aligned
    /// 4-byte writes reach a register; other sizes are claimed and ignored.
    pub fn lapic_mmio_write(&self, vcpu: u32, gpa: u64, data: &[u8]) -> bool {
        match self.with_lapic(vcpu, |l, host| l.mmio_write(gpa, data, host)) {
            Some(Some(effects)) => {
                self.finish(vcpu, effects);
                true
            }
            _ => false,
        }
    }

    /// IA32_APIC_BASE, IA32_TSC_DEADLINE, the x2APIC range 0x800-0x8FF and
    /// KVM's MSR_KVM_PV_EOI_EN.
    pub fn handles_msr(msr: u32) -> bool {
        matches!(
            msr,
            regs::MSR_IA32_APIC_BASE
                | regs::MSR_IA32_TSC_DEADLINE
                | regs::MSR_KVM_PV_EOI_EN
                | regs::X2APIC_MSR_FIRST..=regs::X2APIC_MSR_LAST
        )
    }

    /// Cheap when nothing is offered (one atomic load): if vCPU `vcpu` was
    /// offered a PV EOI and its guest has used it, do that EOI now (the
    /// VMM calls this before each entry, so an EOI is seen at the exit
    /// after it, not at the next interrupt). An offer the guest has not
    /// used stays.
    pub fn poll_pv_eoi(&self, vcpu: u32) {
        if self
            .lapics
            .get(vcpu as usize)
            .is_some_and(|s| s.pv_eoi_offered.load(Ordering::Acquire))
        {
            self.settled(vcpu, PvEoiAccess::Read, |_, _| ());
        }
    }

    pub fn msr_read(&self, vcpu: u32, msr: u32) -> Result<u64, MsrFault> {
        self.with_lapic(vcpu, |l, host| l.msr_read(msr, host))
            .unwrap_or(Err(MsrFault::NoSuchVcpu(vcpu)))
    }

    pub fn msr_write(&self, vcpu: u32, msr: u32, value: u64) -> Result<(), MsrFault> {
        let cpu = self.cpu;
        let effects = self
            .with_lapic(vcpu, |l, host| l.msr_write(msr, value, cpu, host))
            .unwrap_or(Err(MsrFault::NoSuchVcpu(vcpu)))?;
        self.finish(vcpu, effects);
        Ok(())
    }

    /// The host timer armed by `set_timer` for `vcpu` fired (early or stale
    /// calls are harmless: the chip re-arms).
    pub fn timer_expired(&self, vcpu: u32) {
        if self.with_lapic(vcpu, |l, host| l.timer_expired(host)) == Some(true) {
            self.host.notify_because(vcpu, NotifyCause::Timer);
        }
    }

    /// Cheap (one atomic load): might vcpu have something to take? Checked
    /// before every KVM_RUN.
    pub fn has_pending_hint(&self, vcpu: u32) -> bool {
        self.lapics
            .get(vcpu as usize)
            .is_some_and(|s| s.hint.load(Ordering::SeqCst))
    }

    /// Highest-priority fixed interrupt deliverable now (IRR above PPR),
    /// without taking it.
    pub fn pending_interrupt(&self, vcpu: u32) -> Option<u8> {
        self.with_lapic(vcpu, |l, _| l.deliverable()).flatten()
    }

    /// INTA: move that vector from IRR to ISR and return it (when the VMM
    /// injects it). None if nothing is deliverable any more (then nothing
    /// is injected; no spurious vector is produced).
    pub fn acknowledge(&self, vcpu: u32) -> Option<u8> {
        self.with_lapic(vcpu, |l, host| {
            let v = l.acknowledge()?;
            l.offer_pv_eoi(v, host);
            Some(v)
        })
        .flatten()
    }

    /// INTA for `vector`, which the VMM injected after reading it from
    /// [`IrqChip::pending_interrupt`]: IRR -> ISR. Acknowledging the very
    /// vector injected keeps the chip exact when a higher one arrives
    /// between the two calls (it stays requested). False if `vector` is no
    /// longer requested.
    pub fn acknowledge_vector(&self, vcpu: u32, vector: u8) -> bool {
        self.with_lapic(vcpu, |l, host| {
            let taken = l.acknowledge_vector(vector);
            if taken {
                l.offer_pv_eoi(vector, host);
            }
            taken
        })
        .unwrap_or(false)
    }

    /// NMI / INIT / SIPI(vector) delivered to vcpu since the last call.
    pub fn take_events(&self, vcpu: u32) -> CpuEvents {
        self.with_lapic(vcpu, |l, _| l.take_events())
            .unwrap_or_default()
    }

    /// TPR bits 7:4, for the VMM to put in `kvm_run.cr8` before KVM_RUN
    /// (without an in-kernel irqchip KVM keeps CR8 from that field).
    pub fn cr8(&self, vcpu: u32) -> u64 {
        self.with_lapic(vcpu, |l, _| l.cr8()).unwrap_or(0)
    }

    /// The guest's CR8 after an exit (`kvm_run.cr8`): TPR = CR8 << 4. A
    /// lower TPR may make an interrupt deliverable (see the hint).
    pub fn set_cr8(&self, vcpu: u32, cr8: u64) {
        self.with_lapic(vcpu, |l, _| l.set_cr8(cr8));
    }

    /// I/O APIC pin level (device interrupts); pins past 23 are ignored.
    pub fn set_irq(&self, pin: u32, high: bool) {
        let mut notify = Notify::new(NotifyCause::Line {
            pin: u8::try_from(pin).ok(),
        });
        lock(&self.ioapic).set_input(pin, high, &mut |m| self.route(m, &mut notify));
        notify.send(&*self.host);
    }

    /// An InterruptLine for a pin, for devices (serial is ISA IRQ 4 -> pin 4).
    pub fn irq_line(self: &Arc<Self>, pin: u32) -> Arc<dyn InterruptLine> {
        Arc::new(IoApicPin {
            chip: Arc::downgrade(self),
            pin,
        })
    }

    /// The I/O APIC's registers as an MMIO device at 0xFEC0_0000 (len
    /// 0x1000), for an MmioBus. Sizes: see `ioapic.rs`.
    pub fn ioapic_mmio(self: &Arc<Self>) -> Arc<Mutex<dyn MmioDevice>> {
        Arc::new(Mutex::new(IoApicMmio {
            chip: Arc::downgrade(self),
        }))
    }

    fn ioapic_mmio_read(&self, offset: u64, data: &mut [u8]) {
        lock(&self.ioapic).mmio_read(offset, data);
    }

    fn ioapic_mmio_write(&self, offset: u64, data: &[u8]) {
        let mut notify = Notify::new(NotifyCause::Line { pin: None });
        lock(&self.ioapic).mmio_write(offset, data, &mut |m| self.route(m, &mut notify));
        notify.send(&*self.host);
    }

    /// Per-vCPU register dump for debugging/tests; None for no such vCPU.
    pub fn lapic_state(&self, vcpu: u32) -> Option<LapicState> {
        // A look for debugging must not withdraw a PV EOI offer.
        self.settled(vcpu, PvEoiAccess::Read, |l, host| l.state(host))
    }

    /// Redirection entry of an I/O APIC pin (debugging/tests).
    pub fn ioapic_entry(&self, pin: u32) -> Option<u64> {
        lock(&self.ioapic).entry(pin as usize)
    }
}

/// A device's interrupt line into an I/O APIC pin. Holds the chip weakly:
/// devices may be owned (through the host) by the chip's owner.
struct IoApicPin {
    chip: Weak<IrqChip>,
    pin: u32,
}

impl InterruptLine for IoApicPin {
    fn set_level(&self, high: bool) {
        if let Some(chip) = self.chip.upgrade() {
            chip.set_irq(self.pin, high);
        }
    }
}

/// The I/O APIC's MMIO face.
struct IoApicMmio {
    chip: Weak<IrqChip>,
}

impl MmioDevice for IoApicMmio {
    fn read(&mut self, _ctx: IoContext, offset: u64, data: &mut [u8]) {
        match self.chip.upgrade() {
            Some(chip) => chip.ioapic_mmio_read(offset, data),
            None => data.fill(0xFF),
        }
    }

    fn write(&mut self, _ctx: IoContext, offset: u64, data: &[u8]) {
        if let Some(chip) = self.chip.upgrade() {
            chip.ioapic_mmio_write(offset, data);
        }
    }
}
