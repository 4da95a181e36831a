//! The trace file: a header, then frames, each a tag, a length and a
//! payload. Written by the drain thread ([`super::tracer`]); the
//! constants and metadata types here are what a reader (Pacer's
//! `vmm::trace::read`) checks a file against.
//!
//! ```text
//! header   "PACERTRC"  u32 version (1)  u32 0
//! frame    u8 tag  3 bytes 0  u32 payload length  payload
//!   META     one JSON object (a `Meta`): the run, a VM, a writing thread
//!   RECORDS  32-byte records (`record.rs`), in drain order
//!   END      u64 records written, u64 records lost (the run ended cleanly)
//! ```
//!
//! Records are written in batches as the drain finds them, so the file is
//! ordered by drain, not by time: a reader sorts by time. A file without
//! its END frame (a run that was killed) is still readable up to its last
//! whole frame. Integers are little-endian.

use serde::{Deserialize, Serialize};

/// The first 8 bytes of every trace file.
pub const MAGIC: &[u8; 8] = b"PACERTRC";
/// The file format's version, after the magic (a reader refuses others).
pub const VERSION: u32 = 1;
/// Bytes before the first frame: magic, version, 4 reserved.
pub const HEADER_BYTES: usize = 16;
/// Bytes before each frame's payload: tag, 3 reserved, u32 length.
pub const FRAME_HEADER_BYTES: usize = 8;
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

/// A frame's header.
pub fn frame_header(tag: u8, len: u32) -> [u8; FRAME_HEADER_BYTES] {
    let mut h = [0u8; FRAME_HEADER_BYTES];
    h[0] = tag;
    h[4..8].copy_from_slice(&len.to_le_bytes());
    h
}
