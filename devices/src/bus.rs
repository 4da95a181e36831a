//! The bus: non-overlapping ranges of an address space, each mapped to a
//! device trait object, one type ([`Bus`]) for port I/O ([`PioBus`]) and
//! MMIO (`crate::mmio::MmioBus`). Shared by all vCPUs of one VM; each
//! device sits behind its own mutex so two vCPUs touching different
//! devices never contend.

pub use crate::ranges::RangeError;
use crate::ranges::RangeMap;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

/// Errors from building a bus.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BusError {
    #[error("port range {base:#x}+{len} is empty or wraps past 0xffff")]
    BadRange { base: u16, len: u16 },
    #[error("port range {base:#x}+{len} overlaps the device at {other:#x}")]
    Overlap { base: u16, len: u16, other: u16 },
}

/// Who is doing the access.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IoContext {
    /// Index of the vCPU (0-based) that executed the IN/OUT.
    pub vcpu: u32,
}

/// A port-I/O device. `offset` is relative to the base the device was
/// inserted at. Devices must not panic on any guest input.
pub trait PioDevice: Send {
    fn read(&mut self, ctx: IoContext, offset: u16, data: &mut [u8]);
    fn write(&mut self, ctx: IoContext, offset: u16, data: &[u8]);
}

/// Shared handle of a device on the bus.
pub type SharedDevice = Arc<Mutex<dyn PioDevice>>;

/// An address space devices are mapped into: port I/O ([`PortIo`]) or
/// MMIO (`crate::mmio::Mmio`). [`Bus`] is the one bus over either.
pub trait AddressSpace {
    /// An address (and a length) in the space.
    type Addr: Copy + Into<u64>;
    /// The devices the space maps.
    type Device: ?Sized + Send;
    /// Why a range cannot be mapped, in the space's own words.
    type Error;
    /// One past the last address.
    const LIMIT: u64;
    /// An offset within a mapped range as an address of the space (the
    /// range lies below [`AddressSpace::LIMIT`], so it fits).
    fn addr(offset: u64) -> Self::Addr;
    /// A range `base+len` refused by the map.
    fn range_error(base: Self::Addr, len: Self::Addr, e: RangeError) -> Self::Error;
    fn read(dev: &mut Self::Device, ctx: IoContext, offset: Self::Addr, data: &mut [u8]);
    fn write(dev: &mut Self::Device, ctx: IoContext, offset: Self::Addr, data: &[u8]);
}

/// Port I/O: 16-bit ports, [`PioDevice`]s.
pub struct PortIo;

impl AddressSpace for PortIo {
    type Addr = u16;
    type Device = dyn PioDevice;
    type Error = BusError;
    const LIMIT: u64 = 0x1_0000;
    fn addr(offset: u64) -> u16 {
        offset as u16
    }
    fn range_error(base: u16, len: u16, e: RangeError) -> BusError {
        match e {
            RangeError::Bad => BusError::BadRange { base, len },
            RangeError::Overlap(other) => BusError::Overlap {
                base,
                len,
                other: other as u16,
            },
        }
    }
    fn read(dev: &mut Self::Device, ctx: IoContext, offset: u16, data: &mut [u8]) {
        dev.read(ctx, offset, data);
    }
    fn write(dev: &mut Self::Device, ctx: IoContext, offset: u16, data: &[u8]) {
        dev.write(ctx, offset, data);
    }
}

/// A bus: non-overlapping ranges of one address space, each mapped to a
/// device behind its own mutex.
pub struct Bus<S: AddressSpace> {
    ranges: RangeMap<Arc<Mutex<S::Device>>>,
}

/// The port-I/O bus.
pub type PioBus = Bus<PortIo>;

impl<S: AddressSpace> Default for Bus<S> {
    fn default() -> Self {
        Bus {
            ranges: RangeMap::default(),
        }
    }
}

impl<S: AddressSpace> Bus<S> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Map `base..base+len` to `dev`.
    pub fn insert(
        &mut self,
        base: S::Addr,
        len: S::Addr,
        dev: Arc<Mutex<S::Device>>,
    ) -> Result<(), S::Error> {
        self.ranges
            .insert(base.into(), len.into(), S::LIMIT, dev)
            .map_err(|e| S::range_error(base, len, e))
    }

    /// Dispatch a read (an IN). Returns false (and fills `data` with 0xff,
    /// what an unclaimed ISA port or MMIO hole reads as) when no device
    /// claims the whole access.
    pub fn read(&self, ctx: IoContext, addr: S::Addr, data: &mut [u8]) -> bool {
        match self.ranges.resolve(addr.into(), data.len()) {
            Some((off, dev)) => {
                S::read(&mut *lock(dev), ctx, S::addr(off), data);
                true
            }
            None => {
                data.fill(0xff);
                false
            }
        }
    }

    /// Dispatch a write (an OUT). Returns false when no device claims the
    /// whole access.
    pub fn write(&self, ctx: IoContext, addr: S::Addr, data: &[u8]) -> bool {
        match self.ranges.resolve(addr.into(), data.len()) {
            Some((off, dev)) => {
                S::write(&mut *lock(dev), ctx, S::addr(off), data);
                true
            }
            None => false,
        }
    }
}

/// Lock a device, recovering from a poisoned mutex (a device that panicked
/// once must not take the whole VM down with a second panic).
fn lock<D: ?Sized>(dev: &Mutex<D>) -> std::sync::MutexGuard<'_, D> {
    dev.lock().unwrap_or_else(|p| p.into_inner())
}

/// Rate-limited "unknown access" logging: each address is reported once, and
/// after `cap` distinct addresses nothing more is reported (one final line
/// says so).
pub struct UnknownAccessLog {
    what: &'static str,
    seen: Mutex<HashSet<u64>>,
    cap: usize,
}

impl UnknownAccessLog {
    pub fn new(what: &'static str, cap: usize) -> Self {
        Self {
            what,
            seen: Mutex::new(HashSet::new()),
            cap,
        }
    }

    /// Returns the line to log for this access, if it should be logged.
    pub fn note(&self, vm: &str, addr: u64, write: bool, size: usize) -> Option<String> {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if seen.len() > self.cap || seen.contains(&addr) {
            return None;
        }
        seen.insert(addr);
        let dir = if write { "write" } else { "read" };
        if seen.len() > self.cap {
            return Some(format!(
                "[{vm}] unknown {} {dir} at {addr:#x} ({size} bytes); further unknown {} accesses are not logged",
                self.what, self.what
            ));
        }
        Some(format!(
            "[{vm}] unknown {} {dir} at {addr:#x} ({size} bytes) ignored{}",
            self.what,
            if write { "" } else { ", reads as 0xff" }
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Echo {
        last: Vec<(u16, Vec<u8>)>,
    }
    impl PioDevice for Echo {
        fn read(&mut self, _ctx: IoContext, offset: u16, data: &mut [u8]) {
            data.fill(offset as u8);
        }
        fn write(&mut self, _ctx: IoContext, offset: u16, data: &[u8]) {
            self.last.push((offset, data.to_vec()));
        }
    }

    const CTX: IoContext = IoContext { vcpu: 0 };

    #[test]
    fn dispatch_and_unknown() {
        let mut bus = PioBus::new();
        let dev = Arc::new(Mutex::new(Echo::default()));
        bus.insert(0x3f8, 8, dev.clone()).unwrap();
        let mut b = [0u8; 1];
        assert!(bus.read(CTX, 0x3fa, &mut b));
        assert_eq!(b[0], 2);
        assert!(bus.write(CTX, 0x3ff, &[7]));
        assert_eq!(dev.lock().unwrap().last, vec![(7, vec![7])]);
        let mut w = [0u8; 4];
        assert!(!bus.read(CTX, 0x3f7, &mut w));
        assert_eq!(w, [0xff; 4]);
        // An access straddling the end of the range is not claimed.
        assert!(!bus.read(CTX, 0x3fe, &mut w));
        assert!(!bus.write(CTX, 0x400, &[1]));
    }

    #[test]
    fn overlap_rejected() {
        let mut bus = PioBus::new();
        bus.insert(0x60, 5, Arc::new(Mutex::new(Echo::default())))
            .unwrap();
        assert!(matches!(
            bus.insert(0x64, 1, Arc::new(Mutex::new(Echo::default()))),
            Err(BusError::Overlap { .. })
        ));
        assert!(matches!(
            bus.insert(0xffff, 2, Arc::new(Mutex::new(Echo::default()))),
            Err(BusError::BadRange { .. })
        ));
        bus.insert(0x65, 1, Arc::new(Mutex::new(Echo::default())))
            .unwrap();
    }

    #[test]
    fn unknown_log_once_and_capped() {
        let log = UnknownAccessLog::new("port", 2);
        assert!(log.note("vm", 0x80, true, 1).is_some());
        assert!(log.note("vm", 0x80, true, 1).is_none());
        assert!(log.note("vm", 0x81, false, 1).is_some());
        let last = log.note("vm", 0x82, false, 1).unwrap();
        assert!(last.contains("not logged"));
        assert!(log.note("vm", 0x83, false, 1).is_none());
    }
}
