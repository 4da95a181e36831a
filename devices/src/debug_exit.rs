//! QEMU's isa-debug-exit device at port 0xF4 (what kvm-unit-tests and other
//! QEMU-targeted test guests use to end a run). A write of value `v` asks
//! the VMM to stop the VM; QEMU then exits with status `(v << 1) | 1`, so a
//! guest can never produce 0 (QEMU's own "normal shutdown") by accident.
//!
//! QEMU's default `iosize` is 1 byte; kvm-unit-tests is run with
//! `iosize=0x4` and writes its status with a 32-bit `outl`, so the device
//! claims 4 ports and accepts 1-, 2- and 4-byte writes, zero-extended.

use crate::exit_port::ExitPort;
use crate::{StopRequest, VmEventSink};
use std::sync::Arc;

pub const DEBUG_EXIT_PORT: u16 = 0xF4;
pub const DEBUG_EXIT_LEN: u16 = 4;

/// The exit status QEMU reports for a write of `value`: `(value << 1) | 1`.
pub fn debug_exit_status(value: u32) -> u64 {
    (u64::from(value) << 1) | 1
}

/// The isa-debug-exit device: an exit port whose writes ask for
/// [`StopRequest::DebugExit`].
pub fn debug_exit(sink: Arc<dyn VmEventSink>) -> ExitPort {
    ExitPort::asking(sink, StopRequest::DebugExit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bus::{IoContext, PioDevice};
    use crate::result_port::tests::Sink;

    #[test]
    fn status_arithmetic() {
        assert_eq!(debug_exit_status(0), 1);
        assert_eq!(debug_exit_status(1), 3);
        assert_eq!(debug_exit_status(0x7f), 0xff);
        assert_eq!(debug_exit_status(u32::MAX), 0x1_ffff_ffff);
    }

    #[test]
    fn writes_request_a_stop_with_the_raw_value() {
        let sink = Arc::new(Sink::default());
        let mut d = debug_exit(sink.clone());
        let ctx = IoContext { vcpu: 1 };
        d.write(ctx, 0, &1u32.to_le_bytes());
        d.write(ctx, 0, &[3]);
        d.write(ctx, 0, &0x0102u16.to_le_bytes());
        // Writes not at the base port are not exit requests.
        d.write(ctx, 2, &[9]);
        assert_eq!(
            *sink.stops.lock().unwrap(),
            vec![
                StopRequest::DebugExit(1),
                StopRequest::DebugExit(3),
                StopRequest::DebugExit(0x0102)
            ]
        );
    }
}
