//! The guest side of the UnixBench-style suite (`guests/linux/suite`,
//! binary `ubench`) as the VMM reads it: the twelve tests
//! ([`catalog`]) and the `UB ...` lines out of a console log ([`parse`],
//! garbage-tolerant), which cut a user command's output out of a VM's
//! console (`vm::logs`).
//!
//! Scoring, the tables and the host's reference run are the `pacer`
//! tool's (`pacer::unixbench`).

pub mod catalog;
pub mod parse;

pub use parse::{parse_log, Log, Run};
