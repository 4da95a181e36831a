//! Pacer's emulated devices.
//!
//! Besides the bench guest's own ports, the QEMU-compatible test devices
//! that test suites written for QEMU expect (kvm-unit-tests): isa-debug-exit
//! ([`debug_exit`]), fw_cfg ([`fw_cfg`]), pc-testdev's interrupt lines
//! ([`pc_testdev`]) and the ACPI PM timer ([`pm_timer`]), installed together
//! by [`qemu_test::insert_qemu_test_devices`]. Linux guests get the PM
//! timer and the ACPI power-off registers ([`acpi_pm`]).
//!
//! Devices plug into the port-I/O bus ([`bus::PioBus`]) or the MMIO bus
//! ([`mmio::MmioBus`]) and raise interrupts through an
//! [`irq::InterruptLine`], whichever interrupt controller is behind it
//! (KVM's, or Pacer's own local and I/O APICs in [`irqchip`]). The
//! devices never touch KVM: they talk to the VM that owns them through the
//! [`VmEventSink`] trait (markers, result records, stop requests) and read
//! guest memory through [`GuestMemoryRead`], so they can be unit-tested
//! without a VM.

pub mod acpi_pm;
pub mod bus;
pub mod debug_exit;
pub mod exit_port;
pub mod fw_cfg;
pub mod i8042;
pub mod irq;
pub mod irqchip;
pub mod mmio;
pub mod pc_testdev;
pub mod pm_timer;
pub mod qemu_test;
mod ranges;
pub mod result_payload;
pub mod result_port;
pub mod serial;
pub mod yield_port;

pub use bus::{IoContext, PioBus, PioDevice};
pub use irq::InterruptLine;
pub use irqchip::{IrqChip, IrqChipHost};
pub use mmio::{MmioBus, MmioDevice};
pub use result_port::{Marker, RecordError, RecordKind, ResultRecord};

/// Why a guest asked its VM to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopRequest {
    /// The guest wrote this status to the exit port (0 = success).
    GuestExit(u32),
    /// The guest wrote this value to QEMU's isa-debug-exit port (0xF4); the
    /// VM's exit status is `(value << 1) | 1`
    /// ([`debug_exit::debug_exit_status`]).
    DebugExit(u32),
    /// The guest asked for a CPU reset through the i8042 (0xFE to port 0x64).
    Reset,
    /// The guest entered ACPI S5 (soft off) through PM1a_CNT
    /// ([`acpi_pm`]).
    PowerOff,
}

/// What devices report to the VM that owns them. Implemented by the VMM; the
/// calls come from vCPU threads, so implementations must be cheap and must
/// never block on the guest.
pub trait VmEventSink: Send + Sync {
    /// A progress marker was written to port 0xE00 by vCPU `vcpu`.
    fn marker(&self, vcpu: u32, marker: Marker);
    /// A result record address was written to port 0xE04; this is the parsed
    /// (or rejected) record.
    fn record(&self, vcpu: u32, record: Result<ResultRecord, RecordError>);
    /// The guest asked to stop the VM.
    fn stop_request(&self, vcpu: u32, request: StopRequest);
}

/// Read access to guest-physical memory (implemented by the VMM over its
/// `GuestMemoryMmap`; by a plain buffer in tests).
pub trait GuestMemoryRead: Send + Sync {
    /// Fill `buf` from guest-physical address `gpa`. Returns false when any
    /// part of the range is outside guest RAM (nothing is guaranteed about
    /// `buf` then).
    fn read_guest(&self, gpa: u64, buf: &mut [u8]) -> bool;
}
