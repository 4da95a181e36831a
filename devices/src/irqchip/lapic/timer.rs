//! The local APIC timer: one-shot, periodic and TSC-deadline modes.
//!
//! The APIC bus runs at 1 GHz ([`APIC_BUS_NS_PER_COUNT`]), so one count lasts
//! `divisor` ns. An armed one-shot or periodic timer is an absolute deadline
//! on the host clock; the current count is derived from it on every read. A
//! periodic timer re-arms from its previous deadline, never from the time
//! the expiry was handled, so it does not drift; periods shorter than
//! [`MIN_PERIODIC_NS`] are stretched to it. A TSC deadline is converted to
//! the host clock by [`IrqChipHost::guest_tsc_to_ns`] and checked against
//! the guest TSC ([`IrqChipHost::ns_to_guest_tsc`]) when it fires, so it
//! never fires before the TSC reaches it. Every deadline change goes to
//! [`IrqChipHost::set_timer`].

use super::super::regs::*;
use super::super::IrqChipHost;
use super::Lapic;

/// LVT timer mode (bits 18:17).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TimerMode {
    OneShot,
    Periodic,
    TscDeadline,
    /// Encoding 3: the timer does not run.
    Reserved,
}

/// Timer state besides the LVT entry.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Timer {
    pub(super) initial: u32,
    /// The divide configuration register as written (bits 0, 1, 3).
    pub(super) divide: u32,
    /// Armed: the absolute deadline on the host clock, ns.
    pub(super) deadline_ns: Option<u64>,
    /// IA32_TSC_DEADLINE as programmed (0 = disarmed).
    pub(super) tsc_deadline: u64,
}

/// The timer divisor of a divide configuration value: bits 3,1,0 = 000 -> 2,
/// 001 -> 4, ... 110 -> 128, 111 -> 1.
pub(crate) fn timer_divisor(divide_config: u32) -> u64 {
    let code = (divide_config & 0b11) | ((divide_config & 0b1000) >> 1);
    1 << ((code + 1) & 7)
}

pub(super) fn timer_mode_of(lvt: u32) -> TimerMode {
    match (lvt & LVT_TIMER_MODE_MASK) >> LVT_TIMER_MODE_SHIFT {
        TIMER_MODE_ONE_SHOT => TimerMode::OneShot,
        TIMER_MODE_PERIODIC => TimerMode::Periodic,
        TIMER_MODE_TSC_DEADLINE => TimerMode::TscDeadline,
        _ => TimerMode::Reserved,
    }
}

impl Lapic {
    pub(super) fn timer_mode(&self) -> TimerMode {
        timer_mode_of(self.lvt[LVT_TIMER])
    }

    /// ns per count at the current divide configuration.
    fn ns_per_count(&self) -> u64 {
        timer_divisor(self.timer.divide) * APIC_BUS_NS_PER_COUNT
    }

    /// Length of one period (one-shot: of the count-down), ns.
    fn period_ns(&self) -> u64 {
        let ns = u64::from(self.timer.initial) * self.ns_per_count();
        match self.timer_mode() {
            TimerMode::Periodic => ns.max(MIN_PERIODIC_NS),
            _ => ns,
        }
    }

    /// Change the deadline, telling the host.
    pub(super) fn set_deadline(&mut self, deadline: Option<u64>, host: &dyn IrqChipHost) {
        if self.timer.deadline_ns != deadline {
            self.timer.deadline_ns = deadline;
            host.set_timer(self.vcpu, deadline);
        }
    }

    /// Arm at `deadline` and tell the host even if the deadline is the one
    /// it already has (it may have consumed it).
    fn rearm(&mut self, deadline: u64, host: &dyn IrqChipHost) {
        self.timer.deadline_ns = Some(deadline);
        host.set_timer(self.vcpu, Some(deadline));
    }

    pub(super) fn current_count(&self, now: u64) -> u32 {
        match (self.timer_mode(), self.timer.deadline_ns) {
            (TimerMode::OneShot | TimerMode::Periodic, Some(deadline)) => {
                let counts = deadline.saturating_sub(now) / self.ns_per_count();
                counts.min(u64::from(self.timer.initial)) as u32
            }
            _ => 0,
        }
    }

    pub(super) fn tsc_deadline(&self) -> u64 {
        match self.timer_mode() {
            TimerMode::TscDeadline => self.timer.tsc_deadline,
            _ => 0,
        }
    }

    /// A write to the initial-count register (re)starts the count-down;
    /// 0 stops it. Ignored in TSC-deadline mode.
    pub(super) fn write_initial_count(&mut self, count: u32, host: &dyn IrqChipHost) {
        let mode = self.timer_mode();
        if mode == TimerMode::TscDeadline {
            return;
        }
        self.timer.initial = count;
        let deadline = match mode {
            TimerMode::OneShot | TimerMode::Periodic if count != 0 => {
                Some(host.now_ns().saturating_add(self.period_ns()))
            }
            _ => None,
        };
        match deadline {
            Some(deadline) => self.rearm(deadline, host),
            None => self.set_deadline(None, host),
        }
    }

    /// A new divisor keeps the remaining counts: the remaining time scales.
    pub(super) fn write_divide(&mut self, value: u32, host: &dyn IrqChipHost) {
        let old = timer_divisor(self.timer.divide);
        self.timer.divide = value & TIMER_DIVIDE_WRITABLE;
        let new = timer_divisor(self.timer.divide);
        let running = matches!(self.timer_mode(), TimerMode::OneShot | TimerMode::Periodic);
        if let (true, true, Some(deadline)) = (old != new, running, self.timer.deadline_ns) {
            let now = host.now_ns();
            let remaining =
                u128::from(deadline.saturating_sub(now)) * u128::from(new) / u128::from(old);
            let remaining = u64::try_from(remaining).unwrap_or(u64::MAX);
            self.set_deadline(Some(now.saturating_add(remaining)), host);
        }
    }

    /// After an LVT timer write: a move into or out of TSC-deadline mode
    /// disarms the timer (SDM) and clears the initial count (as KVM); a move
    /// between one-shot and periodic keeps the count-down running (as KVM
    /// and the kvm-unit-tests `apic` test expect); the reserved mode stops it.
    pub(super) fn timer_mode_changed(&mut self, old: TimerMode, host: &dyn IrqChipHost) {
        let new = self.timer_mode();
        if old == new {
            return;
        }
        if (old == TimerMode::TscDeadline) != (new == TimerMode::TscDeadline) {
            self.timer.initial = 0;
            self.timer.tsc_deadline = 0;
            self.set_deadline(None, host);
        } else if new == TimerMode::Reserved {
            self.set_deadline(None, host);
        }
    }

    /// A WRMSR to IA32_TSC_DEADLINE: arms the timer in TSC-deadline mode
    /// (0 disarms); ignored in the other modes. A deadline already passed
    /// fires at once; returns whether the vCPU now has an interrupt to take.
    pub(super) fn write_tsc_deadline(&mut self, tsc: u64, host: &dyn IrqChipHost) -> bool {
        if self.timer_mode() != TimerMode::TscDeadline || !self.hw_enabled() {
            return false;
        }
        self.timer.tsc_deadline = tsc;
        if tsc == 0 {
            self.set_deadline(None, host);
            return false;
        }
        let now = host.now_ns();
        if host.ns_to_guest_tsc(self.vcpu, now) >= tsc {
            self.fire_tsc_deadline(host);
            return self.deliverable().is_some();
        }
        self.rearm(
            host.guest_tsc_to_ns(self.vcpu, tsc)
                .max(now.saturating_add(1)),
            host,
        );
        false
    }

    fn fire_tsc_deadline(&mut self, host: &dyn IrqChipHost) {
        self.timer.tsc_deadline = 0;
        self.set_deadline(None, host);
        self.deliver_timer_interrupt();
    }

    /// The LVT timer interrupt, unless masked (the timer runs on).
    fn deliver_timer_interrupt(&mut self) {
        let lvt = self.lvt[LVT_TIMER];
        if lvt & LVT_MASKED == 0 {
            self.accept_fixed((lvt & LVT_VECTOR_MASK) as u8, false);
        }
    }

    /// The host timer fired. Early or stale calls re-arm the host timer;
    /// a due periodic timer re-arms at the next multiple of its period after
    /// the missed deadline (missed periods coalesce into one interrupt).
    /// Returns whether the vCPU now has an interrupt to take.
    pub(crate) fn timer_expired(&mut self, host: &dyn IrqChipHost) -> bool {
        let Some(deadline) = self.timer.deadline_ns else {
            return false;
        };
        let now = host.now_ns();
        match self.timer_mode() {
            TimerMode::OneShot | TimerMode::Periodic if now < deadline => {
                self.rearm(deadline, host);
                return false;
            }
            TimerMode::OneShot => {
                self.set_deadline(None, host);
                self.deliver_timer_interrupt();
            }
            TimerMode::Periodic => {
                let period = self.period_ns();
                let periods = (now - deadline) / period + 1;
                let next = deadline.saturating_add(periods.saturating_mul(period));
                self.set_deadline(Some(next), host);
                self.deliver_timer_interrupt();
            }
            TimerMode::TscDeadline => {
                if host.ns_to_guest_tsc(self.vcpu, now) < self.timer.tsc_deadline {
                    // The conversion rounded down: try again a little later.
                    self.rearm(deadline.max(now.saturating_add(1)), host);
                    return false;
                }
                self.fire_tsc_deadline(host);
            }
            TimerMode::Reserved => {
                self.set_deadline(None, host);
                return false;
            }
        }
        self.deliverable().is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn divisor_table() {
        // SDM: bits 3,1,0 = 000 -> 2 ... 110 -> 128, 111 -> 1.
        let table = [
            (0b0000, 2),
            (0b0001, 4),
            (0b0010, 8),
            (0b0011, 16),
            (0b1000, 32),
            (0b1001, 64),
            (0b1010, 128),
            (0b1011, 1),
        ];
        for (config, divisor) in table {
            assert_eq!(timer_divisor(config), divisor, "config {config:#06b}");
        }
        // Bit 2 is not part of the code.
        assert_eq!(timer_divisor(0b0100), 2);
    }
}
