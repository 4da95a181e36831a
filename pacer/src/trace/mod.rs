//! Scheduling traces: what the engine and the interrupt controller did,
//! when, on which host CPU, for which vCPU, recorded cheaply enough to
//! leave on while measuring (xentrace, `perf sched record`), then looked
//! at offline: a Perfetto timeline, a per-path latency summary, a picture,
//! or a replay through the simulator on another topology or policy.
//!
//! Recording lives with the engine (`vcpu_engine::trace`: the events and
//! their fixed 32-byte record, the per-thread rings, the tracer and its
//! drain thread, the file's frames and metadata); this module reads it:
//! - [`read`]: reading a trace file back (untrusted input: capped,
//!   checked, never a panic);
//! - [`summary`] (per-path latency breakdown), [`export`] (Perfetto JSON),
//!   [`plot`] (the timeline as PNG/SVG), [`describe`] (events in words):
//!   `pacer trace` (`commands::trace`).
//!
//! Where the engine records each event: `vcpu_engine/src/trace_points.rs`.

pub mod describe;
pub mod export;
pub mod plot;
pub mod read;
pub mod replay;
pub mod summary;

pub use read::{Timed, TraceFile};
