//! The MMIO address space: guest-physical ranges, each mapped to a device,
//! on the same [`Bus`] type as port I/O ([`crate::bus`]). Shared by all
//! vCPUs of one VM; each device sits behind its own mutex.

use crate::bus::{AddressSpace, Bus, IoContext, RangeError};
use std::sync::{Arc, Mutex};

/// Errors from building an MMIO bus.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MmioBusError {
    #[error("MMIO range {base:#x}+{len:#x} is empty or wraps past the top of the address space")]
    BadRange { base: u64, len: u64 },
    #[error("MMIO range {base:#x}+{len:#x} overlaps the device at {other:#x}")]
    Overlap { base: u64, len: u64, other: u64 },
}

/// An MMIO device. `offset` is relative to the base the device was inserted
/// at. Devices must not panic on any guest input (any offset, any size).
pub trait MmioDevice: Send {
    fn read(&mut self, ctx: IoContext, offset: u64, data: &mut [u8]);
    fn write(&mut self, ctx: IoContext, offset: u64, data: &[u8]);
}

/// Shared handle of a device on the MMIO bus.
pub type SharedMmioDevice = Arc<Mutex<dyn MmioDevice>>;

/// MMIO: 64-bit guest-physical addresses, [`MmioDevice`]s.
pub struct Mmio;

impl AddressSpace for Mmio {
    type Addr = u64;
    type Device = dyn MmioDevice;
    type Error = MmioBusError;
    const LIMIT: u64 = u64::MAX;
    fn addr(offset: u64) -> u64 {
        offset
    }
    fn range_error(base: u64, len: u64, e: RangeError) -> MmioBusError {
        match e {
            RangeError::Bad => MmioBusError::BadRange { base, len },
            RangeError::Overlap(other) => MmioBusError::Overlap { base, len, other },
        }
    }
    fn read(dev: &mut Self::Device, ctx: IoContext, offset: u64, data: &mut [u8]) {
        dev.read(ctx, offset, data);
    }
    fn write(dev: &mut Self::Device, ctx: IoContext, offset: u64, data: &[u8]) {
        dev.write(ctx, offset, data);
    }
}

/// The MMIO bus: the one [`Bus`] type over [`Mmio`].
pub type MmioBus = Bus<Mmio>;

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Regs {
        writes: Vec<(u64, Vec<u8>)>,
    }
    impl MmioDevice for Regs {
        fn read(&mut self, _ctx: IoContext, offset: u64, data: &mut [u8]) {
            data.fill(offset as u8);
        }
        fn write(&mut self, _ctx: IoContext, offset: u64, data: &[u8]) {
            self.writes.push((offset, data.to_vec()));
        }
    }

    const CTX: IoContext = IoContext { vcpu: 1 };

    #[test]
    fn dispatch_and_unclaimed() {
        let mut bus = MmioBus::new();
        let dev = Arc::new(Mutex::new(Regs::default()));
        bus.insert(0xfec0_0000, 0x1000, dev.clone()).unwrap();
        let mut b = [0u8; 4];
        assert!(bus.read(CTX, 0xfec0_0010, &mut b));
        assert_eq!(b, [0x10; 4]);
        assert!(bus.write(CTX, 0xfec0_0ffc, &[1, 2, 3, 4]));
        assert_eq!(dev.lock().unwrap().writes, vec![(0xffc, vec![1, 2, 3, 4])]);
        // Straddling the end, below the start, past the end: unclaimed.
        assert!(!bus.read(CTX, 0xfec0_0ffe, &mut b));
        assert_eq!(b, [0xff; 4]);
        assert!(!bus.write(CTX, 0xfebf_fffc, &[0; 4]));
        assert!(!bus.write(CTX, 0xfec0_1000, &[0]));
        assert!(!bus.read(CTX, u64::MAX, &mut b));
    }

    #[test]
    fn overlaps_and_bad_ranges_rejected() {
        let mut bus = MmioBus::new();
        let d = || Arc::new(Mutex::new(Regs::default()));
        bus.insert(0x1000, 0x1000, d()).unwrap();
        for (base, len) in [(0x1fff, 1), (0x800, 0x801), (0x0, 0x10000), (0x1800, 0x10)] {
            assert!(matches!(
                bus.insert(base, len, d()),
                Err(MmioBusError::Overlap { other: 0x1000, .. })
            ));
        }
        assert!(matches!(
            bus.insert(0x5000, 0, d()),
            Err(MmioBusError::BadRange { .. })
        ));
        assert!(matches!(
            bus.insert(u64::MAX, 2, d()),
            Err(MmioBusError::BadRange { .. })
        ));
        bus.insert(0x800, 0x800, d()).unwrap();
        bus.insert(0x2000, 0x10, d()).unwrap();
    }
}
