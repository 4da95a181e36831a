//! Reading a trace file (`format.rs`), the one reader every tool uses
//! (`pacer trace export|summary|plot|dump`, `pacer sim --replay`). A
//! trace file is input from anywhere (a colleague's run, a bug report):
//! it is read only if it is a regular file (`vmm::input::open_regular_file`),
//! its 16-byte header is read and checked before anything else (a file
//! that is not a trace is refused at once, however large), then its
//! frames one at a time (a frame is at most `format::MAX_FRAME_BYTES`),
//! and the file may hold at most [`MAX_TRACE_BYTES`]. Every frame's
//! checksums are checked (format version 2), every length and field too,
//! and every fault is an error naming the byte offset of the frame or
//! record at fault, never a panic. A file cut short (a run that was
//! killed, a disk that filled) is read up to its last whole frame and
//! says how many bytes of the frame after it were cut.

use std::io::Read;
use std::path::Path;
use vcpu_engine::trace::format::{self, Meta, RingMeta, RunMeta, VmMeta};
use vcpu_engine::trace::record::{Event, Record, RECORD_BYTES};

/// Largest trace file read.
pub const MAX_TRACE_BYTES: u64 = 1 << 30;

/// Why a trace file cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{source}")]
    Io { source: std::io::Error },
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

impl From<std::io::Error> for ReadError {
    fn from(source: std::io::Error) -> ReadError {
        ReadError::Io { source }
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
    /// The file's format version (1: frames without checksums).
    pub version: u32,
    /// Whole frames read.
    pub frames: u64,
    /// Bytes after the last whole frame: the start of a frame the writer
    /// did not finish (0 when the file ends on a frame boundary).
    pub cut_bytes: u64,
}

/// Read into `buf` until it is full or the input ends; how many bytes
/// were read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Check a file header; the format version it names.
fn check_header(head: &[u8]) -> Result<u32, ReadError> {
    if head.len() < format::HEADER_BYTES || &head[..8] != format::MAGIC {
        return Err(ReadError::at(0, "not a Pacer trace (no PACERTRC header)"));
    }
    let version = u32::from_le_bytes([head[8], head[9], head[10], head[11]]);
    if version != format::VERSION && version != format::VERSION_1 {
        return Err(ReadError::at(
            8,
            format!(
                "trace format version {version}, this pacer reads versions {} and {}",
                format::VERSION_1,
                format::VERSION
            ),
        ));
    }
    if head[12..16] != [0, 0, 0, 0] {
        return Err(ReadError::at(12, "the header's reserved bytes are not 0"));
    }
    Ok(version)
}

impl TraceFile {
    /// Read and check the file at `path`: its header first, then its
    /// frames one by one.
    pub fn read(path: &Path) -> Result<TraceFile, ReadError> {
        let file = vmm::input::open_regular_file(path)?;
        let mut r = std::io::BufReader::with_capacity(1 << 16, file);
        let mut head = [0u8; format::HEADER_BYTES];
        let n = read_full(&mut r, &mut head)?;
        let version = check_header(&head[..n])?;
        let size = r.get_ref().metadata()?.len();
        if size > MAX_TRACE_BYTES {
            return Err(ReadError::at(
                0,
                format!(
                    "{size} bytes, more than the {MAX_TRACE_BYTES} bytes a trace file may have"
                ),
            ));
        }
        // Bounded whatever the file claims (it may grow while read).
        let mut r = r.take(MAX_TRACE_BYTES - format::HEADER_BYTES as u64 + 1);
        let t = TraceFile::frames(&mut r, version)?;
        if r.limit() == 0 {
            return Err(ReadError::at(
                0,
                format!("more than the {MAX_TRACE_BYTES} bytes a trace file may have"),
            ));
        }
        Ok(t)
    }

    /// Parse a trace from its bytes.
    pub fn parse(bytes: &[u8]) -> Result<TraceFile, ReadError> {
        let head = bytes.get(..format::HEADER_BYTES).unwrap_or(bytes);
        let version = check_header(head)?;
        TraceFile::frames(&mut &bytes[format::HEADER_BYTES..], version)
    }

    /// Notes a reader should see about a trace that reads (format
    /// version 1, a tail cut short), one line each.
    pub fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        if self.version == format::VERSION_1 {
            notes.push(format!(
                "trace format version 1: its frames have no checksums, damage cannot be detected (version {} has them)",
                format::VERSION
            ));
        }
        if self.cut_bytes > 0 {
            notes.push(format!(
                "the file ends {} bytes into a frame the writer did not finish (killed, or its disk full): read the {} whole frames before it, {} events",
                self.cut_bytes,
                self.frames,
                self.events.len()
            ));
        } else if !self.complete {
            notes.push(format!(
                "no END frame (the recording did not finish): read its {} whole frames, {} events",
                self.frames,
                self.events.len()
            ));
        }
        notes
    }

    /// The frames after the header of a format `version` file.
    fn frames(r: &mut impl Read, version: u32) -> Result<TraceFile, ReadError> {
        let head_bytes = if version == format::VERSION_1 {
            format::FRAME_HEADER_BYTES_V1
        } else {
            format::FRAME_HEADER_BYTES
        };
        let mut run = None;
        let mut vms: Vec<VmMeta> = Vec::new();
        let mut rings = Vec::new();
        let mut events = Vec::new();
        let mut lost = 0u64;
        let mut complete = false;
        let mut frames = 0u64;
        let mut cut_bytes = 0u64;
        let mut payload = Vec::new();
        let mut at = format::HEADER_BYTES;
        loop {
            let mut head = [0u8; format::FRAME_HEADER_BYTES];
            let n = read_full(r, &mut head[..head_bytes])?;
            if n == 0 {
                break;
            }
            if complete {
                return Err(ReadError::at(at, "data after the END frame"));
            }
            if n < head_bytes {
                cut_bytes = n as u64; // a frame header cut short
                break;
            }
            let fh = format::parse_frame_header(version, &head[..head_bytes])
                .map_err(|e| ReadError::at(at, e.to_string()))?;
            let len = fh.len;
            if len > format::MAX_FRAME_BYTES {
                return Err(ReadError::at(
                    at,
                    format!(
                        "frame of {len} bytes, more than the {} a frame may have",
                        format::MAX_FRAME_BYTES
                    ),
                ));
            }
            let start = at + head_bytes;
            payload.clear();
            payload.resize(len as usize, 0);
            let n = read_full(r, &mut payload)?;
            if n < len as usize {
                cut_bytes = (head_bytes + n) as u64; // the payload cut short
                break;
            }
            if let Some(crc) = fh.payload_crc {
                if format::payload_checksum(&payload) != crc {
                    return Err(ReadError::at(
                        at,
                        "frame checksum mismatch (the file is damaged)",
                    ));
                }
            }
            let payload = &payload[..];
            match fh.tag {
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
            frames += 1;
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
            version,
            frames,
            cut_bytes,
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

    fn frame(b: &mut Vec<u8>, tag: u8, payload: &[u8]) {
        b.extend(format::frame_header(tag, payload));
        b.extend(payload);
    }

    /// A trace of format version 2 with `payload` as its records frame.
    fn file_with_payload(payload: &[u8], end: bool) -> Vec<u8> {
        let mut b = format::header().to_vec();
        let run = serde_json::to_vec(&Meta::Run(Box::new(run_meta()))).unwrap();
        frame(&mut b, format::TAG_META, &run);
        frame(&mut b, format::TAG_RECORDS, payload);
        if end {
            frame(&mut b, format::TAG_END, &[0u8; 16]);
        }
        b
    }

    fn file_with(records: &[Record], end: bool) -> Vec<u8> {
        let payload: Vec<u8> = records.iter().flat_map(|r| r.to_bytes()).collect();
        file_with_payload(&payload, end)
    }

    /// The same trace in format version 1 (8-byte frame headers, no
    /// checksums), as written before version 2.
    fn file_v1(records: &[Record]) -> Vec<u8> {
        let mut b = format::header().to_vec();
        b[8..12].copy_from_slice(&format::VERSION_1.to_le_bytes());
        let run = serde_json::to_vec(&Meta::Run(Box::new(run_meta()))).unwrap();
        let payload: Vec<u8> = records.iter().flat_map(|r| r.to_bytes()).collect();
        for (tag, p) in [
            (format::TAG_META, &run[..]),
            (format::TAG_RECORDS, &payload[..]),
            (format::TAG_END, &[0u8; 16][..]),
        ] {
            b.extend([tag, 0, 0, 0]);
            b.extend((p.len() as u32).to_le_bytes());
            b.extend(p);
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
        assert_eq!((f.frames, f.cut_bytes), (3, 0));
        assert!(f.notes().is_empty(), "{:?}", f.notes());
        // Cut inside the END frame, then inside the records frame's
        // payload, then inside its header: the whole frames before are
        // read, and the note says how many bytes were cut.
        let end = format::FRAME_HEADER_BYTES + 16;
        let f = TraceFile::parse(&whole[..whole.len() - 3]).unwrap();
        assert!(!f.complete);
        assert_eq!(
            (f.events.len(), f.frames, f.cut_bytes),
            (3, 2, end as u64 - 3)
        );
        assert!(
            f.notes()[0].contains(&format!("ends {} bytes into a frame", end - 3)),
            "{:?}",
            f.notes()
        );
        let f = TraceFile::parse(&whole[..whole.len() - end - 10]).unwrap();
        let records = format::FRAME_HEADER_BYTES + 3 * RECORD_BYTES;
        assert_eq!(
            (f.events.len(), f.frames, f.cut_bytes),
            (0, 1, records as u64 - 10)
        );
        let f = TraceFile::parse(&whole[..whole.len() - end - records + 5]).unwrap();
        assert_eq!((f.events.len(), f.frames, f.cut_bytes), (0, 1, 5));
        // Ending on a frame boundary without END: no cut, not complete.
        let f = TraceFile::parse(&whole[..whole.len() - end]).unwrap();
        assert_eq!((f.events.len(), f.cut_bytes, f.complete), (3, 0, false));
        assert!(f.notes()[0].contains("no END frame"), "{:?}", f.notes());
    }

    /// Where each byte of a valid file is checked: (start, end, the
    /// offset a fault there is reported at), the header's fields and
    /// every frame.
    fn regions(b: &[u8]) -> Vec<(usize, usize, usize)> {
        let mut r = vec![(0, 8, 0), (8, 12, 8), (12, 16, 12)];
        let mut at = format::HEADER_BYTES;
        while at < b.len() {
            let len = u32::from_le_bytes(b[at + 4..at + 8].try_into().unwrap()) as usize;
            let end = at + format::FRAME_HEADER_BYTES + len;
            r.push((at, end, at));
            at = end;
        }
        assert_eq!(at, b.len());
        r
    }

    #[test]
    fn every_bit_flip_is_refused_at_the_offset_of_its_frame() {
        let v = VcpuRef { vm: 0, vcpu: 1 };
        let recs: Vec<Record> = (0..50)
            .map(|i| Record::new(i, &Event::Park { vcpu: v }))
            .collect();
        let whole = file_with(&recs, true);
        TraceFile::parse(&whole).unwrap();
        let regions = regions(&whole);
        // 40 positions from a fixed xorshift, and every byte of the
        // header and of the first frame header.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut positions: Vec<(usize, u8)> = (0..40)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                ((x % whole.len() as u64) as usize, (x >> 32) as u8 % 8)
            })
            .collect();
        positions.extend((0..32).map(|i| (i, (i % 8) as u8)));
        for (pos, bit) in positions {
            let mut b = whole.clone();
            b[pos] ^= 1 << bit;
            let (_, _, offset) = *regions
                .iter()
                .find(|(s, e, _)| (*s..*e).contains(&pos))
                .unwrap();
            match TraceFile::parse(&b) {
                Err(ReadError::Format { offset: o, what }) => {
                    assert_eq!(o, offset, "bit {bit} of byte {pos}: {what}")
                }
                other => panic!("bit {bit} of byte {pos}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_damaged_length_is_damage_not_a_cut() {
        let v = VcpuRef { vm: 0, vcpu: 1 };
        let mut b = file_with(&[Record::new(1, &Event::Park { vcpu: v })], true);
        let records_at = regions(&b)[4].0;
        // The records frame now claims to run past the end of the file.
        b[records_at + 6] ^= 0x01;
        let e = TraceFile::parse(&b).unwrap_err().to_string();
        assert_eq!(
            e,
            format!("byte {records_at}: frame header checksum mismatch (the file is damaged)")
        );
    }

    #[test]
    fn a_version_1_trace_reads_unchecked_with_a_note() {
        let v = VcpuRef { vm: 0, vcpu: 1 };
        let recs: Vec<Record> = (0..3)
            .map(|i| Record::new(i, &Event::Park { vcpu: v }))
            .collect();
        let f = TraceFile::parse(&file_v1(&recs)).unwrap();
        assert_eq!((f.version, f.events.len(), f.complete), (1, 3, true));
        assert!(f.notes()[0].contains("no checksums"), "{:?}", f.notes());
        let mut b = file_v1(&recs);
        b[8] = 3;
        assert_eq!(
            TraceFile::parse(&b).unwrap_err().to_string(),
            "byte 8: trace format version 3, this pacer reads versions 1 and 2"
        );
    }

    #[test]
    fn a_file_that_is_not_a_trace_is_refused_by_its_header_before_it_is_read() {
        let dir = std::env::temp_dir().join(format!("pacer-trace-header-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // 2 GiB, sparse: over the size cap, so refused by its header only
        // if the header is read first.
        let path = dir.join("huge.trace");
        let f = std::fs::File::create(&path).unwrap();
        f.set_len(2 << 30).unwrap();
        std::fs::write(dir.join("short.trace"), b"PACER").unwrap();
        drop(f);
        {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
            f.write_all(b"NOTATRACE").unwrap();
        }
        let e = TraceFile::read(&path).unwrap_err().to_string();
        assert_eq!(e, "byte 0: not a Pacer trace (no PACERTRC header)");
        let e = TraceFile::read(&dir.join("short.trace"))
            .unwrap_err()
            .to_string();
        assert_eq!(e, "byte 0: not a Pacer trace (no PACERTRC header)");
        // With a good header, the size cap refuses it.
        {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
            f.write_all(&format::header()).unwrap();
        }
        let e = TraceFile::read(&path).unwrap_err().to_string();
        assert!(e.contains("more than the 1073741824 bytes"), "{e}");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn faults_are_errors_with_their_offset() {
        assert!(TraceFile::parse(b"not a trace at all")
            .unwrap_err()
            .to_string()
            .contains("PACERTRC"));
        let v = VcpuRef { vm: 0, vcpu: 1 };
        // A record that is damaged but framed with a good checksum.
        let mut payload = Record::new(1, &Event::Park { vcpu: v }).to_bytes();
        payload[8] = 200;
        let b = file_with_payload(&payload, false);
        let record_at = b.len() - RECORD_BYTES;
        let e = TraceFile::parse(&b).unwrap_err().to_string();
        assert_eq!(e, format!("byte {record_at}: unknown record kind 200"));
        let mut b = file_with(&[], true);
        frame(&mut b, 9, &[]);
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
