//! Recording scheduling traces: what the engine and the interrupt
//! controller did, when, on which host CPU, for which vCPU, cheaply enough
//! to leave on while measuring.
//!
//! - [`record`]: the events and their fixed 32-byte record;
//! - `ring`: the per-thread lock-free buffer the hot path writes (internal);
//! - [`tracer`]: the recording handle and the drain thread that writes the
//!   file;
//! - [`format`](mod@format): the file's frames and metadata, for a reader.
//!
//! A VMM records a trace by starting a [`Tracer`] and handing its
//! [`Trace`] to [`crate::EngineConfig::trace`]. Reading a trace back (and
//! summaries, plots, replays) is the VMM's business (Pacer's
//! `vmm::trace`). Where the engine records each event: `trace_points.rs`.

pub mod format;
pub mod record;
pub(crate) mod ring;
pub mod tracer;

pub use record::{Cause, Event, StopWhy, VcpuRef};
pub use tracer::{Trace, TraceConfig, TraceOutcome, TraceTotals, Tracer};
