//! Scheduling traces: what the engine and the interrupt controller did,
//! when, on which host CPU, for which vCPU, recorded cheaply enough to
//! leave on while measuring (xentrace, `perf sched record`), then looked
//! at offline: a Perfetto timeline, a per-path latency summary, a picture,
//! or a replay through the simulator on another topology or policy.
//!
//! - [`record`]: the events and their fixed 32-byte record;
//! - [`ring`]: the per-thread lock-free buffer the hot path writes;
//! - [`tracer`]: the recording handle and the drain thread that writes the
//!   file;
//! - [`format`]: the file's frames and metadata; [`read`]: reading it back
//!   (untrusted input: capped, checked, never a panic);
//! - [`summary`] (per-path latency breakdown), [`export`] (Perfetto JSON),
//!   [`plot`] (the timeline as PNG/SVG), [`describe`] (events in words):
//!   `pacer trace` ([`command`]).
//!
//! Where the engine records each event: `engine/trace_points.rs`.

pub mod command;
pub mod describe;
pub mod export;
pub mod format;
pub mod plot;
pub mod read;
pub mod record;
pub mod replay;
pub mod ring;
pub mod summary;
pub mod tracer;

pub use read::{Timed, TraceFile};
pub use record::{Cause, Event, StopWhy, VcpuRef};
pub use tracer::{Trace, TraceConfig, TraceOutcome, TraceTotals, Tracer};
