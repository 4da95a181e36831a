//! The ACPI power-management timer: a free-running 24-bit counter at
//! 3.579545 MHz read with a 32-bit IN from the port the FADT names
//! (`PM_TMR_BLK`; 0x608 here, where QEMU's PC machines put it). Guests use
//! it as a clock (kvm-unit-tests' vmexit `inl_from_pmtimer` times reads of
//! it). The count comes from the host's monotonic clock.

use crate::bus::{IoContext, PioDevice};
use std::time::{Duration, Instant};

pub const PM_TIMER_PORT: u16 = 0x608;
pub const PM_TIMER_LEN: u16 = 4;
/// Counter frequency in Hz.
pub const PM_TIMER_HZ: u64 = 3_579_545;
/// The counter is 24 bits wide (FADT flag TMR_VAL_EXT clear).
pub const PM_TIMER_MASK: u32 = 0x00ff_ffff;

/// The counter value after `elapsed`.
pub fn pm_timer_count(elapsed: Duration) -> u32 {
    let ticks = elapsed.as_nanos() * u128::from(PM_TIMER_HZ) / 1_000_000_000;
    (ticks as u64 as u32) & PM_TIMER_MASK
}

pub struct PmTimer {
    start: Instant,
}

impl PmTimer {
    pub fn new() -> Self {
        Self {
            start: Instant::now(),
        }
    }
}

impl Default for PmTimer {
    fn default() -> Self {
        Self::new()
    }
}

impl PioDevice for PmTimer {
    fn read(&mut self, _ctx: IoContext, offset: u16, data: &mut [u8]) {
        let v = pm_timer_count(self.start.elapsed()).to_le_bytes();
        // A narrower read returns the bytes at its offset.
        for (i, b) in data.iter_mut().enumerate() {
            *b = v.get(offset as usize + i).copied().unwrap_or(0);
        }
    }

    fn write(&mut self, _ctx: IoContext, _offset: u16, _data: &[u8]) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn count_runs_at_acpi_rate_and_wraps_at_24_bits() {
        assert_eq!(pm_timer_count(Duration::ZERO), 0);
        assert_eq!(pm_timer_count(Duration::from_secs(1)), 3_579_545);
        assert_eq!(pm_timer_count(Duration::from_micros(1)), 3);
        // 2^24 ticks is 4.687 s: the counter wraps.
        let wrap = Duration::from_nanos(16_777_216 * 1_000_000_000 / PM_TIMER_HZ + 1);
        assert!(pm_timer_count(wrap) < 10);
    }

    #[test]
    fn reads_advance() {
        let mut t = PmTimer::new();
        let ctx = IoContext { vcpu: 0 };
        let mut a = [0u8; 4];
        t.read(ctx, 0, &mut a);
        std::thread::sleep(Duration::from_millis(2));
        let mut b = [0u8; 4];
        t.read(ctx, 0, &mut b);
        let (a, b) = (u32::from_le_bytes(a), u32::from_le_bytes(b));
        assert!(b.wrapping_sub(a) & PM_TIMER_MASK >= 7000, "{a} {b}");
        assert_eq!(b & !PM_TIMER_MASK, 0);
    }
}
