//! The trace file: a header, then frames, each a header (tag, length,
//! checksums) and a payload. Written by the drain thread
//! ([`super::tracer`]); the constants and metadata types here are what a
//! reader (Pacer's `pacer::trace::read`) checks a file against.
//!
//! ```text
//! header   "PACERTRC"  u32 version (2)  u32 0
//! frame    u8 tag  3 bytes 0  u32 payload length
//!          u32 CRC-32 of the payload  u32 CRC-32 of the frame header's
//!          12 bytes before it  payload
//!   META     one JSON object (a `Meta`): the run, a VM, a writing thread
//!   RECORDS  32-byte records (`record.rs`), in drain order
//!   END      u64 records written, u64 records lost (the run ended cleanly)
//! ```
//!
//! The checksums are CRC-32 (IEEE, `crc32fast`), computed once per frame
//! by the drain thread (a frame is one drain's records), never per event.
//! The frame header has its own so that a reader can tell a damaged
//! length from a file cut short: a header whose checksum holds and whose
//! payload runs past the end of the file is a cut (the writer stopped:
//! killed, disk full), read up to the frame before; any checksum that
//! fails is damage and the file is refused at that frame's offset.
//!
//! Version 1 (before the checksums) had 8-byte frame headers (tag, 3
//! bytes 0, u32 length) and nothing else; a reader still reads it,
//! unchecked, and says so.
//!
//! Records are written in batches as the drain finds them, so the file is
//! ordered by drain, not by time: a reader sorts by time. A file without
//! its END frame (a run that was killed) is still readable up to its last
//! whole frame. Integers are little-endian.

use serde::{Deserialize, Serialize};

/// The first 8 bytes of every trace file.
pub const MAGIC: &[u8; 8] = b"PACERTRC";
/// The file format's version, after the magic.
pub const VERSION: u32 = 2;
/// The version before frame checksums (still readable, unchecked).
pub const VERSION_1: u32 = 1;
/// Bytes before the first frame: magic, version, 4 reserved.
pub const HEADER_BYTES: usize = 16;
/// Bytes before each frame's payload: tag, 3 reserved, u32 length, u32
/// payload CRC, u32 CRC of the 12 bytes before it.
pub const FRAME_HEADER_BYTES: usize = 16;
/// A version 1 frame's header: tag, 3 reserved, u32 length.
pub const FRAME_HEADER_BYTES_V1: usize = 8;
/// Frame tag: one JSON [`Meta`].
pub const TAG_META: u8 = 1;
/// Frame tag: whole 32-byte records ([`super::record::Record`]).
pub const TAG_RECORDS: u8 = 2;
/// Frame tag: the totals of a run that ended cleanly (last frame).
pub const TAG_END: u8 = 3;
/// Largest frame a writer makes (and a reader accepts).
pub const MAX_FRAME_BYTES: u32 = 16 << 20;
/// The schema version of the JSON documents trace commands write
/// (`pacer trace export`, `summary --json`).
pub const SCHEMA_VERSION: u32 = 1;

/// The run a trace is of.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunMeta {
    /// `haiku`, `global-rr`, `pinned`.
    pub policy: String,
    /// The scheduler's mode (`low-latency`, `power-saving`).
    pub mode: String,
    /// [`crate::DispatchKind`] as named (`threads`, `workers`).
    pub dispatch: String,
    /// The scheduled CPUs: `os_id` is the number records use for a CPU.
    pub topology: vcpu_sched::Topology,
    /// The engine clock when the trace began, ns.
    pub start_ns: u64,
    /// The config file the run came from, if any.
    #[serde(default)]
    pub config: Option<String>,
    /// The scheduler's whole configuration (tunables included), so a
    /// replay runs the policy as it ran.
    #[serde(default)]
    pub sched: Option<vcpu_sched::SchedConfig>,
}

/// A VM that joined the run's engine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VmMeta {
    /// The id records use (order of arrival, from 0).
    pub id: u16,
    /// Its name ([`crate::VmSchedSpec::name`]).
    pub name: String,
    /// How many vCPUs it has (indices `0..vcpus`).
    pub vcpus: u16,
    /// `timeshare` or `realtime`.
    pub class: String,
    /// Its vCPUs' base priority.
    pub priority: u8,
    /// Its core set (OS CPU numbers).
    pub cpus: Vec<u32>,
}

/// A thread that records (one ring each).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RingMeta {
    /// The ring's id (order of registration, from 0).
    pub id: u32,
    /// The recording thread's name (`vm0/vcpu1`, `pacer/timers`, ...).
    pub thread: String,
    /// Records the ring holds; more between two drains are lost.
    pub capacity: usize,
}

/// A metadata frame.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Meta {
    /// The run (the first frame after the header).
    Run(Box<RunMeta>),
    /// A VM joined the engine.
    Vm(VmMeta),
    /// A thread recorded its first event.
    Ring(RingMeta),
}

/// The header's bytes.
pub fn header() -> [u8; HEADER_BYTES] {
    let mut h = [0u8; HEADER_BYTES];
    h[..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    h
}

/// The header of a frame carrying `payload` (at most
/// [`MAX_FRAME_BYTES`]; a longer one is the caller's error and gets a
/// length a reader refuses).
pub fn frame_header(tag: u8, payload: &[u8]) -> [u8; FRAME_HEADER_BYTES] {
    let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
    let mut h = [0u8; FRAME_HEADER_BYTES];
    h[0] = tag;
    h[4..8].copy_from_slice(&len.to_le_bytes());
    h[8..12].copy_from_slice(&payload_checksum(payload).to_le_bytes());
    let head = crc32fast::hash(&h[..12]);
    h[12..16].copy_from_slice(&head.to_le_bytes());
    h
}

/// The checksum a frame's payload carries in its header (CRC-32, IEEE).
pub fn payload_checksum(payload: &[u8]) -> u32 {
    crc32fast::hash(payload)
}

/// A frame header as read, its own checksum checked
/// ([`parse_frame_header`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// The frame's tag.
    pub tag: u8,
    /// Its payload's length.
    pub len: u32,
    /// The CRC-32 its payload must have (None in a version 1 file).
    pub payload_crc: Option<u32>,
}

/// Why a frame header is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FrameHeaderError {
    /// The header's checksum does not match its bytes.
    #[error("frame header checksum mismatch (the file is damaged)")]
    Checksum,
    /// The reserved bytes are not 0.
    #[error("frame header's reserved bytes are not 0")]
    Reserved,
}

/// Read a frame header of format `version` ([`VERSION`] or
/// [`VERSION_1`]): `bytes` holds [`FRAME_HEADER_BYTES`] (version 2) or
/// [`FRAME_HEADER_BYTES_V1`] bytes (more are ignored; fewer is the caller's
/// error and reads as a bad checksum).
pub fn parse_frame_header(version: u32, bytes: &[u8]) -> Result<FrameHeader, FrameHeaderError> {
    let u32_at = |i: usize| {
        bytes
            .get(i..i + 4)
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .map(u32::from_le_bytes)
    };
    let (Some(&tag), Some(len)) = (bytes.first(), u32_at(4)) else {
        return Err(FrameHeaderError::Checksum);
    };
    let payload_crc = if version == VERSION_1 {
        None
    } else {
        let (Some(crc), Some(head)) = (u32_at(8), u32_at(12)) else {
            return Err(FrameHeaderError::Checksum);
        };
        if crc32fast::hash(&bytes[..12]) != head {
            return Err(FrameHeaderError::Checksum);
        }
        Some(crc)
    };
    if bytes[1..4] != [0, 0, 0] {
        return Err(FrameHeaderError::Reserved);
    }
    Ok(FrameHeader {
        tag,
        len,
        payload_crc,
    })
}
