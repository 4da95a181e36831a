//! The interrupt-line part of QEMU's pc-testdev: a byte written to port
//! 0x2000 + n sets the level of interrupt line n (0 low, anything else
//! high), for n in 0..24 (the I/O APIC's pins). kvm-unit-tests' ioapic test
//! drives lines 0x0d-0x0f with it to raise edge- and level-triggered
//! interrupts. QEMU's other pc-testdev ports (0xE0-0xEB, the MMIO window)
//! are not used by the tests Pacer runs and are not provided.
//!
//! Each line is an [`InterruptLine`]: KVM's in-kernel I/O APIC under
//! `policy = "host"`, a pin of Pacer's own I/O APIC under its scheduler.

use crate::bus::{IoContext, PioDevice};
use crate::irq::InterruptLine;
use std::sync::Arc;

pub const PC_TESTDEV_IRQ_BASE: u16 = 0x2000;
/// Lines (and ports) the device drives.
pub const PC_TESTDEV_IRQ_LINES: u16 = 24;

pub struct PcTestDev {
    lines: Vec<Arc<dyn InterruptLine>>,
    levels: Vec<bool>,
}

impl PcTestDev {
    /// `lines[n]` is driven by port 0x2000 + n; at most 24 are used.
    pub fn new(mut lines: Vec<Arc<dyn InterruptLine>>) -> Self {
        lines.truncate(PC_TESTDEV_IRQ_LINES as usize);
        let levels = vec![false; lines.len()];
        Self { lines, levels }
    }

    /// The last level set on line `n`.
    pub fn level(&self, n: usize) -> Option<bool> {
        self.levels.get(n).copied()
    }
}

impl PioDevice for PcTestDev {
    fn read(&mut self, _ctx: IoContext, offset: u16, data: &mut [u8]) {
        let level = self.level(offset as usize).unwrap_or(false);
        data.fill(0);
        if let Some(b) = data.first_mut() {
            *b = level as u8;
        }
    }

    fn write(&mut self, _ctx: IoContext, offset: u16, data: &[u8]) {
        let n = offset as usize;
        let (Some(line), Some(&value)) = (self.lines.get(n), data.first()) else {
            return;
        };
        let high = value != 0;
        self.levels[n] = high;
        line.set_level(high);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Records every level change of one line.
    #[derive(Default)]
    struct FakeLine(Mutex<Vec<bool>>);
    impl InterruptLine for FakeLine {
        fn set_level(&self, high: bool) {
            self.0.lock().unwrap().push(high);
        }
    }

    const CTX: IoContext = IoContext { vcpu: 0 };

    fn device() -> (PcTestDev, Vec<Arc<FakeLine>>) {
        let fakes: Vec<Arc<FakeLine>> = (0..PC_TESTDEV_IRQ_LINES)
            .map(|_| Arc::new(FakeLine::default()))
            .collect();
        let lines = fakes
            .iter()
            .map(|f| f.clone() as Arc<dyn InterruptLine>)
            .collect();
        (PcTestDev::new(lines), fakes)
    }

    #[test]
    fn byte_writes_set_line_levels() {
        let (mut d, fakes) = device();
        d.write(CTX, 0x0e, &[1]);
        d.write(CTX, 0x0e, &[0]);
        d.write(CTX, 0x0d, &[0x80]);
        assert_eq!(*fakes[0x0e].0.lock().unwrap(), vec![true, false]);
        assert_eq!(*fakes[0x0d].0.lock().unwrap(), vec![true]);
        assert_eq!(d.level(0x0d), Some(true));
        assert_eq!(d.level(0x0e), Some(false));
        let mut b = [0xaa];
        d.read(CTX, 0x0d, &mut b);
        assert_eq!(b, [1]);
        // Other lines untouched.
        assert!(fakes[0x0f].0.lock().unwrap().is_empty());
    }

    #[test]
    fn writes_beyond_the_lines_are_ignored() {
        let (mut d, fakes) = device();
        d.write(CTX, PC_TESTDEV_IRQ_LINES, &[1]);
        d.write(CTX, 3, &[]);
        assert!(fakes.iter().all(|f| f.0.lock().unwrap().is_empty()));
        // Fewer lines than ports: the rest are ignored too.
        let mut small = PcTestDev::new(vec![fakes[0].clone() as Arc<dyn InterruptLine>]);
        small.write(CTX, 1, &[1]);
        small.write(CTX, 0, &[1]);
        assert_eq!(*fakes[0].0.lock().unwrap(), vec![true]);
    }
}
