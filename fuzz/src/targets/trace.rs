//! The scheduling trace reader (`pacer trace ...`, `pacer sim --replay`):
//! any bytes as a trace file, then everything that reads a trace. A trace
//! comes from anywhere (a colleague's run, a bug report).
//! Invariants: parsing never panics; every event read re-encodes to a
//! record that decodes to it again; the summary, the Perfetto export (as
//! valid JSON) and the replay's scripts are built without a panic, and a
//! replay's sends name vCPUs it has.

use crate::driver::Target;
use pacer::trace::TraceFile;
use vcpu_engine::trace::format::{self, Meta, RunMeta, VmMeta};
use vcpu_engine::trace::record::{Event, Record, StopWhy, VcpuRef};
use vcpu_engine::trace::Cause;

pub struct TraceTarget;

impl TraceTarget {
    pub fn new() -> TraceTarget {
        TraceTarget
    }
}

impl Default for TraceTarget {
    fn default() -> Self {
        Self::new()
    }
}

fn frame(out: &mut Vec<u8>, tag: u8, payload: &[u8]) {
    out.extend(format::frame_header(tag, payload));
    out.extend(payload);
}

/// A small trace of a ping-pong pair, written as the tracer writes one.
fn pingpong_trace(complete: bool) -> Vec<u8> {
    let mut b = format::header().to_vec();
    let run = Meta::Run(Box::new(RunMeta {
        policy: "haiku".into(),
        mode: "low-latency".into(),
        dispatch: "threads".into(),
        topology: vcpu_sched::Topology::from_spec("1x2x1").unwrap_or_else(|_| unreachable!()),
        start_ns: 0,
        config: Some("pingpong.toml".into()),
        sched: None,
    }));
    let vm = Meta::Vm(VmMeta {
        id: 0,
        name: "pp".into(),
        vcpus: 2,
        class: "timeshare".into(),
        priority: 10,
        cpus: vec![0, 1],
    });
    for m in [run, vm] {
        frame(
            &mut b,
            format::TAG_META,
            &serde_json::to_vec(&m).unwrap_or_default(),
        );
    }
    let (a, c) = (VcpuRef { vm: 0, vcpu: 0 }, VcpuRef { vm: 0, vcpu: 1 });
    let mut t = 1_000u64;
    let mut records = Vec::new();
    let mut at = |ev: Event, dt: u64| {
        t += dt;
        records.extend(Record::new(t, &ev).to_bytes());
    };
    at(
        Event::Notify {
            vcpu: a,
            cause: Cause::Start,
        },
        0,
    );
    at(
        Event::Wake {
            vcpu: a,
            cpu: Some(0),
            kick: true,
            cut: false,
        },
        10,
    );
    at(
        Event::Dispatch {
            cpu: 0,
            vcpu: a,
            quantum_ns: 2_000_000,
            priority: Some(10),
            by_waker: true,
        },
        1,
    );
    at(
        Event::Unpark {
            cpu: 0,
            vcpu: a,
            thread_cpu_ns: 5,
        },
        3,
    );
    for k in 0..3u64 {
        for (s, r, cpu) in [(a, c, 1), (c, a, 0)] {
            at(
                Event::Notify {
                    vcpu: r,
                    cause: Cause::Ipi { from: s.vcpu },
                },
                50,
            );
            at(
                Event::Wake {
                    vcpu: r,
                    cpu: Some(cpu),
                    kick: true,
                    cut: false,
                },
                2,
            );
            at(Event::Kick { cpu, busy: false }, 1);
            at(
                Event::Dispatch {
                    cpu,
                    vcpu: r,
                    quantum_ns: 1_000_000,
                    priority: Some(9),
                    by_waker: true,
                },
                1,
            );
            at(
                Event::Unpark {
                    cpu,
                    vcpu: r,
                    thread_cpu_ns: 100 * k,
                },
                2,
            );
            at(
                Event::Inject {
                    cpu,
                    vcpu: r,
                    vector: 0xfd,
                },
                7,
            );
            at(
                Event::Eoi {
                    vcpu: r,
                    vector: 0xfd,
                },
                21,
            );
            at(
                Event::Stop {
                    cpu: 1 - cpu,
                    vcpu: s,
                    why: StopWhy::Halted,
                    thread_cpu_ns: 100 * k,
                },
                30,
            );
            at(Event::Idle { cpu: 1 - cpu }, 1);
        }
    }
    at(Event::Lost { count: 3 }, 5);
    frame(&mut b, format::TAG_RECORDS, &records);
    if complete {
        frame(&mut b, format::TAG_END, &[0u8; 16]);
    }
    b
}

/// `trace` (whole frames, format version 2) in format version 1: 8-byte
/// frame headers without checksums. A mutant of a version 2 seed almost
/// always fails a checksum; version 1 seeds keep the fuzzer reaching the
/// frames' contents (the reader still reads version 1).
fn as_version_1(trace: &[u8]) -> Vec<u8> {
    let mut b = trace[..format::HEADER_BYTES].to_vec();
    b[8..12].copy_from_slice(&format::VERSION_1.to_le_bytes());
    let mut at = format::HEADER_BYTES;
    while at + format::FRAME_HEADER_BYTES <= trace.len() {
        let len = u32::from_le_bytes([trace[at + 4], trace[at + 5], trace[at + 6], trace[at + 7]])
            as usize;
        let start = at + format::FRAME_HEADER_BYTES;
        let Some(payload) = trace.get(start..start + len) else {
            break;
        };
        b.extend(&trace[at..at + format::FRAME_HEADER_BYTES_V1]);
        b.extend(payload);
        at = start + len;
    }
    b
}

impl Target for TraceTarget {
    fn name(&self) -> &'static str {
        "trace"
    }

    fn max_len(&self) -> usize {
        1 << 16
    }

    fn seeds(&self) -> Vec<Vec<u8>> {
        vec![
            pingpong_trace(true),
            pingpong_trace(false),
            as_version_1(&pingpong_trace(true)),
            format::header().to_vec(),
        ]
    }

    fn run(&mut self, data: &[u8]) -> Result<(), String> {
        let Ok(trace) = TraceFile::parse(data) else {
            return Ok(());
        };
        for e in &trace.events {
            let again = Record::new(e.t_ns, &e.event).event();
            if again.as_ref() != Ok(&e.event) {
                return Err(format!("{:?} re-encodes to {again:?}", e.event));
            }
        }
        let summary = pacer::trace::summary::Summary::of(&trace);
        let _ = summary.to_text(&trace);
        let json = pacer::trace::export::perfetto_json(&trace);
        if serde_json::from_str::<serde_json::Value>(&json).is_err() {
            return Err("the Perfetto export is not valid JSON".into());
        }
        if let Ok(rec) = pacer::trace::replay::replay_of(
            &trace,
            None,
            None,
            pacer::trace::replay::Demand::Scheduled,
        ) {
            rec.replay.validate().map_err(|e| format!("replay: {e}"))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seeds_are_traces_the_reader_takes_whole() {
        let whole = TraceFile::parse(&pingpong_trace(true)).unwrap();
        assert!(whole.complete);
        assert_eq!(whole.lost, 3);
        let summary = pacer::trace::summary::Summary::of(&whole);
        assert_eq!(summary.round_trips.len(), 1, "{summary:?}");
        let cut = TraceFile::parse(&pingpong_trace(false)).unwrap();
        assert!(!cut.complete);
        assert_eq!(cut.events.len(), whole.events.len());
        assert!(TraceTarget::new().run(&pingpong_trace(true)).is_ok());
        let v1 = TraceFile::parse(&as_version_1(&pingpong_trace(true))).unwrap();
        assert_eq!((v1.version, v1.events.len()), (1, whole.events.len()));
    }
}
