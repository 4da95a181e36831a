//! The ACPI fixed-hardware power-management registers a Linux guest uses
//! to power off: the PM1a event block (PM1_STS, PM1_EN) and the PM1a
//! control block (PM1_CNT), at the ports the FADT names (0x600 and 0x604,
//! where QEMU's PIIX4 puts them, next to the PM timer at 0x608).
//!
//! Powering off (ACPI 6.5, "Sleeping/Wake Control"): the OS writes the
//! sleep type of \_S5 (from the DSDT) into PM1_CNT.SLP_TYP together with
//! SLP_EN; this device then asks its VM to stop with
//! [`StopRequest::PowerOff`]. No other sleep state is offered (the DSDT
//! names only \_S5), so SLP_EN with another type is ignored. SCI_EN reads
//! 1: the platform is always in ACPI mode (the FADT's SMI_CMD is 0). No
//! event ever sets a status bit, and the SCI is never raised.
//!
//! Any access width works: the six bytes are a little register file, status
//! bytes write-1-to-clear, enable bytes plain, control bytes plain except
//! SLP_EN, which always reads 0.

use crate::bus::{IoContext, PioDevice};
use crate::{StopRequest, VmEventSink};
use std::sync::Arc;

/// PM1a_EVT_BLK: PM1_STS (2 bytes) then PM1_EN (2 bytes).
pub const PM1A_EVT_PORT: u16 = 0x600;
pub const PM1_EVT_LEN: u16 = 4;
/// PM1a_CNT_BLK: PM1_CNT (2 bytes).
pub const PM1A_CNT_PORT: u16 = 0x604;
pub const PM1_CNT_LEN: u16 = 2;
/// The device covers both blocks.
pub const ACPI_PM_BASE: u16 = PM1A_EVT_PORT;
pub const ACPI_PM_LEN: u16 = PM1_EVT_LEN + PM1_CNT_LEN;

/// PM1_CNT bits.
pub const SCI_EN: u16 = 1 << 0;
pub const SLP_TYP_SHIFT: u16 = 10;
pub const SLP_TYP_MASK: u16 = 0x7 << SLP_TYP_SHIFT;
pub const SLP_EN: u16 = 1 << 13;
/// The SLP_TYP value the DSDT's \_S5 package gives for soft-off.
pub const S5_SLP_TYP: u8 = 5;

/// Offset of PM1_CNT inside the device.
const CNT_OFFSET: usize = PM1_EVT_LEN as usize;

pub struct AcpiPm {
    /// PM1_STS, PM1_EN, PM1_CNT, little-endian.
    regs: [u8; ACPI_PM_LEN as usize],
    sink: Arc<dyn VmEventSink>,
}

impl AcpiPm {
    pub fn new(sink: Arc<dyn VmEventSink>) -> Self {
        let mut regs = [0u8; ACPI_PM_LEN as usize];
        regs[CNT_OFFSET..].copy_from_slice(&SCI_EN.to_le_bytes());
        Self { regs, sink }
    }

    fn control(&self) -> u16 {
        u16::from_le_bytes([self.regs[CNT_OFFSET], self.regs[CNT_OFFSET + 1]])
    }
}

impl PioDevice for AcpiPm {
    fn read(&mut self, _ctx: IoContext, offset: u16, data: &mut [u8]) {
        for (i, b) in data.iter_mut().enumerate() {
            *b = self.regs.get(offset as usize + i).copied().unwrap_or(0);
        }
    }

    fn write(&mut self, ctx: IoContext, offset: u16, data: &[u8]) {
        let mut touched_control = false;
        for (i, &b) in data.iter().enumerate() {
            let at = offset as usize + i;
            match at {
                // PM1_STS: write 1 to clear.
                0 | 1 => self.regs[at] &= !b,
                2 | 3 => self.regs[at] = b,
                4 | 5 => {
                    self.regs[at] = b;
                    touched_control = true;
                }
                _ => {}
            }
        }
        if !touched_control {
            return;
        }
        let cnt = self.control();
        // SCI_EN stays set; SLP_EN is write-only.
        let kept = (cnt & !SLP_EN) | SCI_EN;
        self.regs[CNT_OFFSET..].copy_from_slice(&kept.to_le_bytes());
        let slp_typ = ((cnt & SLP_TYP_MASK) >> SLP_TYP_SHIFT) as u8;
        if cnt & SLP_EN != 0 && slp_typ == S5_SLP_TYP {
            self.sink.stop_request(ctx.vcpu, StopRequest::PowerOff);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::result_port::tests::Sink;

    fn dev() -> (Arc<Sink>, AcpiPm) {
        let sink = Arc::new(Sink::default());
        let d = AcpiPm::new(sink.clone());
        (sink, d)
    }

    const CTX: IoContext = IoContext { vcpu: 1 };

    #[test]
    fn soft_off_stops_the_vm() {
        let (sink, mut d) = dev();
        // What ACPICA writes for S5: SLP_TYP first, then SLP_EN with it.
        let typ = u16::from(S5_SLP_TYP) << SLP_TYP_SHIFT;
        d.write(CTX, 4, &(typ | SCI_EN).to_le_bytes());
        assert!(sink.stops.lock().unwrap().is_empty());
        d.write(CTX, 4, &(typ | SCI_EN | SLP_EN).to_le_bytes());
        assert_eq!(*sink.stops.lock().unwrap(), vec![StopRequest::PowerOff]);
        // SLP_EN reads 0, SCI_EN 1.
        let mut b = [0u8; 2];
        d.read(CTX, 4, &mut b);
        assert_eq!(u16::from_le_bytes(b), typ | SCI_EN);
    }

    #[test]
    fn other_sleep_states_and_partial_writes_do_not_stop() {
        let (sink, mut d) = dev();
        // S3's type with SLP_EN: not offered, ignored.
        d.write(CTX, 4, &((3 << SLP_TYP_SHIFT) | SLP_EN).to_le_bytes());
        // A byte write of the high half alone: SLP_EN with SLP_TYP 0.
        d.write(CTX, 5, &[(SLP_EN >> 8) as u8]);
        assert!(sink.stops.lock().unwrap().is_empty());
        // A byte write to the high half carrying S5 and SLP_EN stops.
        let hi = ((u16::from(S5_SLP_TYP) << SLP_TYP_SHIFT) | SLP_EN) >> 8;
        d.write(CTX, 5, &[hi as u8]);
        assert_eq!(*sink.stops.lock().unwrap(), vec![StopRequest::PowerOff]);
    }

    #[test]
    fn status_is_write_one_to_clear_and_enable_is_plain() {
        let (_, mut d) = dev();
        d.regs[0] = 0b1010_0001;
        d.write(CTX, 0, &[0b0000_0001, 0]);
        assert_eq!(d.regs[0], 0b1010_0000);
        d.write(CTX, 2, &0x0120u16.to_le_bytes());
        let mut all = [0u8; 6];
        d.read(CTX, 0, &mut all);
        assert_eq!(all, [0b1010_0000, 0, 0x20, 0x01, 1, 0]);
        // A dword read at the control block returns zeros past the end.
        let mut w = [0xffu8; 4];
        d.read(CTX, 4, &mut w);
        assert_eq!(w, [1, 0, 0, 0]);
    }
}
