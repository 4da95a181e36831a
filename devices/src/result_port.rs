//! The result port (guests/PROTOCOL.md): progress markers on 0xE00 and
//! 64-byte result records whose guest-physical address is written to 0xE04.
//! (Not QEMU's fw_cfg ports 0x510-0x51B, so the same guest runs under QEMU.)
//! Parsing is done by pure functions so that it can be tested without a VM;
//! nothing here trusts guest data.

use crate::bus::{IoContext, PioDevice};
use crate::{GuestMemoryRead, VmEventSink};
use std::fmt;
use std::sync::Arc;

/// Port of the progress marker (8-bit OUT).
pub const MARKER_PORT: u16 = 0xE00;
/// Port taking the guest-physical address of a result record (32-bit OUT).
pub const RECORD_PORT: u16 = 0xE04;
/// Base of the result port on the bus; it covers 0xE00..0xE08.
pub const RESULT_PORT_BASE: u16 = MARKER_PORT;
/// Length of the result port's range.
pub const RESULT_PORT_LEN: u16 = 8;

/// "PACR" little endian.
pub const RECORD_MAGIC: u32 = 0x5243_4150;
pub const RECORD_VERSION: u16 = 1;
pub const RECORD_SIZE: usize = 64;
/// Longest TEXT payload accepted.
pub const MAX_TEXT_LEN: u64 = 4096;

/// Progress markers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Marker {
    FirstInstruction,
    KernelReady,
    WorkloadStart,
    WorkloadDone,
    /// The boot vCPU is about to start the APs.
    SmpStart,
    /// An AP reached 64-bit mode with its local APIC enabled (sent by the AP).
    ApOnline,
    /// The boot vCPU has every AP online or given up on it.
    SmpReady,
    Panic,
    /// A value the protocol does not define (kept, not fatal).
    Unknown(u8),
}

impl Marker {
    pub fn from_byte(b: u8) -> Marker {
        match b {
            1 => Marker::FirstInstruction,
            2 => Marker::KernelReady,
            3 => Marker::WorkloadStart,
            4 => Marker::WorkloadDone,
            5 => Marker::SmpStart,
            6 => Marker::ApOnline,
            7 => Marker::SmpReady,
            0xEE => Marker::Panic,
            other => Marker::Unknown(other),
        }
    }

    pub fn name(&self) -> String {
        match self {
            Marker::FirstInstruction => "first_instruction".into(),
            Marker::KernelReady => "kernel_ready".into(),
            Marker::WorkloadStart => "workload_start".into(),
            Marker::WorkloadDone => "workload_done".into(),
            Marker::SmpStart => "smp_start".into(),
            Marker::ApOnline => "ap_online".into(),
            Marker::SmpReady => "smp_ready".into(),
            Marker::Panic => "panic".into(),
            Marker::Unknown(b) => format!("unknown_{b:#04x}"),
        }
    }
}

/// Record kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordKind {
    WorkSample = 1,
    WorkDone = 2,
    BootTimes = 3,
    Text = 4,
    Error = 5,
    /// A latency summary (metric, count, p50, p99, max in ns).
    Latency = 6,
    /// Up to four (bucket, count) pairs of a latency histogram.
    Histogram = 7,
    SleepDone = 8,
    PingpongDone = 9,
    BurstDone = 10,
    SpinlockDone = 11,
    /// A vCPU's KVM steal time (the life total, over the workload, ticks).
    Steal = 12,
    /// A barrier vCPU's rounds, ticks and ticks spent spinning at the barrier.
    BarrierDone = 13,
    /// A shootdown vCPU's round trips (the initiator) or acknowledgements.
    ShootdownDone = 14,
    /// `server`: the VM's requests served, ticks, offered and dropped.
    ServerDone = 16,
}

impl RecordKind {
    pub fn from_u16(k: u16) -> Option<RecordKind> {
        Some(match k {
            1 => RecordKind::WorkSample,
            2 => RecordKind::WorkDone,
            3 => RecordKind::BootTimes,
            4 => RecordKind::Text,
            5 => RecordKind::Error,
            6 => RecordKind::Latency,
            7 => RecordKind::Histogram,
            8 => RecordKind::SleepDone,
            9 => RecordKind::PingpongDone,
            10 => RecordKind::BurstDone,
            11 => RecordKind::SpinlockDone,
            12 => RecordKind::Steal,
            13 => RecordKind::BarrierDone,
            14 => RecordKind::ShootdownDone,
            16 => RecordKind::ServerDone,
            _ => return None,
        })
    }
}

/// A decoded, validated result record.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ResultRecord {
    pub kind: RecordKind,
    pub vcpu: u32,
    pub seq: u32,
    pub tsc: u64,
    pub values: [u64; 5],
    /// For TEXT records: the string (lossy UTF-8).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

/// Why a record was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("record address {gpa:#x} (+{len} bytes) is outside guest RAM")]
    OutOfRam { gpa: u64, len: u64 },
    #[error("bad record magic {0:#010x} (want 0x52434150)")]
    BadMagic(u32),
    #[error("unsupported record version {0} (want 1)")]
    BadVersion(u16),
    #[error("unknown record kind {0}")]
    BadKind(u16),
    #[error("TEXT record length {0} exceeds {MAX_TEXT_LEN}")]
    TextTooLong(u64),
    #[error("record port written with {0} bytes (want a 32-bit OUT)")]
    BadAccessSize(usize),
    #[error("{kind:?} record: {reason}")]
    BadPayload {
        kind: RecordKind,
        reason: crate::result_payload::DecodeError,
    },
}

fn u16_at(b: &[u8; RECORD_SIZE], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}
fn u32_at(b: &[u8; RECORD_SIZE], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}
fn u64_at(b: &[u8; RECORD_SIZE], o: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[o..o + 8]);
    u64::from_le_bytes(a)
}

/// Decode the 64 bytes of a record (no TEXT resolution).
pub fn parse_record(b: &[u8; RECORD_SIZE]) -> Result<ResultRecord, RecordError> {
    let magic = u32_at(b, 0);
    if magic != RECORD_MAGIC {
        return Err(RecordError::BadMagic(magic));
    }
    let version = u16_at(b, 4);
    if version != RECORD_VERSION {
        return Err(RecordError::BadVersion(version));
    }
    let kind_raw = u16_at(b, 6);
    let kind = RecordKind::from_u16(kind_raw).ok_or(RecordError::BadKind(kind_raw))?;
    let mut values = [0u64; 5];
    for (i, v) in values.iter_mut().enumerate() {
        *v = u64_at(b, 24 + 8 * i);
    }
    crate::result_payload::decode(kind, &values)
        .map_err(|reason| RecordError::BadPayload { kind, reason })?;
    Ok(ResultRecord {
        kind,
        vcpu: u32_at(b, 8),
        seq: u32_at(b, 12),
        tsc: u64_at(b, 16),
        values,
        text: None,
    })
}

/// Encode a record (the inverse of [`parse_record`]; used by tests and tools).
pub fn encode_record(kind: u16, vcpu: u32, seq: u32, tsc: u64, values: [u64; 5]) -> [u8; 64] {
    let mut b = [0u8; RECORD_SIZE];
    b[0..4].copy_from_slice(&RECORD_MAGIC.to_le_bytes());
    b[4..6].copy_from_slice(&RECORD_VERSION.to_le_bytes());
    b[6..8].copy_from_slice(&kind.to_le_bytes());
    b[8..12].copy_from_slice(&vcpu.to_le_bytes());
    b[12..16].copy_from_slice(&seq.to_le_bytes());
    b[16..24].copy_from_slice(&tsc.to_le_bytes());
    for (i, v) in values.iter().enumerate() {
        b[24 + 8 * i..32 + 8 * i].copy_from_slice(&v.to_le_bytes());
    }
    b
}

/// Read, validate and decode the record at `gpa`, resolving TEXT payloads.
pub fn read_record(mem: &dyn GuestMemoryRead, gpa: u64) -> Result<ResultRecord, RecordError> {
    let mut b = [0u8; RECORD_SIZE];
    if !mem.read_guest(gpa, &mut b) {
        return Err(RecordError::OutOfRam {
            gpa,
            len: RECORD_SIZE as u64,
        });
    }
    let mut rec = parse_record(&b)?;
    if rec.kind == RecordKind::Text {
        let (addr, len) = (rec.values[0], rec.values[1]);
        if len > MAX_TEXT_LEN {
            return Err(RecordError::TextTooLong(len));
        }
        let mut buf = vec![0u8; len as usize];
        if !mem.read_guest(addr, &mut buf) {
            return Err(RecordError::OutOfRam { gpa: addr, len });
        }
        rec.text = Some(String::from_utf8_lossy(&buf).into_owned());
    }
    Ok(rec)
}

/// Work units per second from a unit count and a TSC tick count, given the
/// TSC frequency in kHz. None if the interval is empty.
pub fn units_per_second(units: u64, ticks: u64, tsc_khz: u64) -> Option<f64> {
    if ticks == 0 || tsc_khz == 0 {
        return None;
    }
    Some(units as f64 * tsc_khz as f64 * 1000.0 / ticks as f64)
}

/// The result port device on ports 0xE00..0xE08.
pub struct ResultPort {
    mem: Arc<dyn GuestMemoryRead>,
    sink: Arc<dyn VmEventSink>,
}

impl fmt::Debug for ResultPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ResultPort")
    }
}

impl ResultPort {
    pub fn new(mem: Arc<dyn GuestMemoryRead>, sink: Arc<dyn VmEventSink>) -> Self {
        Self { mem, sink }
    }
}

impl PioDevice for ResultPort {
    fn read(&mut self, _ctx: IoContext, _offset: u16, data: &mut [u8]) {
        // Write-only ports.
        data.fill(0xff);
    }

    fn write(&mut self, ctx: IoContext, offset: u16, data: &[u8]) {
        match offset {
            0 => {
                if let Some(&b) = data.first() {
                    self.sink.marker(ctx.vcpu, Marker::from_byte(b));
                }
            }
            4 => {
                let rec = if data.len() == 4 {
                    let gpa = u32::from_le_bytes([data[0], data[1], data[2], data[3]]);
                    read_record(self.mem.as_ref(), gpa as u64)
                } else {
                    Err(RecordError::BadAccessSize(data.len()))
                };
                self.sink.record(ctx.vcpu, rec);
            }
            _ => {
                // 0xE01-0xE03, 0xE05-0xE07: reserved, ignored.
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::StopRequest;
    use std::sync::Mutex;

    /// Guest RAM as a plain buffer starting at guest-physical 0.
    pub struct FakeRam(pub Mutex<Vec<u8>>);
    impl GuestMemoryRead for FakeRam {
        fn read_guest(&self, gpa: u64, buf: &mut [u8]) -> bool {
            let m = self.0.lock().unwrap();
            let end = match gpa.checked_add(buf.len() as u64) {
                Some(e) => e,
                None => return false,
            };
            if end > m.len() as u64 {
                return false;
            }
            buf.copy_from_slice(&m[gpa as usize..end as usize]);
            true
        }
    }

    #[derive(Default)]
    pub struct Sink {
        pub markers: Mutex<Vec<(u32, Marker)>>,
        pub records: Mutex<Vec<(u32, Result<ResultRecord, RecordError>)>>,
        pub stops: Mutex<Vec<StopRequest>>,
    }
    impl VmEventSink for Sink {
        fn marker(&self, vcpu: u32, marker: Marker) {
            self.markers.lock().unwrap().push((vcpu, marker));
        }
        fn record(&self, vcpu: u32, record: Result<ResultRecord, RecordError>) {
            self.records.lock().unwrap().push((vcpu, record));
        }
        fn stop_request(&self, _vcpu: u32, request: StopRequest) {
            self.stops.lock().unwrap().push(request);
        }
    }

    fn ram_with(at: usize, bytes: &[u8]) -> FakeRam {
        let mut v = vec![0u8; 0x10000];
        v[at..at + bytes.len()].copy_from_slice(bytes);
        FakeRam(Mutex::new(v))
    }

    #[test]
    fn good_record() {
        let b = encode_record(1, 3, 7, 0x1234, [10, 2_596_120, 100, 25_961_200, 0]);
        let r = parse_record(&b).unwrap();
        assert_eq!(r.kind, RecordKind::WorkSample);
        assert_eq!((r.vcpu, r.seq, r.tsc), (3, 7, 0x1234));
        assert_eq!(r.values, [10, 2_596_120, 100, 25_961_200, 0]);
        let ram = ram_with(0x2000, &b);
        assert_eq!(read_record(&ram, 0x2000).unwrap(), r);
        let ups = units_per_second(r.values[0], r.values[1], 2_596_120).unwrap();
        assert!((ups - 10_000.0).abs() < 1e-6);
        assert_eq!(units_per_second(1, 0, 1), None);
    }

    #[test]
    fn bad_magic_version_kind() {
        let mut b = encode_record(2, 0, 0, 0, [0; 5]);
        b[0] = 0;
        assert!(matches!(parse_record(&b), Err(RecordError::BadMagic(_))));
        let mut b = encode_record(2, 0, 0, 0, [0; 5]);
        b[4] = 2;
        assert_eq!(parse_record(&b), Err(RecordError::BadVersion(2)));
        let b = encode_record(15, 0, 0, 0, [0; 5]);
        assert_eq!(parse_record(&b), Err(RecordError::BadKind(15)));
        let b = encode_record(0, 0, 0, 0, [0; 5]);
        assert_eq!(parse_record(&b), Err(RecordError::BadKind(0)));
    }

    #[test]
    fn workload_records_and_bad_payloads() {
        let b = encode_record(9, 1, 3, 0, [10, 1000, 5, 0, 1]);
        let r = parse_record(&b).unwrap();
        assert_eq!((r.kind, r.vcpu), (RecordKind::PingpongDone, 1));
        let b = encode_record(6, 0, 0, 0, [1, 10, 100, 50, 200]);
        assert!(matches!(
            parse_record(&b),
            Err(RecordError::BadPayload {
                kind: RecordKind::Latency,
                ..
            })
        ));
        assert_eq!(Marker::from_byte(6), Marker::ApOnline);
        assert_eq!(Marker::from_byte(5).name(), "smp_start");
        assert_eq!(Marker::from_byte(7).name(), "smp_ready");
    }

    #[test]
    fn address_out_of_ram() {
        let ram = ram_with(0, &[]);
        assert!(matches!(
            read_record(&ram, 0xfff0),
            Err(RecordError::OutOfRam { gpa: 0xfff0, .. })
        ));
        assert!(matches!(
            read_record(&ram, 0xffff_ffff),
            Err(RecordError::OutOfRam { .. })
        ));
    }

    #[test]
    fn text_record() {
        let mut ram = vec![0u8; 0x10000];
        let s = b"workload=cpu units=5";
        ram[0x3000..0x3000 + s.len()].copy_from_slice(s);
        let b = encode_record(4, 0, 1, 0, [0x3000, s.len() as u64, 0, 0, 0]);
        ram[0x100..0x140].copy_from_slice(&b);
        let ram = FakeRam(Mutex::new(ram));
        let r = read_record(&ram, 0x100).unwrap();
        assert_eq!(r.text.as_deref(), Some("workload=cpu units=5"));
        // Text pointing outside RAM, and an oversized text.
        let b = encode_record(4, 0, 1, 0, [0xff00, 0x1000, 0, 0, 0]);
        ram.0.lock().unwrap()[0x100..0x140].copy_from_slice(&b);
        assert!(matches!(
            read_record(&ram, 0x100),
            Err(RecordError::OutOfRam { .. })
        ));
        let b = encode_record(4, 0, 1, 0, [0, 1 << 40, 0, 0, 0]);
        ram.0.lock().unwrap()[0x100..0x140].copy_from_slice(&b);
        assert_eq!(
            read_record(&ram, 0x100),
            Err(RecordError::TextTooLong(1 << 40))
        );
    }

    #[test]
    fn device_dispatch() {
        let b = encode_record(2, 0, 0, 0, [5, 10, 0, 0, 0]);
        let ram = Arc::new(ram_with(0x800, &b));
        let sink = Arc::new(Sink::default());
        let mut dev = ResultPort::new(ram, sink.clone());
        let ctx = IoContext { vcpu: 1 };
        dev.write(ctx, 0, &[1]);
        dev.write(ctx, 0, &[0xEE]);
        dev.write(ctx, 0, &[0x42]);
        dev.write(ctx, 4, &0x800u32.to_le_bytes());
        dev.write(ctx, 4, &[0]);
        dev.write(ctx, 4, &0xffff_ff00u32.to_le_bytes());
        assert_eq!(
            *sink.markers.lock().unwrap(),
            vec![
                (1, Marker::FirstInstruction),
                (1, Marker::Panic),
                (1, Marker::Unknown(0x42))
            ]
        );
        let recs = sink.records.lock().unwrap();
        assert_eq!(recs.len(), 3);
        assert_eq!(recs[0].1.as_ref().unwrap().kind, RecordKind::WorkDone);
        assert_eq!(recs[1].1, Err(RecordError::BadAccessSize(1)));
        assert!(matches!(recs[2].1, Err(RecordError::OutOfRam { .. })));
    }
}

#[cfg(test)]
mod proptests {
    use super::tests::{FakeRam, Sink};
    use super::*;
    use proptest::prelude::*;
    use std::sync::Mutex;

    proptest! {
        /// Arbitrary guest bytes and addresses never panic the parser or the
        /// device; a record is accepted only with the right magic/version.
        #[test]
        fn guest_garbage_never_panics(
            ram in proptest::collection::vec(any::<u8>(), 0..512),
            gpa in any::<u32>(),
            width in 1usize..=4,
            offset in 0u16..8,
        ) {
            let ram = Arc::new(FakeRam(Mutex::new(ram)));
            if let Ok(r) = read_record(ram.as_ref(), gpa as u64) {
                let mut b = [0u8; RECORD_SIZE];
                prop_assert!(ram.read_guest(gpa as u64, &mut b));
                prop_assert_eq!(u32::from_le_bytes([b[0], b[1], b[2], b[3]]), RECORD_MAGIC);
                prop_assert!(r.text.as_ref().is_none_or(|t| t.len() <= 4 * MAX_TEXT_LEN as usize));
            }
            let sink = Arc::new(Sink::default());
            let mut dev = ResultPort::new(ram, sink.clone());
            let bytes = gpa.to_le_bytes();
            dev.write(IoContext { vcpu: 0 }, offset, &bytes[..width]);
            let mut out = [0u8; 4];
            dev.read(IoContext { vcpu: 0 }, offset, &mut out[..width]);
            prop_assert!(sink.stops.lock().unwrap().is_empty());
        }

        /// A well-framed record of any kind with arbitrary values is
        /// accepted exactly when its payload decodes.
        #[test]
        fn any_kind_any_values(kind in 0u16..16, vcpu in any::<u32>(), v in any::<[u64; 5]>()) {
            let b = encode_record(kind, vcpu, 0, 0, v);
            match (parse_record(&b), RecordKind::from_u16(kind)) {
                (Ok(r), Some(k)) => {
                    prop_assert_eq!(r.kind, k);
                    prop_assert!(crate::result_payload::decode(k, &v).is_ok());
                }
                (Err(RecordError::BadPayload { kind: k2, .. }), Some(k)) => {
                    prop_assert_eq!(k2, k);
                    prop_assert!(crate::result_payload::decode(k, &v).is_err());
                }
                (Err(RecordError::BadKind(x)), None) => prop_assert_eq!(x, kind),
                (other, _) => prop_assert!(false, "unexpected {:?}", other),
            }
        }
    }
}
