//! The yield port (0xE0C, guests/PROTOCOL.md): an OUT of any width and value
//! says "this vCPU yields voluntarily" (the bench guest's `yield()` system
//! call). Pacer's scheduled engine treats the exit itself as a yield of the
//! vCPU; to the device model it is a no-op, so that the access is claimed
//! (not logged as an unknown port) and any VMM can ignore it.

use crate::bus::{IoContext, PioDevice};

/// The port (the one definition: `vcpu_engine::vcpu::YIELD_PORT` is this).
pub const YIELD_PORT: u16 = 0xE0C;
/// The ports it claims from [`YIELD_PORT`].
pub const YIELD_PORT_LEN: u16 = 4;

#[derive(Debug, Default)]
pub struct YieldPort;

impl PioDevice for YieldPort {
    fn read(&mut self, _ctx: IoContext, _offset: u16, data: &mut [u8]) {
        // Write-only.
        data.fill(0xff);
    }

    fn write(&mut self, _ctx: IoContext, _offset: u16, _data: &[u8]) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bus::PioBus;
    use crate::exit_port::{EXIT_PORT, EXIT_PORT_LEN};
    use std::sync::{Arc, Mutex};

    #[test]
    fn claims_its_ports_next_to_the_exit_port() {
        let mut bus = PioBus::new();
        bus.insert(YIELD_PORT, YIELD_PORT_LEN, Arc::new(Mutex::new(YieldPort)))
            .unwrap();
        assert_eq!(EXIT_PORT + EXIT_PORT_LEN, YIELD_PORT);
        let ctx = IoContext { vcpu: 2 };
        assert!(bus.write(ctx, YIELD_PORT, &[0]));
        assert!(bus.write(ctx, YIELD_PORT, &0u32.to_le_bytes()));
        let mut b = [0u8; 1];
        assert!(bus.read(ctx, YIELD_PORT + 3, &mut b));
        assert_eq!(b, [0xff]);
        assert!(!bus.write(ctx, YIELD_PORT + 4, &[0]));
    }
}
