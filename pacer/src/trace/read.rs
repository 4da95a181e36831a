//! Reading a trace file (`format.rs`). A trace file is input from anywhere
//! (a colleague's run, a bug report): it is read only if it is a regular
//! file of at most [`MAX_TRACE_BYTES`] (`vmm::input::read_regular_file`),
//! every length and field is checked, and every fault is an error naming
//! the byte offset, never a panic. A file cut short (a run that was
//! killed) is read up to its last whole frame and marked incomplete.

use std::path::Path;
use vcpu_engine::trace::format::{self, Meta, RingMeta, RunMeta, VmMeta};
use vcpu_engine::trace::record::{Event, Record, RECORD_BYTES};

/// Largest trace file read.
pub const MAX_TRACE_BYTES: u64 = 1 << 30;

/// Why a trace file cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("byte {offset}: {what}")]
    Format { offset: usize, what: String },
}

impl ReadError {
    fn at(offset: usize, what: impl Into<String>) -> ReadError {
        ReadError::Format {
            offset,
            what: what.into(),
        }
    }
}

/// An event and when it happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timed {
    pub t_ns: u64,
    pub event: Event,
}

/// A whole trace, events in time order.
#[derive(Debug, Clone)]
pub struct TraceFile {
    pub run: RunMeta,
    pub vms: Vec<VmMeta>,
    pub rings: Vec<RingMeta>,
    pub events: Vec<Timed>,
    /// Events the recording lost (full rings).
    pub lost: u64,
    /// The END frame was there (the recording finished).
    pub complete: bool,
}

impl TraceFile {
    /// Read and check the file at `path`.
    pub fn read(path: &Path) -> Result<TraceFile, ReadError> {
        let bytes = vmm::input::read_regular_file(path, MAX_TRACE_BYTES, "a trace file").map_err(
            |source| ReadError::Io {
                path: path.display().to_string(),
                source,
            },
        )?;
        TraceFile::parse(&bytes)
    }

    /// Parse a trace from its bytes.
    pub fn parse(bytes: &[u8]) -> Result<TraceFile, ReadError> {
        if bytes.len() < format::HEADER_BYTES || &bytes[..8] != format::MAGIC {
            return Err(ReadError::at(0, "not a Pacer trace (no PACERTRC header)"));
        }
        let version = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
        if version != format::VERSION {
            return Err(ReadError::at(
                8,
                format!(
                    "trace format version {version}, this pacer reads version {}",
                    format::VERSION
                ),
            ));
        }
        let mut run = None;
        let mut vms: Vec<VmMeta> = Vec::new();
        let mut rings = Vec::new();
        let mut events = Vec::new();
        let mut lost = 0u64;
        let mut complete = false;
        let mut at = format::HEADER_BYTES;
        while at < bytes.len() {
            if complete {
                return Err(ReadError::at(at, "data after the END frame"));
            }
            let Some(head) = bytes.get(at..at + format::FRAME_HEADER_BYTES) else {
                break; // a frame header cut short: the recording was killed
            };
            let tag = head[0];
            let len = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
            if len > format::MAX_FRAME_BYTES {
                return Err(ReadError::at(
                    at,
                    format!(
                        "frame of {len} bytes, more than the {} a frame may have",
                        format::MAX_FRAME_BYTES
                    ),
                ));
            }
            let start = at + format::FRAME_HEADER_BYTES;
            let Some(payload) = bytes.get(start..start + len as usize) else {
                break; // cut short
            };
            match tag {
                format::TAG_META => {
                    let meta: Meta = serde_json::from_slice(payload).map_err(|e| {
                        ReadError::at(start, format!("metadata is not valid JSON: {e}"))
                    })?;
                    match meta {
                        Meta::Run(r) => {
                            if run.is_some() {
                                return Err(ReadError::at(start, "a second run description"));
                            }
                            r.topology
                                .validate()
                                .map_err(|e| ReadError::at(start, format!("run topology: {e}")))?;
                            run = Some(*r);
                        }
                        Meta::Vm(v) => {
                            if vms.iter().any(|o| o.id == v.id) {
                                return Err(ReadError::at(
                                    start,
                                    format!("VM id {} described twice", v.id),
                                ));
                            }
                            vms.push(v);
                        }
                        Meta::Ring(r) => rings.push(r),
                    }
                }
                format::TAG_RECORDS => {
                    if len as usize % RECORD_BYTES != 0 {
                        return Err(ReadError::at(
                            at,
                            format!(
                                "records frame of {len} bytes, not a multiple of {RECORD_BYTES}"
                            ),
                        ));
                    }
                    for (i, chunk) in payload.chunks_exact(RECORD_BYTES).enumerate() {
                        let mut b = [0u8; RECORD_BYTES];
                        b.copy_from_slice(chunk);
                        let r = Record::from_bytes(&b);
                        let event = r
                            .event()
                            .map_err(|e| ReadError::at(start + i * RECORD_BYTES, e.to_string()))?;
                        if let Event::Lost { count } = event {
                            lost = lost.saturating_add(count);
                        }
                        events.push(Timed {
                            t_ns: r.t_ns,
                            event,
                        });
                    }
                }
                format::TAG_END => {
                    if len != 16 {
                        return Err(ReadError::at(
                            at,
                            format!("END frame of {len} bytes, not 16"),
                        ));
                    }
                    complete = true;
                }
                other => return Err(ReadError::at(at, format!("unknown frame tag {other}"))),
            }
            at = start + len as usize;
        }
        let run = run.ok_or_else(|| ReadError::at(format::HEADER_BYTES, "no run description"))?;
        if run.topology.cpus.is_empty() {
            return Err(ReadError::at(format::HEADER_BYTES, "the run has no CPUs"));
        }
        // Stable: events of one thread keep their order at equal times.
        events.sort_by_key(|e| e.t_ns);
        Ok(TraceFile {
            run,
            vms,
            rings,
            events,
            lost,
            complete,
        })
    }

    /// The VM with trace id `id`.
    pub fn vm(&self, id: u16) -> Option<&VmMeta> {
        self.vms.iter().find(|v| v.id == id)
    }

    /// `vm/vcpuN` for a vCPU (its VM's name when known).
    pub fn vcpu_name(&self, v: vcpu_engine::trace::record::VcpuRef) -> String {
        match self.vm(v.vm) {
            Some(m) => format!("{}/vcpu{}", m.name, v.vcpu),
            None => format!("vm{}/vcpu{}", v.vm, v.vcpu),
        }
    }

    /// First and last event times (0, 0 without events).
    pub fn span(&self) -> (u64, u64) {
        match (self.events.first(), self.events.last()) {
            (Some(a), Some(b)) => (a.t_ns, b.t_ns),
            _ => (0, 0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use vcpu_engine::trace::record::VcpuRef;
    use vcpu_engine::trace::{TraceConfig, Tracer};

    /// A run on a 2-CPU topology.
    pub(crate) fn run_meta() -> RunMeta {
        RunMeta {
            policy: "haiku".into(),
            mode: "low-latency".into(),
            dispatch: "threads".into(),
            topology: vcpu_sched::Topology::from_spec("1x2x1").unwrap(),
            start_ns: 0,
            config: None,
            sched: None,
        }
    }

    fn file_with(records: &[Record], end: bool) -> Vec<u8> {
        let mut b = format::header().to_vec();
        let run = serde_json::to_vec(&Meta::Run(Box::new(run_meta()))).unwrap();
        b.extend(format::frame_header(format::TAG_META, run.len() as u32));
        b.extend(run);
        let mut payload = Vec::new();
        for r in records {
            payload.extend(r.to_bytes());
        }
        b.extend(format::frame_header(
            format::TAG_RECORDS,
            payload.len() as u32,
        ));
        b.extend(payload);
        if end {
            b.extend(format::frame_header(format::TAG_END, 16));
            b.extend([0u8; 16]);
        }
        b
    }

    #[test]
    fn a_file_cut_short_reads_up_to_its_last_whole_frame() {
        let v = VcpuRef { vm: 0, vcpu: 1 };
        let recs: Vec<Record> = (0..3)
            .map(|i| Record::new(10 - i, &Event::Park { vcpu: v }))
            .collect();
        let whole = file_with(&recs, true);
        let f = TraceFile::parse(&whole).unwrap();
        assert!(f.complete);
        assert_eq!(
            f.events.iter().map(|e| e.t_ns).collect::<Vec<_>>(),
            [8, 9, 10],
            "sorted by time"
        );
        // Cut inside the END frame, then inside the records frame.
        let f = TraceFile::parse(&whole[..whole.len() - 3]).unwrap();
        assert!(!f.complete);
        assert_eq!(f.events.len(), 3);
        let f = TraceFile::parse(&whole[..whole.len() - 24 - 10]).unwrap();
        assert_eq!(f.events.len(), 0);
    }

    #[test]
    fn faults_are_errors_with_their_offset() {
        assert!(TraceFile::parse(b"not a trace at all")
            .unwrap_err()
            .to_string()
            .contains("PACERTRC"));
        let v = VcpuRef { vm: 0, vcpu: 1 };
        let mut b = file_with(&[Record::new(1, &Event::Park { vcpu: v })], false);
        let kind_at = b.len() - RECORD_BYTES + 8;
        b[kind_at] = 200;
        let e = TraceFile::parse(&b).unwrap_err().to_string();
        assert_eq!(e, format!("byte {}: unknown record kind 200", kind_at - 8));
        let mut b = file_with(&[], true);
        b.extend([9u8, 0, 0, 0, 0, 0, 0, 0]);
        assert!(TraceFile::parse(&b)
            .unwrap_err()
            .to_string()
            .contains("after the END"));
    }

    #[test]
    fn events_from_several_threads_reach_the_file_with_their_losses() {
        let dir = std::env::temp_dir().join(format!("pacer-tracer-{}", std::process::id()));
        let path = dir.join("t.trace");
        let mut config = TraceConfig::new(&path);
        config.ring_capacity = 16;
        // Long enough that the threads fill their rings first.
        config.drain_every = Duration::from_secs(3600);
        let tracer = Tracer::start(&config, run_meta()).unwrap();
        let v = VcpuRef { vm: 0, vcpu: 0 };
        let threads: Vec<_> = (0..3u16)
            .map(|i| {
                let t = tracer.trace();
                std::thread::Builder::new()
                    .name(format!("writer{i}"))
                    .spawn(move || {
                        for _ in 0..(10 + 10 * i) {
                            t.emit(Event::Park { vcpu: v });
                        }
                    })
                    .unwrap()
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let totals = tracer.finish().unwrap();
        // 10, 20 and 30 events into rings of 16: 10 + 16 + 16 kept.
        assert_eq!(totals.lost, 4 + 14);
        let file = TraceFile::read(&path).unwrap();
        let parks = file
            .events
            .iter()
            .filter(|e| matches!(e.event, Event::Park { .. }))
            .count();
        assert_eq!(parks, 42);
        assert_eq!(file.lost, 18);
        assert!(file.complete);
        let mut threads: Vec<&str> = file.rings.iter().map(|r| r.thread.as_str()).collect();
        threads.sort();
        assert_eq!(threads, ["writer0", "writer1", "writer2"]);
        let _ = std::fs::remove_dir_all(dir);
    }
}
