//! Every guest-facing port-I/O device on one bus, as a VM wires them: COM1
//! (serial), the i8042, the result port (markers and records read from
//! guest memory) and the exit port. An input is a sequence of IN/OUT of
//! any width at any port (most of them near the devices), writes into the
//! fake guest memory, and well-formed records placed in it, in any order.
//! Invariants: no panic; an unclaimed IN reads all ones; every record
//! write reaches the VM as a record or a rejection; an exit-port write of
//! a value is a guest exit with that value.

use crate::driver::Target;
use arbitrary::{Arbitrary, Unstructured};
use devices::exit_port::{ExitPort, EXIT_PORT, EXIT_PORT_LEN};
use devices::i8042::{I8042, I8042_BASE, I8042_LEN};
use devices::irq::NoInterrupt;
use devices::result_port::{encode_record, ResultPort, RESULT_PORT_BASE, RESULT_PORT_LEN};
use devices::serial::{ConsoleWriter, SerialConsole, COM1_BASE, COM1_LEN};
use devices::{
    GuestMemoryRead, IoContext, Marker, PioBus, RecordError, ResultRecord, StopRequest, VmEventSink,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Fake guest RAM size (a record or TEXT beyond it is "outside RAM").
const RAM: usize = 64 * 1024;

/// Guest memory the ops write into.
pub struct FakeRam(pub Mutex<Vec<u8>>);

impl GuestMemoryRead for FakeRam {
    fn read_guest(&self, gpa: u64, buf: &mut [u8]) -> bool {
        let ram = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let Some(end) = gpa.checked_add(buf.len() as u64) else {
            return false;
        };
        if end > ram.len() as u64 {
            return false;
        }
        buf.copy_from_slice(&ram[gpa as usize..end as usize]);
        true
    }
}

/// Counts what the devices report (nothing is stored: memory stays flat).
#[derive(Default)]
pub struct CountingSink {
    pub markers: AtomicU64,
    pub records: AtomicU64,
    pub rejected: AtomicU64,
    pub last_exit: Mutex<Option<StopRequest>>,
}

impl VmEventSink for CountingSink {
    fn marker(&self, _vcpu: u32, _marker: Marker) {
        self.markers.fetch_add(1, Ordering::Relaxed);
    }
    fn record(&self, _vcpu: u32, record: Result<ResultRecord, RecordError>) {
        match record {
            Ok(_) => self.records.fetch_add(1, Ordering::Relaxed),
            Err(_) => self.rejected.fetch_add(1, Ordering::Relaxed),
        };
    }
    fn stop_request(&self, _vcpu: u32, request: StopRequest) {
        *self.last_exit.lock().unwrap_or_else(|p| p.into_inner()) = Some(request);
    }
}

/// Where an access goes: mostly at or next to a device.
#[derive(Debug, Arbitrary)]
enum Port {
    Serial(u8),
    I8042(u8),
    Result(u8),
    Exit(u8),
    Any(u16),
}

impl Port {
    fn resolve(&self) -> u16 {
        // Offsets up to 2 beyond each range probe its edges.
        match *self {
            Port::Serial(o) => COM1_BASE.wrapping_add(u16::from(o) % (COM1_LEN + 2)),
            Port::I8042(o) => I8042_BASE.wrapping_add(u16::from(o) % (I8042_LEN + 2)),
            Port::Result(o) => RESULT_PORT_BASE.wrapping_add(u16::from(o) % (RESULT_PORT_LEN + 2)),
            Port::Exit(o) => EXIT_PORT.wrapping_add(u16::from(o) % (EXIT_PORT_LEN + 2)),
            Port::Any(p) => p,
        }
    }
}

#[derive(Debug, Arbitrary)]
enum Op {
    In {
        port: Port,
        width: u8,
    },
    Out {
        port: Port,
        width: u8,
        value: u32,
    },
    Poke {
        addr: u16,
        bytes: [u8; 8],
    },
    /// A well-formed record (any kind number) at `addr`, then its address
    /// written to the record port.
    Record {
        addr: u16,
        kind: u16,
        values: [u64; 5],
        text: Option<(u16, u16)>,
    },
}

fn width(w: u8) -> usize {
    [1, 2, 4][usize::from(w % 3)]
}

pub struct PioTarget;

impl PioTarget {
    pub fn new() -> PioTarget {
        PioTarget
    }
}

impl Default for PioTarget {
    fn default() -> Self {
        Self::new()
    }
}

impl Target for PioTarget {
    fn name(&self) -> &'static str {
        "pio"
    }

    fn seeds(&self) -> Vec<Vec<u8>> {
        vec![vec![0; 64], (0..=255).collect(), vec![0xff; 512]]
    }

    fn run(&mut self, data: &[u8]) -> Result<(), String> {
        let mut u = Unstructured::new(data);
        let ram = Arc::new(FakeRam(Mutex::new(vec![0; RAM])));
        let sink = Arc::new(CountingSink::default());
        let mut bus = PioBus::new();
        let serial = SerialConsole::new(
            Arc::new(NoInterrupt),
            ConsoleWriter::new("fuzz", None, false),
        );
        let bus_err = |e: devices::bus::BusError| e.to_string();
        bus.insert(COM1_BASE, COM1_LEN, Arc::new(Mutex::new(serial)))
            .map_err(bus_err)?;
        bus.insert(
            I8042_BASE,
            I8042_LEN,
            Arc::new(Mutex::new(I8042::new(sink.clone()))),
        )
        .map_err(bus_err)?;
        bus.insert(
            RESULT_PORT_BASE,
            RESULT_PORT_LEN,
            Arc::new(Mutex::new(ResultPort::new(ram.clone(), sink.clone()))),
        )
        .map_err(bus_err)?;
        bus.insert(
            EXIT_PORT,
            EXIT_PORT_LEN,
            Arc::new(Mutex::new(ExitPort::new(sink.clone()))),
        )
        .map_err(bus_err)?;
        let ctx = IoContext { vcpu: 0 };
        while !u.is_empty() {
            let Ok(op) = Op::arbitrary(&mut u) else { break };
            match op {
                Op::In { port, width: w } => {
                    let mut buf = vec![0u8; width(w)];
                    let p = port.resolve();
                    if !bus.read(ctx, p, &mut buf) && buf.iter().any(|&b| b != 0xff) {
                        return Err(format!("unclaimed IN {p:#x} read {buf:?}"));
                    }
                }
                Op::Out {
                    port,
                    width: w,
                    value,
                } => {
                    let p = port.resolve();
                    let bytes = &value.to_le_bytes()[..width(w)];
                    let records = sink.records.load(Ordering::Relaxed)
                        + sink.rejected.load(Ordering::Relaxed);
                    let claimed = bus.write(ctx, p, bytes);
                    let now = sink.records.load(Ordering::Relaxed)
                        + sink.rejected.load(Ordering::Relaxed);
                    if claimed && p == devices::result_port::RECORD_PORT && now != records + 1 {
                        return Err(format!(
                            "record port write {bytes:?} gave {} events",
                            now - records
                        ));
                    }
                    if claimed && p == EXIT_PORT {
                        let mut b = [0u8; 4];
                        b[..bytes.len()].copy_from_slice(bytes);
                        let want = StopRequest::GuestExit(u32::from_le_bytes(b));
                        let got = *sink.last_exit.lock().unwrap_or_else(|p| p.into_inner());
                        if got != Some(want) {
                            return Err(format!("exit port write {bytes:?}: {got:?}"));
                        }
                    }
                }
                Op::Poke { addr, bytes } => {
                    let mut r = ram.0.lock().unwrap_or_else(|p| p.into_inner());
                    let a = usize::from(addr);
                    let n = bytes.len().min(RAM - a);
                    r[a..a + n].copy_from_slice(&bytes[..n]);
                }
                Op::Record {
                    addr,
                    kind,
                    mut values,
                    text,
                } => {
                    if let Some((taddr, tlen)) = text {
                        values[0] = u64::from(taddr);
                        values[1] = u64::from(tlen);
                    }
                    let rec = encode_record(kind % 8, 0, 0, 0, values);
                    {
                        let mut r = ram.0.lock().unwrap_or_else(|p| p.into_inner());
                        let a = usize::from(addr);
                        let n = rec.len().min(RAM - a);
                        r[a..a + n].copy_from_slice(&rec[..n]);
                    }
                    bus.write(
                        ctx,
                        devices::result_port::RECORD_PORT,
                        &u32::from(addr).to_le_bytes(),
                    );
                }
            }
        }
        Ok(())
    }
}
