//! The MMIO bus: non-overlapping guest-physical ranges, each mapped to a
//! device, beside the port-I/O bus ([`crate::bus`]). Shared by all vCPUs of
//! one VM; each device sits behind its own mutex.

use crate::bus::IoContext;
use crate::ranges::{RangeError, RangeMap};
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

/// The bus itself.
#[derive(Default)]
pub struct MmioBus {
    ranges: RangeMap<SharedMmioDevice>,
}

impl MmioBus {
    pub fn new() -> Self {
        Self::default()
    }

    /// Map `base..base+len` to `dev`.
    pub fn insert(
        &mut self,
        base: u64,
        len: u64,
        dev: SharedMmioDevice,
    ) -> Result<(), MmioBusError> {
        self.ranges
            .insert(base, len, u64::MAX, dev)
            .map_err(|e| match e {
                RangeError::Bad => MmioBusError::BadRange { base, len },
                RangeError::Overlap(other) => MmioBusError::Overlap { base, len, other },
            })
    }

    fn resolve(&self, addr: u64, size: usize) -> Option<(u64, &SharedMmioDevice)> {
        // The whole access must fall inside the device's range.
        self.ranges.resolve(addr, size)
    }

    /// Dispatch a read. Returns false (and fills `data` with 0xff) when no
    /// device claims the address.
    pub fn read(&self, ctx: IoContext, addr: u64, data: &mut [u8]) -> bool {
        match self.resolve(addr, data.len()) {
            Some((off, dev)) => {
                lock(dev).read(ctx, off, data);
                true
            }
            None => {
                data.fill(0xff);
                false
            }
        }
    }

    /// Dispatch a write. Returns false when no device claims the address.
    pub fn write(&self, ctx: IoContext, addr: u64, data: &[u8]) -> bool {
        match self.resolve(addr, data.len()) {
            Some((off, dev)) => {
                lock(dev).write(ctx, off, data);
                true
            }
            None => false,
        }
    }
}

/// Lock a device, recovering from a poisoned mutex.
fn lock(dev: &SharedMmioDevice) -> std::sync::MutexGuard<'_, dyn MmioDevice + 'static> {
    dev.lock().unwrap_or_else(|p| p.into_inner())
}

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
