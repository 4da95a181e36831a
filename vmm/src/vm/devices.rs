//! A VM's devices and the buses the exit handler dispatches to. Every VM
//! gets COM1, the i8042 (reset), and the bench guest's result, exit and
//! yield ports; multiboot guests add QEMU's test devices (what
//! kvm-unit-tests expects), Linux guests the ACPI PM timer and power-off
//! registers the FADT names. The MMIO bus holds Pacer's I/O APIC when the
//! VM has Pacer's interrupt controller. Interrupt lines (COM1's, the
//! pc-testdev's) go to that controller's pins, or under `policy = "host"`
//! to KVM's in-kernel irqchip.

use super::{DeviceSetupError, VmError, VmSpec};
use crate::boot::GuestKind;
use crate::irq::KvmIrqLine;
use crate::memory::{self, DeviceMemory};
use devices::acpi_pm::{AcpiPm, ACPI_PM_BASE, ACPI_PM_LEN};
use devices::exit_port::{ExitPort, EXIT_PORT, EXIT_PORT_LEN};
use devices::i8042::{I8042, I8042_BASE, I8042_LEN};
use devices::irq::{EventFdLine, InterruptLine};
use devices::irqchip::regs::{IOAPIC_DEFAULT_BASE, IOAPIC_MMIO_LEN};
use devices::irqchip::IrqChip;
use devices::pc_testdev::PC_TESTDEV_IRQ_LINES;
use devices::pm_timer::{PmTimer, PM_TIMER_LEN, PM_TIMER_PORT};
use devices::qemu_test::insert_qemu_test_devices;
use devices::result_port::{ResultPort, RESULT_PORT_BASE, RESULT_PORT_LEN};
use devices::serial::{ConsoleWriter, SerialConsole, COM1_BASE, COM1_IRQ, COM1_LEN};
use devices::yield_port::{YieldPort, YIELD_PORT, YIELD_PORT_LEN};
use devices::{MmioBus, PioBus, VmEventSink};
use kvm_ioctls::VmFd;
use std::sync::{Arc, Mutex};
use vm_memory::GuestMemoryMmap;

/// A VM's devices on their buses.
pub(super) struct Devices {
    /// COM1, also kept by the `Vm` to flush it and read its last line.
    pub serial: Arc<Mutex<SerialConsole>>,
    pub bus: PioBus,
    pub mmio: MmioBus,
}

/// Build the devices of the VM `spec` describes. `irqchip`: Pacer's
/// interrupt controller (None: KVM's in-kernel one); `sink`: where devices
/// report markers, records and stop requests; `console`: the console log,
/// holding at most `console_limit` bytes of guest output.
pub(super) fn create_devices(
    spec: &VmSpec,
    vm_fd: &Arc<VmFd>,
    mem: &Arc<GuestMemoryMmap>,
    irqchip: Option<&Arc<IrqChip>>,
    sink: Arc<dyn VmEventSink>,
    console: Option<std::fs::File>,
    console_limit: u64,
) -> Result<Devices, VmError> {
    let serial_irq: Arc<dyn InterruptLine> = match irqchip {
        Some(chip) => chip.irq_line(COM1_IRQ),
        None => {
            let line = EventFdLine::new().map_err(DeviceSetupError::EventFd)?;
            vm_fd
                .register_irqfd(&line.0, COM1_IRQ)
                .map_err(DeviceSetupError::SerialIrqfd)?;
            Arc::new(line)
        }
    };
    let serial = Arc::new(Mutex::new(SerialConsole::new(
        serial_irq,
        ConsoleWriter::new(&spec.name, console, spec.console.stdout).with_limit(console_limit),
    )));
    let mut bus = PioBus::new();
    let bus_err = |e: devices::bus::BusError| VmError::Device(e.into());
    bus.insert(COM1_BASE, COM1_LEN, serial.clone())
        .map_err(bus_err)?;
    bus.insert(
        I8042_BASE,
        I8042_LEN,
        Arc::new(Mutex::new(I8042::new(sink.clone()))),
    )
    .map_err(bus_err)?;
    bus.insert(
        RESULT_PORT_BASE,
        RESULT_PORT_LEN,
        Arc::new(Mutex::new(ResultPort::new(
            Arc::new(DeviceMemory(mem.clone())),
            sink.clone(),
        ))),
    )
    .map_err(bus_err)?;
    bus.insert(
        EXIT_PORT,
        EXIT_PORT_LEN,
        Arc::new(Mutex::new(ExitPort::new(sink.clone()))),
    )
    .map_err(bus_err)?;
    bus.insert(YIELD_PORT, YIELD_PORT_LEN, Arc::new(Mutex::new(YieldPort)))
        .map_err(bus_err)?;
    let mut mmio = MmioBus::new();
    if let Some(chip) = irqchip {
        mmio.insert(IOAPIC_DEFAULT_BASE, IOAPIC_MMIO_LEN, chip.ioapic_mmio())
            .map_err(|e| VmError::Device(e.into()))?;
    }
    if spec.boot.guest == GuestKind::Multiboot {
        // pc-testdev's lines are I/O APIC pins: KVM's in-kernel one
        // under `host`, Pacer's under the scheduled policies.
        let lines: Vec<Arc<dyn InterruptLine>> = (0..u32::from(PC_TESTDEV_IRQ_LINES))
            .map(|gsi| -> Arc<dyn InterruptLine> {
                match irqchip {
                    Some(chip) => chip.irq_line(gsi),
                    None => Arc::new(KvmIrqLine::new(vm_fd.clone(), gsi)),
                }
            })
            .collect();
        insert_qemu_test_devices(
            &mut bus,
            sink.clone(),
            lines,
            memory::ram_size(mem),
            spec.vcpus as u16,
        )
        .map_err(bus_err)?;
    }
    if spec.boot.guest == GuestKind::Linux {
        // What the FADT names: the PM timer and the power-off registers.
        bus.insert(
            PM_TIMER_PORT,
            PM_TIMER_LEN,
            Arc::new(Mutex::new(PmTimer::new())),
        )
        .map_err(bus_err)?;
        bus.insert(
            ACPI_PM_BASE,
            ACPI_PM_LEN,
            Arc::new(Mutex::new(AcpiPm::new(sink.clone()))),
        )
        .map_err(bus_err)?;
    }
    Ok(Devices { serial, bus, mmio })
}
