//! The exit port (0xE08): a 32-bit OUT asks the VMM to stop the VM with that
//! status (0 = success). The same device, asking for another kind of stop,
//! is QEMU's isa-debug-exit ([`crate::debug_exit`]).

use crate::bus::{IoContext, PioDevice};
use crate::{StopRequest, VmEventSink};
use std::sync::Arc;

pub const EXIT_PORT: u16 = 0xE08;
pub const EXIT_PORT_LEN: u16 = 4;

pub struct ExitPort {
    sink: Arc<dyn VmEventSink>,
    /// The stop a written value asks for.
    request: fn(u32) -> StopRequest,
}

impl ExitPort {
    /// Pacer's exit port: a written value is the guest's exit status.
    pub fn new(sink: Arc<dyn VmEventSink>) -> Self {
        Self::asking(sink, StopRequest::GuestExit)
    }

    /// An exit port whose writes ask for `request(value)`.
    pub fn asking(sink: Arc<dyn VmEventSink>, request: fn(u32) -> StopRequest) -> Self {
        Self { sink, request }
    }
}

impl PioDevice for ExitPort {
    fn read(&mut self, _ctx: IoContext, _offset: u16, data: &mut [u8]) {
        data.fill(0xff);
    }

    fn write(&mut self, ctx: IoContext, offset: u16, data: &[u8]) {
        if offset != 0 || data.is_empty() {
            return;
        }
        // Narrower writes are accepted and zero-extended.
        let mut b = [0u8; 4];
        let n = data.len().min(4);
        b[..n].copy_from_slice(&data[..n]);
        self.sink
            .stop_request(ctx.vcpu, (self.request)(u32::from_le_bytes(b)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::result_port::tests::Sink;

    #[test]
    fn exit_status() {
        let sink = Arc::new(Sink::default());
        let mut p = ExitPort::new(sink.clone());
        let ctx = IoContext { vcpu: 0 };
        p.write(ctx, 0, &3u32.to_le_bytes());
        p.write(ctx, 0, &[0]);
        p.write(ctx, 2, &[1]);
        assert_eq!(
            *sink.stops.lock().unwrap(),
            vec![StopRequest::GuestExit(3), StopRequest::GuestExit(0)]
        );
    }
}
