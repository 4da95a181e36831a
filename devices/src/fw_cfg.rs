//! QEMU's firmware-configuration device, legacy port interface: a 16-bit
//! write to the selector port (0x510) picks an entry and rewinds it; each
//! 8-bit read from the data port (0x511) returns the entry's next byte, and
//! 0 past its end or for an entry that does not exist (as QEMU does).
//!
//! Only the entries a test guest needs are provided: the signature "QEMU",
//! the interface id (1: the traditional port interface, no DMA), RAM size,
//! "no graphics", the boot and maximum CPU counts. kvm-unit-tests reads the
//! CPU count (entry 0x05) to know how many APs to wait for, and probes the
//! RAM size and a "max RAM" entry (0x11, absent here, so it reads 0).

use crate::bus::{IoContext, PioDevice};
use std::collections::BTreeMap;

pub const FW_CFG_PORT: u16 = 0x510;
/// Selector (16-bit, offset 0) and data (8-bit, offset 1).
pub const FW_CFG_LEN: u16 = 2;

pub const FW_CFG_SIGNATURE: u16 = 0x00;
pub const FW_CFG_ID: u16 = 0x01;
pub const FW_CFG_RAM_SIZE: u16 = 0x03;
pub const FW_CFG_NOGRAPHIC: u16 = 0x04;
pub const FW_CFG_NB_CPUS: u16 = 0x05;
pub const FW_CFG_MAX_CPUS: u16 = 0x0f;

/// Interface id bit 0: the traditional (port) interface.
const FW_CFG_VERSION_TRADITIONAL: u32 = 1;

/// The device: a table of entries and the read cursor.
pub struct FwCfg {
    entries: BTreeMap<u16, Vec<u8>>,
    selected: u16,
    offset: usize,
}

impl FwCfg {
    /// The entries of a machine with `ram_bytes` of RAM and `cpus` CPUs.
    pub fn new(ram_bytes: u64, cpus: u16) -> FwCfg {
        let mut entries = BTreeMap::new();
        entries.insert(FW_CFG_SIGNATURE, b"QEMU".to_vec());
        entries.insert(FW_CFG_ID, FW_CFG_VERSION_TRADITIONAL.to_le_bytes().to_vec());
        entries.insert(FW_CFG_RAM_SIZE, ram_bytes.to_le_bytes().to_vec());
        entries.insert(FW_CFG_NOGRAPHIC, 1u16.to_le_bytes().to_vec());
        entries.insert(FW_CFG_NB_CPUS, cpus.to_le_bytes().to_vec());
        entries.insert(FW_CFG_MAX_CPUS, cpus.to_le_bytes().to_vec());
        FwCfg {
            entries,
            selected: FW_CFG_SIGNATURE,
            offset: 0,
        }
    }

    /// Select an entry (the selector write).
    pub fn select(&mut self, key: u16) {
        self.selected = key;
        self.offset = 0;
    }

    /// The next byte of the selected entry (the data read).
    pub fn next_byte(&mut self) -> u8 {
        let b = self
            .entries
            .get(&self.selected)
            .and_then(|e| e.get(self.offset).copied())
            .unwrap_or(0);
        self.offset = self.offset.saturating_add(1);
        b
    }
}

impl PioDevice for FwCfg {
    fn read(&mut self, _ctx: IoContext, offset: u16, data: &mut [u8]) {
        match (offset, data.len()) {
            (1, 1) => data[0] = self.next_byte(),
            _ => data.fill(0),
        }
    }

    fn write(&mut self, _ctx: IoContext, offset: u16, data: &[u8]) {
        // The selector is 16 bits wide; a byte write selects 0x00..0xff.
        match (offset, data) {
            (0, [lo, hi]) => self.select(u16::from_le_bytes([*lo, *hi])),
            (0, [lo]) => self.select(u16::from(*lo)),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CTX: IoContext = IoContext { vcpu: 0 };

    fn read_entry(d: &mut FwCfg, key: u16, n: usize) -> Vec<u8> {
        d.write(CTX, 0, &key.to_le_bytes());
        (0..n)
            .map(|_| {
                let mut b = [0xaa];
                d.read(CTX, 1, &mut b);
                b[0]
            })
            .collect()
    }

    #[test]
    fn entries_read_back_little_endian() {
        let mut d = FwCfg::new(256 << 20, 3);
        assert_eq!(read_entry(&mut d, FW_CFG_SIGNATURE, 4), b"QEMU");
        assert_eq!(read_entry(&mut d, FW_CFG_ID, 4), [1, 0, 0, 0]);
        let ram = read_entry(&mut d, FW_CFG_RAM_SIZE, 8);
        assert_eq!(u64::from_le_bytes(ram.try_into().unwrap()), 256 << 20);
        assert_eq!(read_entry(&mut d, FW_CFG_NB_CPUS, 2), [3, 0]);
        assert_eq!(read_entry(&mut d, FW_CFG_MAX_CPUS, 2), [3, 0]);
    }

    #[test]
    fn past_the_end_and_unknown_entries_read_zero() {
        let mut d = FwCfg::new(1 << 20, 2);
        assert_eq!(read_entry(&mut d, FW_CFG_NB_CPUS, 4), [2, 0, 0, 0]);
        // kvm-unit-tests' "max RAM" probe: absent, so 0 ("no limit").
        assert_eq!(read_entry(&mut d, 0x11, 8), [0; 8]);
        // Selecting again rewinds.
        assert_eq!(read_entry(&mut d, FW_CFG_SIGNATURE, 2), b"QE");
        assert_eq!(read_entry(&mut d, FW_CFG_SIGNATURE, 2), b"QE");
    }

    #[test]
    fn odd_accesses_are_harmless() {
        let mut d = FwCfg::new(1 << 20, 1);
        d.write(CTX, 0, &[FW_CFG_NB_CPUS as u8]);
        let mut w = [0xaa; 2];
        d.read(CTX, 0, &mut w);
        assert_eq!(w, [0, 0]);
        d.write(CTX, 1, &[7]);
        let mut b = [0];
        d.read(CTX, 1, &mut b);
        assert_eq!(b, [1]);
    }
}
