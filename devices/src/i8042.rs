//! The i8042 keyboard controller, only for its reset line: wraps
//! vm-superio's `I8042Device`, whose reset trigger here turns into a
//! [`StopRequest::Reset`] for the owning VM.

use crate::bus::{IoContext, PioDevice};
use crate::{StopRequest, VmEventSink};
use std::sync::Arc;
use vm_superio::{I8042Device, Trigger};

/// Base port; the device covers 0x60..0x65 (data 0x60, command/status 0x64).
pub const I8042_BASE: u16 = 0x60;
pub const I8042_LEN: u16 = 5;

/// Trigger that reports a reset request to the VM.
pub struct ResetTrigger {
    sink: Arc<dyn VmEventSink>,
}

impl Trigger for ResetTrigger {
    type E = std::convert::Infallible;
    fn trigger(&self) -> Result<(), Self::E> {
        // The vCPU is not known to vm-superio; the sink only uses it for logs.
        self.sink.stop_request(0, StopRequest::Reset);
        Ok(())
    }
}

pub struct I8042 {
    inner: I8042Device<ResetTrigger>,
}

impl I8042 {
    pub fn new(sink: Arc<dyn VmEventSink>) -> Self {
        Self {
            inner: I8042Device::new(ResetTrigger { sink }),
        }
    }
}

impl PioDevice for I8042 {
    fn read(&mut self, _ctx: IoContext, offset: u16, data: &mut [u8]) {
        data.fill(0);
        if let Some(b) = data.first_mut() {
            *b = self.inner.read(offset as u8);
        }
    }

    fn write(&mut self, _ctx: IoContext, offset: u16, data: &[u8]) {
        if let Some(&b) = data.first() {
            // The error type is Infallible.
            let _ = self.inner.write(offset as u8, b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::result_port::tests::Sink;

    #[test]
    fn reset_request() {
        let sink = Arc::new(Sink::default());
        let mut d = I8042::new(sink.clone());
        let ctx = IoContext { vcpu: 0 };
        d.write(ctx, 0, &[0xfe]);
        d.write(ctx, 4, &[0x20]);
        assert!(sink.stops.lock().unwrap().is_empty());
        d.write(ctx, 4, &[0xfe]);
        assert_eq!(*sink.stops.lock().unwrap(), vec![StopRequest::Reset]);
        let mut b = [0xaa];
        d.read(ctx, 4, &mut b);
        assert_eq!(b[0], 0);
    }
}
