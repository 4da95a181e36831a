//! Observability: per-entity and per-CPU counters and latency histograms,
//! read as a serialisable snapshot.
//!
//! [`LatencyHistogram`] is the fixed-size, allocation-free recorder the
//! policies keep per entity (there can be 65536 of them, so it stays at about
//! 2 KiB); [`SchedSnapshot`] carries its [`LatencySummary`] and offers
//! fairness, table and JSON helpers.

use crate::{CoreId, CpuId, CpuSet, Distance, EntityId, Nanos, SchedClass, VmId};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Summary of a latency histogram (nanoseconds).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LatencySummary {
    /// Number of recorded samples.
    pub count: u64,
    /// Median, within one sub-bucket (1/8 of a power of two) of the true value.
    pub p50: Nanos,
    /// 99th percentile, same precision as `p50`.
    pub p99: Nanos,
    /// 99.9th percentile, same precision (the tail beyond p99).
    #[serde(default)]
    pub p999: Nanos,
    /// Exact maximum.
    pub max: Nanos,
    /// Exact mean (rounded down).
    pub mean: Nanos,
}

/// Linear sub-buckets per power of two (as a bit count: 2^3 = 8).
const SUB_BITS: u32 = 3;
/// Linear sub-buckets per power of two.
const SUB_BUCKETS: usize = 1 << SUB_BITS;
/// Values below this are recorded exactly (one bucket each).
const EXACT_LIMIT: u64 = SUB_BUCKETS as u64;
/// Bucket count: the exact group plus one group of `SUB_BUCKETS` per power
/// of two from 2^SUB_BITS to 2^63.
const BUCKETS: usize = SUB_BUCKETS * (64 - SUB_BITS as usize + 1);

/// A log-linear latency histogram of fixed size (496 `u32` buckets, about
/// 2 KiB, no allocation).
///
/// Values below 8 ns are exact; above, every power of two is split into 8
/// linear sub-buckets, so a reported percentile is within 1/16 of the true
/// value (half a sub-bucket, relative to the bucket's lower bound). Count,
/// sum (mean) and maximum are kept exactly.
///
/// When a bucket would overflow `u32`, all buckets are halved (rounding
/// non-zero buckets up), which keeps the percentile shape while `count`,
/// `mean` and `max` stay exact.
#[derive(Clone, PartialEq, Eq)]
pub struct LatencyHistogram {
    buckets: [u32; BUCKETS],
    count: u64,
    sum: u64,
    max: Nanos,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for LatencyHistogram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LatencyHistogram")
            .field("summary", &self.summary())
            .finish()
    }
}

impl LatencyHistogram {
    /// An empty histogram.
    pub const fn new() -> Self {
        LatencyHistogram {
            buckets: [0; BUCKETS],
            count: 0,
            sum: 0,
            max: 0,
        }
    }

    /// Bucket index of a value.
    fn index(ns: Nanos) -> usize {
        if ns < EXACT_LIMIT {
            return ns as usize;
        }
        let msb = 63 - ns.leading_zeros(); // >= SUB_BITS
        let sub = (ns >> (msb - SUB_BITS)) as usize & (SUB_BUCKETS - 1);
        (msb - SUB_BITS + 1) as usize * SUB_BUCKETS + sub
    }

    /// Smallest value and width of bucket `i`.
    fn bucket_range(i: usize) -> (Nanos, Nanos) {
        if i < SUB_BUCKETS {
            return (i as Nanos, 1);
        }
        let group = (i / SUB_BUCKETS) as u32; // msb - SUB_BITS + 1
        let sub = (i % SUB_BUCKETS) as u64;
        let shift = group - 1; // msb - SUB_BITS
        ((EXACT_LIMIT + sub) << shift, 1 << shift)
    }

    /// Halve every bucket (non-zero buckets stay non-zero).
    fn decimate(&mut self) {
        for b in &mut self.buckets {
            *b = b.div_ceil(2);
        }
    }

    /// Record one sample. Constant time, no allocation.
    pub fn record(&mut self, ns: Nanos) {
        let i = Self::index(ns);
        if self.buckets[i] == u32::MAX {
            self.decimate();
        }
        self.buckets[i] += 1;
        self.count += 1;
        self.sum = self.sum.saturating_add(ns);
        self.max = self.max.max(ns);
    }

    /// Add every sample of `other` to this histogram.
    pub fn merge(&mut self, other: &Self) {
        if other.count == 0 {
            return;
        }
        let mut wide = [0u64; BUCKETS];
        let mut top = 0u64;
        for (w, (a, b)) in wide.iter_mut().zip(self.buckets.iter().zip(&other.buckets)) {
            *w = u64::from(*a) + u64::from(*b);
            top = top.max(*w);
        }
        let mut shift = 0;
        while top >> shift > u64::from(u32::MAX) {
            shift += 1;
        }
        for (dst, w) in self.buckets.iter_mut().zip(wide) {
            // Non-zero buckets stay non-zero, as in `decimate`.
            *dst = if shift == 0 {
                w as u32
            } else {
                w.div_ceil(1 << shift) as u32
            };
        }
        self.count += other.count;
        self.sum = self.sum.saturating_add(other.sum);
        self.max = self.max.max(other.max);
    }

    /// Number of recorded samples.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Exact maximum (0 when empty).
    pub fn max(&self) -> Nanos {
        self.max
    }

    /// Exact mean, rounded down (0 when empty).
    pub fn mean(&self) -> Nanos {
        self.sum.checked_div(self.count).unwrap_or(0)
    }

    /// The `q`-quantile (`q` in 0..=1, clamped): the value of rank
    /// `ceil(q * count)` in sorted order, reported as the middle of its
    /// sub-bucket (never above the exact maximum). 0 when empty.
    pub fn percentile(&self, q: f64) -> Nanos {
        let total: u64 = self.buckets.iter().map(|b| u64::from(*b)).sum();
        if total == 0 {
            return 0;
        }
        let q = if q.is_nan() { 0.5 } else { q.clamp(0.0, 1.0) };
        let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0u64;
        for (i, b) in self.buckets.iter().enumerate() {
            seen += u64::from(*b);
            if seen >= rank {
                let (lo, width) = Self::bucket_range(i);
                return (lo + (width - 1) / 2).min(self.max);
            }
        }
        self.max
    }

    /// Count, p50, p99, p99.9, max and mean.
    pub fn summary(&self) -> LatencySummary {
        LatencySummary {
            count: self.count,
            p50: self.percentile(0.50),
            p99: self.percentile(0.99),
            p999: self.percentile(0.999),
            max: self.max,
            mean: self.mean(),
        }
    }
}

/// Migrations counted by the distance between the previous and the new CPU.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigrationCounts {
    /// Dispatched again on the CPU it last ran on (not a migration proper).
    pub same_cpu: u64,
    /// Moved to an SMT sibling of its last CPU.
    pub smt_sibling: u64,
    /// Moved to another core sharing the last-level cache.
    pub same_llc: u64,
    /// Moved to another LLC of the same package.
    pub same_package: u64,
    /// Moved to another package.
    pub remote: u64,
}

impl MigrationCounts {
    /// Count one dispatch at distance `d` from the entity's previous CPU.
    pub fn record(&mut self, d: Distance) {
        let slot = match d {
            Distance::SameCpu => &mut self.same_cpu,
            Distance::SmtSibling => &mut self.smt_sibling,
            Distance::SameLlc => &mut self.same_llc,
            Distance::SamePackage => &mut self.same_package,
            Distance::Remote => &mut self.remote,
        };
        *slot += 1;
    }

    /// Migrations proper: every move to a different CPU (all fields except
    /// `same_cpu`).
    pub fn total(&self) -> u64 {
        self.smt_sibling + self.same_llc + self.same_package + self.remote
    }

    /// Add the counts of `other`.
    pub fn merge(&mut self, other: &MigrationCounts) {
        self.same_cpu += other.same_cpu;
        self.smt_sibling += other.smt_sibling;
        self.same_llc += other.same_llc;
        self.same_package += other.same_package;
        self.remote += other.remote;
    }
}

/// Counters of one entity (vCPU).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EntityStats {
    /// The entity.
    pub id: EntityId,
    /// Its VM.
    pub vm: VmId,
    /// Its base priority at snapshot time.
    pub base_priority: u8,
    /// Time spent running.
    pub run_time: Nanos,
    /// Time spent runnable but waiting in a queue (steal time).
    pub ready_wait: Nanos,
    /// Wake event -> running again.
    pub wake_latency: LatencySummary,
    /// Dispatches by distance from the previous CPU.
    pub migrations: MigrationCounts,
    /// Times it was taken off a CPU while still runnable, before its quantum ended.
    pub preemptions: u64,
    /// Times its quantum ended.
    pub quantum_ends: u64,
    /// Times it blocked.
    pub blocks: u64,
    /// Times a wake made it runnable.
    pub wakes: u64,
    /// The load estimate ("load if it ran alone"), 0..=1000.
    pub load: u32,
    /// Wakes below its entitled share, boosted (haiku's fair-share wake
    /// boost; 0 elsewhere).
    #[serde(default)]
    pub boosted_wakes: u64,
    /// Its recent share of a CPU (decayed run time over wall time),
    /// 0..=1000 (haiku; 0 elsewhere).
    #[serde(default)]
    pub recent_share: u32,
    /// Where it is now.
    #[serde(default)]
    pub state: EntityState,
    /// Its class now.
    #[serde(default)]
    pub class: SchedClass,
    /// Its effective priority now: the level it waits or runs at (under
    /// haiku the base priority less its penalty, cycling; the baselines
    /// have no penalties).
    #[serde(default)]
    pub effective_priority: u8,
    /// Its penalty now (haiku's timeshare class; 0 elsewhere).
    #[serde(default)]
    pub penalty: u8,
    /// The time slice of its current (or last) dispatch, and how much of
    /// it it has used (a slice is recomputed from the time used).
    #[serde(default)]
    pub quantum: Nanos,
    #[serde(default)]
    pub quantum_used: Nanos,
    /// Running: its CPU. Waiting: the CPU whose own queue holds it (none
    /// when it waits in a core's queue, or in global-rr's one queue).
    #[serde(default)]
    pub cpu: Option<CpuId>,
    /// Running or waiting: the core of its CPU, or whose queue holds it.
    #[serde(default)]
    pub core: Option<CoreId>,
    /// Its hard affinity now.
    #[serde(default)]
    pub affinity: CpuSet,
    /// Its operator weight (`crate::shares`; 100 by default and under
    /// the policies without weights).
    #[serde(default = "default_weight")]
    pub weight: u32,
    /// Its cap and reservation, per mille of one CPU (haiku only).
    #[serde(default)]
    pub cap: Option<u32>,
    #[serde(default)]
    pub reservation: u32,
    /// Times its cap throttled it, and the time it spent throttled.
    #[serde(default)]
    pub throttles: u64,
    #[serde(default)]
    pub throttled_time: Nanos,
    /// Its wake-to-run bound, ns, and the budget it holds for it, per
    /// mille of one CPU (`crate::bound`; haiku only).
    #[serde(default)]
    pub latency_bound: Option<Nanos>,
    #[serde(default)]
    pub bound_budget: u32,
    /// Wakes that came with bound budget, and those of them that reached
    /// a CPU later than the bound.
    #[serde(default)]
    pub bounded_wakes: u64,
    #[serde(default)]
    pub bound_misses: u64,
}

fn default_weight() -> u32 {
    crate::shares::DEFAULT_WEIGHT
}

/// Where an entity is at snapshot time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EntityState {
    /// Not runnable (halted).
    #[default]
    Blocked,
    /// Runnable, in a queue.
    Waiting,
    /// On a CPU.
    Running,
    /// Runnable, but its cap's budget is spent: in no queue until it is
    /// renewed (haiku's operator caps).
    Throttled,
}

impl EntityState {
    /// `blocked`, `waiting` or `running`.
    pub fn as_str(self) -> &'static str {
        match self {
            EntityState::Blocked => "blocked",
            EntityState::Waiting => "waiting",
            EntityState::Running => "running",
            EntityState::Throttled => "throttled",
        }
    }
}

/// One core at snapshot time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CoreStats {
    /// The core.
    pub core: CoreId,
    /// Entities waiting for it: in its queue and its CPUs' own queues
    /// (global-rr, with one queue: waiting entities allowed on the core).
    pub ready: u32,
    /// Its CPUs running an entity.
    pub running: u32,
    /// Its load (0..=1000 per CPU).
    pub load: u32,
}

/// Counters of one logical CPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CpuStats {
    /// The CPU.
    pub cpu: CpuId,
    /// Time spent running entities.
    pub busy_time: Nanos,
    /// Time spent idle.
    pub idle_time: Nanos,
    /// `schedule` calls that returned an entity.
    pub dispatches: u64,
    /// Dispatches of a different entity than the one that ran before.
    pub context_switches: u64,
    /// Time this CPU ran a vCPU while an SMT sibling ran a vCPU of another VM.
    pub smt_corun_foreign: Nanos,
    /// Times this CPU went idle while an entity allowed on it was waiting.
    pub idle_while_waiting: u64,
    /// Core load (0..=1000 per CPU of the core) at snapshot time.
    pub core_load: u32,
    /// In service (see `VcpuScheduler::set_cpu_enabled`).
    #[serde(default = "in_service_default")]
    pub in_service: bool,
    /// The entity it runs, and the priority it runs at.
    #[serde(default)]
    pub running: Option<EntityId>,
    #[serde(default)]
    pub running_priority: Option<u8>,
    /// Times a wake that queued behind this CPU's runner cut the runner's
    /// quantum short (haiku; see [`crate::WakeDecision::shorten_quantum`]).
    #[serde(default)]
    pub quantum_cuts: u64,
    /// Relaxed co-scheduling (haiku; 0 under other policies): dispatches
    /// here that co-stopped a sibling too far ahead of a parked one, or
    /// that handed a sibling turn to a parked one (`tunables.sibling_turn`)...
    #[serde(default)]
    pub costops: u64,
    /// ... dispatches here that kicked another CPU to co-start a parked
    /// sibling next to the one dispatched ...
    #[serde(default)]
    pub costarts: u64,
    /// ... and directed yields taken here: a yielding vCPU's CPU given to
    /// its parked sibling (the guest's yield, or `yield_to` from an IPI).
    #[serde(default)]
    pub directed_yields: u64,
    /// Sibling gathering (haiku under `ranked`; 0 elsewhere): swaps
    /// decided at a quantum end here that moved a wide VM's vCPU to the
    /// core holding more of its siblings and another VM's entry back.
    #[serde(default)]
    pub gathers: u64,
}

fn in_service_default() -> bool {
    true
}

/// Everything observable at one instant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SchedSnapshot {
    /// The time of the snapshot.
    pub now: Nanos,
    /// The policy name (see [`crate::VcpuScheduler::name`]).
    pub policy: String,
    /// The mode it runs in at the time of the snapshot.
    #[serde(default)]
    pub mode: crate::Mode,
    /// One row per entity, by id.
    pub entities: Vec<EntityStats>,
    /// One row per CPU, by id.
    pub cpus: Vec<CpuStats>,
    /// One row per core, by id.
    #[serde(default)]
    pub cores: Vec<CoreStats>,
}

/// Jain's fairness index of a sample: (sum x)^2 / (n * sum x^2), 1.0 for
/// perfectly equal shares, 1/n when one member gets everything. An empty or
/// all-zero sample counts as perfectly fair (1.0).
pub fn jain_index(values: impl IntoIterator<Item = f64>) -> f64 {
    let (mut n, mut sum, mut sq) = (0u64, 0.0f64, 0.0f64);
    for v in values {
        n += 1;
        sum += v;
        sq += v * v;
    }
    if n == 0 || sq == 0.0 {
        return 1.0;
    }
    (sum * sum) / (n as f64 * sq)
}

fn ms(ns: Nanos) -> f64 {
    ns as f64 / 1e6
}

fn us(ns: Nanos) -> f64 {
    ns as f64 / 1e3
}

impl SchedSnapshot {
    /// Jain's fairness index ([`jain_index`]) of the run time of the
    /// entities accepted by `filter` (e.g. one VM, or one priority).
    pub fn jain_fairness(&self, filter: impl Fn(&EntityStats) -> bool) -> f64 {
        jain_index(
            self.entities
                .iter()
                .filter(|e| filter(e))
                .map(|e| e.run_time as f64),
        )
    }

    /// Sum over CPUs of [`CpuStats::idle_while_waiting`] (0 is the goal: a
    /// runnable vCPU never waits while a CPU it may run on is idle).
    pub fn total_idle_while_waiting(&self) -> u64 {
        self.cpus.iter().map(|c| c.idle_while_waiting).sum()
    }

    /// A readable metrics table: one row per entity (where it is, its
    /// effective priority and penalty, the time used of its quantum, run
    /// and wait ms, wake latency p50/p99/max in us, migrations by distance,
    /// preemptions), one row per CPU (what it runs, busy/idle ms,
    /// dispatches, context switches, idle while waiting), the ready count
    /// per core and a footer with the fairness index of all entities.
    pub fn to_table(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let _ = writeln!(out, "policy {} at {:.3} ms", self.policy, ms(self.now));
        let _ = writeln!(
            out,
            "{:>6} {:>4} {:>4} {:>7} {:>4} {:>4} {:>3} {:>9} {:>10} {:>10} {:>9} {:>9} {:>9} {:>7} {:>23} {:>7} {:>7} {:>7} {:>5}",
            "entity",
            "vm",
            "prio",
            "state",
            "cpu",
            "E",
            "pen",
            "q used/us",
            "run ms",
            "wait ms",
            "wake p50",
            "p99 us",
            "max us",
            "wakes",
            "mig cpu/smt/llc/pkg/rem",
            "preempt",
            "q ends",
            "blocks",
            "load"
        );
        for e in &self.entities {
            let m = &e.migrations;
            let mig = format!(
                "{}/{}/{}/{}/{}",
                m.same_cpu, m.smt_sibling, m.same_llc, m.same_package, m.remote
            );
            let _ = writeln!(
                out,
                "{:>6} {:>4} {:>4} {:>7} {:>4} {:>4} {:>3} {:>9} {:>10.3} {:>10.3} {:>9.1} {:>9.1} {:>9.1} {:>7} {:>23} {:>7} {:>7} {:>7} {:>5}",
                e.id.to_string(),
                e.vm.0,
                e.base_priority,
                e.state.as_str(),
                e.cpu.map_or("-".to_string(), |c| c.0.to_string()),
                e.effective_priority,
                e.penalty,
                format!("{:.0}/{:.0}", us(e.quantum_used), us(e.quantum)),
                ms(e.run_time),
                ms(e.ready_wait),
                us(e.wake_latency.p50),
                us(e.wake_latency.p99),
                us(e.wake_latency.max),
                e.wakes,
                mig,
                e.preemptions,
                e.quantum_ends,
                e.blocks,
                e.load
            );
        }
        let _ = writeln!(
            out,
            "{:>6} {:>8} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>5}",
            "cpu",
            "runs",
            "busy ms",
            "idle ms",
            "dispatch",
            "ctx sw",
            "smt foreign",
            "idle+wait",
            "load"
        );
        for c in &self.cpus {
            let runs = match (c.in_service, c.running) {
                (false, _) => "out".to_string(),
                (true, Some(e)) => e.to_string(),
                (true, None) => "-".to_string(),
            };
            let _ = writeln!(
                out,
                "{:>6} {:>8} {:>10.3} {:>10.3} {:>10} {:>10} {:>10.3} {:>10} {:>5}",
                c.cpu.0,
                runs,
                ms(c.busy_time),
                ms(c.idle_time),
                c.dispatches,
                c.context_switches,
                ms(c.smt_corun_foreign),
                c.idle_while_waiting,
                c.core_load
            );
        }
        if !self.cores.is_empty() {
            let ready: Vec<String> = self.cores.iter().map(|c| c.ready.to_string()).collect();
            let _ = writeln!(out, "ready per core: {}", ready.join(" "));
        }
        let _ = writeln!(
            out,
            "fairness (Jain, run time, all entities) {:.4}; idle while waiting {}",
            self.jain_fairness(|_| true),
            self.total_idle_while_waiting()
        );
        out
    }

    /// The snapshot as pretty-printed JSON.
    pub fn to_json(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string_pretty(self)
    }

    /// Parse a snapshot written by [`SchedSnapshot::to_json`].
    pub fn from_json(text: &str) -> Result<SchedSnapshot, serde_json::Error> {
        serde_json::from_str(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Rank `ceil(q * n)` of a sorted sample (the definition the histogram follows).
    fn reference(sorted: &[u64], q: f64) -> u64 {
        let n = sorted.len() as u64;
        let rank = ((q * n as f64).ceil() as u64).clamp(1, n);
        sorted[(rank - 1) as usize]
    }

    /// The histogram's answer may differ by half a sub-bucket: 1/16 of the value.
    fn close(est: u64, exact: u64) -> bool {
        est.abs_diff(exact) <= exact / 16 + 1
    }

    #[test]
    fn histogram_is_small() {
        assert!(std::mem::size_of::<LatencyHistogram>() <= 4096);
    }

    #[test]
    fn bucket_ranges_cover_values() {
        for v in (0..5000u64).chain([u64::MAX, u64::MAX / 3, 1 << 40, (1 << 40) - 1]) {
            let i = LatencyHistogram::index(v);
            assert!(i < BUCKETS);
            let (lo, w) = LatencyHistogram::bucket_range(i);
            assert!(lo <= v && v - lo < w, "v={v} i={i} lo={lo} w={w}");
        }
    }

    #[test]
    fn empty_and_small_values_are_exact() {
        let h = LatencyHistogram::new();
        assert_eq!(h.summary(), LatencySummary::default());
        let mut h = LatencyHistogram::new();
        for v in [1, 2, 3, 4, 5, 6, 7] {
            h.record(v);
        }
        let s = h.summary();
        assert_eq!((s.count, s.p50, s.p99, s.max, s.mean), (7, 4, 7, 7, 4));
    }

    #[test]
    fn merge_equals_recording_everything() {
        let (mut a, mut b, mut all) = (
            LatencyHistogram::new(),
            LatencyHistogram::new(),
            LatencyHistogram::new(),
        );
        for v in 0..1000u64 {
            let x = v * v * 37 % 1_000_003;
            if v % 3 == 0 {
                a.record(x)
            } else {
                b.record(x)
            }
            all.record(x);
        }
        a.merge(&b);
        assert_eq!(a, all);
        assert_eq!(a.count(), 1000);
        let mut e = LatencyHistogram::new();
        e.merge(&LatencyHistogram::new());
        assert_eq!(e.count(), 0);
    }

    #[test]
    fn saturated_bucket_keeps_shape() {
        let mut h = LatencyHistogram::new();
        h.buckets[LatencyHistogram::index(1000)] = u32::MAX;
        h.buckets[LatencyHistogram::index(100)] = u32::MAX / 2;
        h.count = u64::from(u32::MAX) + u64::from(u32::MAX / 2);
        h.max = 1000;
        h.record(1000);
        assert_eq!(h.count(), u64::from(u32::MAX) + u64::from(u32::MAX / 2) + 1);
        assert!(close(h.percentile(0.5), 1000));
        assert!(close(h.percentile(0.2), 100));
        let copy = h.clone();
        h.merge(&copy);
        assert!(close(h.percentile(0.5), 1000));
        assert!(close(h.percentile(0.2), 100));
    }

    proptest! {
        #[test]
        fn percentiles_match_sorted_reference(
            mut values in prop::collection::vec(
                prop_oneof![0u64..100, 0u64..100_000, 0u64..10_000_000_000, any::<u64>()],
                1..400,
            ),
            q in 0.0f64..=1.0,
        ) {
            let mut h = LatencyHistogram::new();
            for v in &values {
                h.record(*v);
            }
            values.sort_unstable();
            let s = h.summary();
            prop_assert_eq!(s.count, values.len() as u64);
            prop_assert_eq!(s.max, *values.last().unwrap());
            let sum: u128 = values.iter().map(|v| u128::from(*v)).sum();
            let exact_mean = (sum / values.len() as u128).min(u128::from(u64::MAX)) as u64;
            if sum <= u128::from(u64::MAX) {
                prop_assert_eq!(s.mean, exact_mean);
            }
            for q in [q, 0.5, 0.99] {
                let exact = reference(&values, q);
                let est = h.percentile(q);
                prop_assert!(close(est, exact), "q={} est={} exact={}", q, est, exact);
            }
            // The summary's tail beyond p99 is the same estimate.
            let exact = reference(&values, 0.999);
            prop_assert!(close(s.p999, exact), "p999 est={} exact={}", s.p999, exact);
        }
    }

    #[test]
    fn migration_counts_record_and_total() {
        let mut m = MigrationCounts::default();
        for d in [
            Distance::SameCpu,
            Distance::SameCpu,
            Distance::SmtSibling,
            Distance::SameLlc,
            Distance::SamePackage,
            Distance::Remote,
            Distance::Remote,
        ] {
            m.record(d);
        }
        assert_eq!(
            (
                m.same_cpu,
                m.smt_sibling,
                m.same_llc,
                m.same_package,
                m.remote
            ),
            (2, 1, 1, 1, 2)
        );
        assert_eq!(m.total(), 5);
        let copy = m;
        m.merge(&copy);
        assert_eq!(m.total(), 10);
    }

    fn entity(id: u32, vm: u32, run_ms: u64) -> EntityStats {
        let mut h = LatencyHistogram::new();
        h.record(5_000);
        h.record(20_000);
        EntityStats {
            id: EntityId::new(id, 0),
            vm: VmId(vm),
            base_priority: 10,
            run_time: run_ms * 1_000_000,
            ready_wait: 1_500_000,
            wake_latency: h.summary(),
            migrations: MigrationCounts {
                same_cpu: 3,
                remote: 1,
                ..Default::default()
            },
            preemptions: 2,
            quantum_ends: 4,
            blocks: 5,
            wakes: 6,
            load: 500,
            boosted_wakes: 0,
            recent_share: 0,
            state: EntityState::Running,
            class: SchedClass::Timeshare,
            effective_priority: 8,
            penalty: 2,
            quantum: 2_000_000,
            quantum_used: 500_000,
            cpu: Some(CpuId(id % 2)),
            core: Some(CoreId(0)),
            affinity: CpuSet::first_n(2),
            weight: crate::shares::DEFAULT_WEIGHT,
            cap: None,
            reservation: 0,
            throttles: 0,
            throttled_time: 0,
            latency_bound: None,
            bound_budget: 0,
            bounded_wakes: 0,
            bound_misses: 0,
        }
    }

    fn snapshot(runs: &[u64]) -> SchedSnapshot {
        SchedSnapshot {
            mode: crate::Mode::LowLatency,
            now: 10_000_000,
            policy: "test".into(),
            entities: runs
                .iter()
                .enumerate()
                .map(|(i, r)| entity(i as u32, i as u32 % 2, *r))
                .collect(),
            cpus: (0..2)
                .map(|c| CpuStats {
                    cpu: CpuId(c),
                    busy_time: 7_000_000,
                    idle_time: 3_000_000,
                    dispatches: 10,
                    context_switches: 8,
                    smt_corun_foreign: 0,
                    idle_while_waiting: c as u64 + 1,
                    core_load: 700,
                    in_service: true,
                    running: Some(EntityId::new(c, 0)),
                    running_priority: Some(8),
                    quantum_cuts: 0,
                    costops: 0,
                    costarts: 0,
                    directed_yields: 0,
                    gathers: 0,
                })
                .collect(),
            cores: vec![CoreStats {
                core: CoreId(0),
                ready: 3,
                running: 2,
                load: 700,
            }],
        }
    }

    #[test]
    fn fairness_index_values() {
        assert!((snapshot(&[5, 5, 5, 5]).jain_fairness(|_| true) - 1.0).abs() < 1e-12);
        assert!((snapshot(&[9, 0, 0, 0]).jain_fairness(|_| true) - 0.25).abs() < 1e-12);
        assert!((snapshot(&[1, 3]).jain_fairness(|_| true) - 0.8).abs() < 1e-12);
        // Filter by VM: VM 0 holds entities 0 and 2.
        assert!((snapshot(&[4, 100, 4, 1]).jain_fairness(|e| e.vm == VmId(0)) - 1.0).abs() < 1e-12);
        assert_eq!(snapshot(&[]).jain_fairness(|_| true), 1.0);
        assert_eq!(snapshot(&[0, 0]).jain_fairness(|_| true), 1.0);
    }

    #[test]
    fn table_and_totals() {
        let s = snapshot(&[5, 7]);
        assert_eq!(s.total_idle_while_waiting(), 3);
        let t = s.to_table();
        assert!(t.starts_with("policy test at 10.000 ms"));
        assert!(t.contains("3/0/0/0/1"), "{t}");
        assert!(t.contains("7.000"), "{t}");
        assert!(t.contains("fairness"), "{t}");
        // Where each entity is, and what each CPU runs.
        assert!(t.contains("running"), "{t}");
        assert!(t.contains("500/2000"), "{t}");
        assert!(t.contains("ready per core: 3"), "{t}");
        assert_eq!(t.lines().count(), 1 + 1 + 2 + 1 + 2 + 1 + 1);
    }

    #[test]
    fn json_round_trip() {
        let s = snapshot(&[5, 7, 0]);
        let json = s.to_json().unwrap();
        assert_eq!(SchedSnapshot::from_json(&json).unwrap(), s);
        let compact = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<SchedSnapshot>(&compact).unwrap(), s);
    }
}
