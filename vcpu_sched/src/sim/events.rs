//! The simulator's event queue: a binary heap ordered by (time, sequence
//! number), so events at the same instant come out in the order they were
//! pushed and a seed fixes the run. Timer and sleep events carry the
//! generation of what armed them; a newer arming makes them stale, and the
//! engine drops stale ones when they come out.

use crate::Nanos;
use std::cmp::Ordering;
use std::collections::BinaryHeap;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum EvKind {
    /// Quantum timer or burst-phase end of a CPU (stale unless `gen` matches).
    CpuTimer,
    /// A kick (IPI) arrives at a CPU.
    Kick,
    /// An entity's sleep ends (stale unless `gen` matches).
    SleepEnd,
    /// The workload's change number `idx` is made.
    Change,
    /// The spin watch looks at vCPU `idx` (stale unless `gen` matches).
    Look,
    /// A request arrives at server `idx`.
    Arrival,
    /// The `ranked` agent's look (`ranked.rs`).
    AgentLook,
    /// The host kernel's tick, which takes turns between the threads
    /// sharing a CPU (`sibling_share.rs`).
    KernelTick,
    /// A sharing vCPU `idx`'s turn timer (`sibling_share.rs`; stale unless
    /// `gen` matches).
    TurnLook,
}

/// One event: `idx` is a CPU (timer, kick), a vCPU (sleep end, look), a
/// change or a server (arrival).
#[derive(Debug, Clone, Copy)]
pub(super) struct Ev {
    pub time: Nanos,
    seq: u64,
    pub kind: EvKind,
    pub idx: u32,
    pub gen: u32,
}

impl PartialEq for Ev {
    fn eq(&self, o: &Self) -> bool {
        self.time == o.time && self.seq == o.seq
    }
}
impl Eq for Ev {}
impl PartialOrd for Ev {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Ev {
    // Reversed: BinaryHeap is a max-heap, the earliest event must come first.
    fn cmp(&self, o: &Self) -> Ordering {
        (o.time, o.seq).cmp(&(self.time, self.seq))
    }
}

/// Pending events, earliest first.
pub(super) struct EventQueue {
    heap: BinaryHeap<Ev>,
    seq: u64,
}

impl EventQueue {
    pub fn with_capacity(n: usize) -> EventQueue {
        EventQueue {
            heap: BinaryHeap::with_capacity(n),
            seq: 0,
        }
    }

    pub fn push(&mut self, time: Nanos, kind: EvKind, idx: u32, gen: u32) {
        self.seq += 1;
        self.heap.push(Ev {
            time,
            seq: self.seq,
            kind,
            idx,
            gen,
        });
    }

    pub fn pop(&mut self) -> Option<Ev> {
        self.heap.pop()
    }
}
