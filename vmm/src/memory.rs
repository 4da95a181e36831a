//! Guest physical memory: the layout (PROTOCOL.md) and its `GuestMemoryMmap`.
//!
//! RAM runs from 0 to min(size, 3 GiB); the rest resumes at 4 GiB (the gap is
//! left for MMIO). In the e820 map 0xA0000-0xFFFFF is reserved (the legacy
//! hole) although it is backed by the same memslot.

use std::sync::Arc;
use vm_memory::{
    Address, Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion,
};

/// End of the low RAM region (start of the 32-bit MMIO gap).
pub const MMIO_GAP_START: u64 = 3 << 30;
/// Where RAM resumes above the gap.
pub const HIGH_RAM_START: u64 = 4 << 30;
/// Legacy hole (VGA, option ROMs, BIOS), reserved in the e820 map.
pub const LEGACY_HOLE_START: u64 = 0xA0000;
pub const LEGACY_HOLE_END: u64 = 0x10_0000;

/// e820 types.
pub const E820_RAM: u32 = 1;
pub const E820_RESERVED: u32 = 2;

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    #[error("guest memory size {0} MiB is too small")]
    TooSmall(u64),
    #[error("cannot map guest memory: {0}")]
    Mmap(#[from] vm_memory::mmap::FromRangesError),
}

/// The guest's RAM ranges (start, length), in address order.
pub fn ram_ranges(size: u64) -> Vec<(GuestAddress, usize)> {
    if size <= MMIO_GAP_START {
        vec![(GuestAddress(0), size as usize)]
    } else {
        vec![
            (GuestAddress(0), MMIO_GAP_START as usize),
            (
                GuestAddress(HIGH_RAM_START),
                (size - MMIO_GAP_START) as usize,
            ),
        ]
    }
}

/// One e820 entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct E820Entry {
    pub addr: u64,
    pub size: u64,
    pub kind: u32,
}

/// The e820 map of a guest with `size` bytes of RAM.
pub fn e820_map(size: u64) -> Vec<E820Entry> {
    let mut map = Vec::new();
    for (start, len) in ram_ranges(size) {
        let (start, end) = (start.raw_value(), start.raw_value() + len as u64);
        if start == 0 {
            map.push(E820Entry {
                addr: 0,
                size: end.min(LEGACY_HOLE_START),
                kind: E820_RAM,
            });
            if end > LEGACY_HOLE_START {
                map.push(E820Entry {
                    addr: LEGACY_HOLE_START,
                    size: end.min(LEGACY_HOLE_END) - LEGACY_HOLE_START,
                    kind: E820_RESERVED,
                });
            }
            if end > LEGACY_HOLE_END {
                map.push(E820Entry {
                    addr: LEGACY_HOLE_END,
                    size: end - LEGACY_HOLE_END,
                    kind: E820_RAM,
                });
            }
        } else {
            map.push(E820Entry {
                addr: start,
                size: end - start,
                kind: E820_RAM,
            });
        }
    }
    map
}

/// Allocate the guest's RAM (anonymous, lazily populated).
pub fn create_guest_memory(size_mib: u64) -> Result<GuestMemoryMmap, MemoryError> {
    if size_mib < 2 {
        return Err(MemoryError::TooSmall(size_mib));
    }
    Ok(GuestMemoryMmap::from_ranges(&ram_ranges(size_mib << 20))?)
}

/// Highest guest-physical address + 1 that is RAM.
pub fn ram_end(mem: &GuestMemoryMmap) -> u64 {
    mem.iter()
        .map(|r| r.start_addr().raw_value() + r.len())
        .max()
        .unwrap_or(0)
}

/// Total guest RAM in bytes.
pub fn ram_size(mem: &GuestMemoryMmap) -> u64 {
    mem.iter().map(|r| r.len()).sum()
}

/// Guest RAM seen by the devices (reads only; never panics on bad input).
pub struct DeviceMemory(pub Arc<GuestMemoryMmap>);

impl devices::GuestMemoryRead for DeviceMemory {
    fn read_guest(&self, gpa: u64, buf: &mut [u8]) -> bool {
        if gpa.checked_add(buf.len() as u64).is_none() {
            return false;
        }
        self.0.read_slice(buf, GuestAddress(gpa)).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use devices::GuestMemoryRead;

    #[test]
    fn small_layout() {
        let m = e820_map(64 << 20);
        assert_eq!(
            m,
            vec![
                E820Entry {
                    addr: 0,
                    size: 0xA0000,
                    kind: E820_RAM
                },
                E820Entry {
                    addr: 0xA0000,
                    size: 0x60000,
                    kind: E820_RESERVED
                },
                E820Entry {
                    addr: 0x100000,
                    size: (64 << 20) - 0x100000,
                    kind: E820_RAM
                },
            ]
        );
    }

    #[test]
    fn large_layout_splits_at_3g() {
        let r = ram_ranges(5 << 30);
        assert_eq!(r[0], (GuestAddress(0), 3 << 30));
        assert_eq!(r[1], (GuestAddress(4 << 30), 2 << 30));
        let m = e820_map(5 << 30);
        assert_eq!(m.last().unwrap().addr, 4 << 30);
        assert_eq!(m.last().unwrap().size, 2 << 30);
    }

    #[test]
    fn device_memory_bounds() {
        let mem = Arc::new(create_guest_memory(2).unwrap());
        assert_eq!(ram_end(&mem), 2 << 20);
        let dm = DeviceMemory(mem);
        let mut b = [0u8; 64];
        assert!(dm.read_guest(0x1000, &mut b));
        assert!(!dm.read_guest((2 << 20) - 32, &mut b));
        assert!(!dm.read_guest(u64::MAX - 8, &mut b));
    }
}
