//! The set of QEMU test devices a multiboot VM gets (what QEMU-targeted
//! test suites such as kvm-unit-tests expect at fixed ports): isa-debug-exit,
//! fw_cfg, pc-testdev's interrupt lines and the ACPI PM timer. One place so
//! that every engine (host mode, Pacer's own interrupt controller) installs
//! the same set; only the interrupt lines differ.

use crate::bus::{BusError, PioBus, SharedDevice};
use crate::debug_exit::{debug_exit, DEBUG_EXIT_LEN, DEBUG_EXIT_PORT};
use crate::fw_cfg::{FwCfg, FW_CFG_LEN, FW_CFG_PORT};
use crate::irq::InterruptLine;
use crate::pc_testdev::{PcTestDev, PC_TESTDEV_IRQ_BASE, PC_TESTDEV_IRQ_LINES};
use crate::pm_timer::{PmTimer, PM_TIMER_LEN, PM_TIMER_PORT};
use crate::VmEventSink;
use std::sync::{Arc, Mutex};

/// Put the QEMU test devices on `bus`. `lines[n]` is interrupt line n
/// (I/O APIC pin n; up to 24 are used).
pub fn insert_qemu_test_devices(
    bus: &mut PioBus,
    sink: Arc<dyn VmEventSink>,
    lines: Vec<Arc<dyn InterruptLine>>,
    ram_bytes: u64,
    cpus: u16,
) -> Result<(), BusError> {
    let set: [(u16, u16, SharedDevice); 4] = [
        (
            DEBUG_EXIT_PORT,
            DEBUG_EXIT_LEN,
            Arc::new(Mutex::new(debug_exit(sink))),
        ),
        (
            FW_CFG_PORT,
            FW_CFG_LEN,
            Arc::new(Mutex::new(FwCfg::new(ram_bytes, cpus))),
        ),
        (
            PC_TESTDEV_IRQ_BASE,
            PC_TESTDEV_IRQ_LINES,
            Arc::new(Mutex::new(PcTestDev::new(lines))),
        ),
        (
            PM_TIMER_PORT,
            PM_TIMER_LEN,
            Arc::new(Mutex::new(PmTimer::new())),
        ),
    ];
    for (base, len, dev) in set {
        bus.insert(base, len, dev)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::irq::NoInterrupt;
    use crate::result_port::tests::Sink;
    use crate::{IoContext, StopRequest};

    #[test]
    fn the_set_answers_on_its_ports() {
        let sink = Arc::new(Sink::default());
        let mut bus = PioBus::new();
        let lines: Vec<Arc<dyn InterruptLine>> = (0..24)
            .map(|_| Arc::new(NoInterrupt) as Arc<dyn InterruptLine>)
            .collect();
        insert_qemu_test_devices(&mut bus, sink.clone(), lines, 256 << 20, 4).unwrap();
        let ctx = IoContext { vcpu: 0 };
        // fw_cfg: CPU count.
        assert!(bus.write(ctx, 0x510, &5u16.to_le_bytes()));
        let mut b = [0u8];
        assert!(bus.read(ctx, 0x511, &mut b));
        assert_eq!(b, [4]);
        // pc-testdev and the PM timer are claimed.
        assert!(bus.write(ctx, 0x200e, &[1]));
        let mut t = [0u8; 4];
        assert!(bus.read(ctx, 0x608, &mut t));
        // isa-debug-exit stops the VM.
        assert!(bus.write(ctx, 0xf4, &0u32.to_le_bytes()));
        assert_eq!(*sink.stops.lock().unwrap(), vec![StopRequest::DebugExit(0)]);
        // The set does not overlap the bench guest's ports.
        assert!(!bus.write(ctx, 0xE00, &[1]));
    }
}
