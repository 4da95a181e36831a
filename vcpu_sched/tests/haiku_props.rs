//! Property tests of the Haiku policy over random event sequences on random
//! topologies, driven through the public API like a VMM would.
//!
//! After every event (and after the kicks it caused were delivered, i.e.
//! after the kicked CPUs called `schedule`) we check:
//! - the scheduler's structural invariants (`check_invariants`: every
//!   runnable entity is in exactly one queue or running on exactly one CPU,
//!   nothing queued or running outside its affinity, SMT isolation);
//! - the driver's view agrees: an entity runs on at most one CPU, only
//!   runnable entities run, never outside the affinity;
//! - no allowed CPU is idle while an entity waits. The bound on that window
//!   is "until the kicked CPUs have rescheduled": wake decisions and
//!   `Dispatch::kicks` name every CPU that must look again, and the check runs
//!   once they have. With SMT isolation a CPU may idle while only entities
//!   of another VM than the one its siblings run wait (force idle), so
//!   the check is skipped there and replaced by "siblings never co-run
//!   different VMs".
//!
//! Starvation bound (checked in a final phase with only quantum ends, no
//! wakes, blocks or priority changes, timeshare entities only, no SMT
//! isolation). Let W wait at level L (its E when queued). Another entity X
//! can be picked before W only when it was queued at a level above L, or at
//! L ahead of W. Each quantum end of a non-bursty X moves its E: before its
//! penalty saturates (at most P_X - minimal_X quantum ends) E may take any
//! value, after it E walks down minimal_X, ..., 1 and wraps, so within at
//! most P_X penalised quantum ends X is requeued below L, or at L behind W
//! (FIFO; ties between a CPU's pinned queue and its core queue go to the
//! older entry). From then on X cannot pass W: a queued entity's level
//! never changes. A bursty X (load estimate <= 375) is not penalised, but
//! in this phase X only runs, so its first load update (after at most
//! load_measure_interval of running, i.e. at most 2 * interval /
//! minimal_quantum = 20 quantum ends, since a slice is never shorter than
//! minimal_quantum / 2) lifts its load to >= 500 and it stops being bursty.
//! Preemption keeps the time used, so each pass costs at most one maximal
//! quantum (base_quantum * m1, the E = 0 quantum); one more quantum covers
//! what ran when W was queued:
//!   wait(W) <= (sum_{X != W} (P_X + 20) + 1) * base_quantum * m1.

use proptest::prelude::*;
use vcpu_sched::policy::haiku::HaikuScheduler;
use vcpu_sched::{
    CpuId, CpuSet, EntityId, EntitySpec, Mode, Nanos, SchedClass, SchedConfig, SchedError,
    StopReason, Topology, VcpuScheduler, VmId,
};

const US: Nanos = 1_000;

#[derive(Debug, Clone)]
struct EntityDef {
    vm: u32,
    prio: u8,
    /// 0: all CPUs, 1: one CPU, 2: a random subset.
    aff_kind: u8,
    aff_seed: u64,
}

#[derive(Debug, Clone)]
enum Op {
    Wake(usize),
    Stop(usize, u8),
    Advance(u64),
    SetPrio(usize, u8),
    /// New affinity for an entity (kind and seed as in `EntityDef`).
    SetAffinity(usize, u8, u64),
    /// A CPU out of service (`false`) or back (`true`).
    SetCpu(usize, bool),
    SetMode(bool),
    /// Realtime (priority 100 + the byte % 21) or back to timeshare.
    SetClass(usize, Option<u8>),
}

fn entity_def() -> impl Strategy<Value = EntityDef> {
    (0u32..3, 1u8..=15, 0u8..3, any::<u64>()).prop_map(|(vm, prio, aff_kind, aff_seed)| EntityDef {
        vm,
        prio,
        aff_kind,
        aff_seed,
    })
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0usize..16).prop_map(Op::Wake),
        4 => (0usize..16, 0u8..4).prop_map(|(c, r)| Op::Stop(c, r)),
        2 => (1u64..3000).prop_map(Op::Advance),
        1 => (0usize..16, 1u8..=15).prop_map(|(i, p)| Op::SetPrio(i, p)),
        1 => (0usize..16, 0u8..3, any::<u64>()).prop_map(|(i, k, s)| Op::SetAffinity(i, k, s)),
        1 => (0usize..16, any::<bool>()).prop_map(|(c, on)| Op::SetCpu(c, on)),
        1 => any::<bool>().prop_map(Op::SetMode),
        1 => (0usize..16, prop::option::of(0u8..21)).prop_map(|(i, rt)| Op::SetClass(i, rt)),
    ]
}

fn affinity(def: &EntityDef, ncpus: u32) -> CpuSet {
    match def.aff_kind {
        0 => CpuSet::first_n(ncpus),
        1 => CpuSet::single(CpuId((def.aff_seed % ncpus as u64) as u32)).unwrap(),
        _ => {
            let set: CpuSet = (0..ncpus)
                .filter(|c| def.aff_seed >> (c % 64) & 1 == 1)
                .map(CpuId)
                .collect::<Result<_, _>>()
                .unwrap();
            if set.is_empty() {
                CpuSet::first_n(ncpus)
            } else {
                set
            }
        }
    }
}

struct Driver {
    s: HaikuScheduler,
    ids: Vec<EntityId>,
    affs: Vec<CpuSet>,
    vms: Vec<u32>,
    prios: Vec<u8>,
    runnable: Vec<bool>,
    wake_pending: Vec<bool>,
    run: Vec<Option<usize>>,
    slice_end: Vec<Nanos>,
    last_ran: Vec<Nanos>,
    now: Nanos,
    isolation: bool,
    /// Per CPU: in service.
    in_service: Vec<bool>,
    /// Per entity: in the realtime class (else timeshare).
    realtime: Vec<bool>,
    /// Longest wait observed per entity in the measured phase.
    max_gap: Vec<Nanos>,
    measuring: bool,
    trace: Vec<String>,
}

impl Driver {
    fn idx(&self, id: EntityId) -> usize {
        self.ids
            .iter()
            .position(|x| *x == id)
            .expect("known entity")
    }

    fn kick_reason(&self, cpu: usize) -> StopReason {
        if self.run[cpu].is_some() {
            StopReason::Preempted
        } else {
            StopReason::Idle
        }
    }

    /// `schedule` on a CPU, then deliver every kick it causes.
    fn sched(&mut self, cpu: usize, reason: StopReason) -> Result<(), TestCaseError> {
        let mut work = vec![(cpu, reason)];
        while let Some((c, r)) = work.pop() {
            if let (Some(e), StopReason::Blocked) = (self.run[c], r) {
                if self.wake_pending[e] {
                    self.wake_pending[e] = false;
                } else {
                    self.runnable[e] = false;
                }
            }
            if let Some(e) = self.run[c] {
                self.wake_pending[e] &= r != StopReason::Blocked;
                self.last_ran[e] = self.now;
            }
            let d = self
                .s
                .schedule(CpuId(c as u32), self.now, r)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            self.trace
                .push(format!("  sched cpu {c} {r:?} -> {d:?} kicks-next"));
            self.run[c] = d.entity.map(|id| self.idx(id));
            self.slice_end[c] = self.now + d.quantum;
            if let Some(e) = self.run[c] {
                prop_assert!(self.runnable[e], "dispatched a blocked entity {e}");
                prop_assert!(
                    self.affs[e].contains(CpuId(c as u32)),
                    "entity {e} on CPU {c} outside affinity"
                );
                prop_assert!(self.in_service[c], "entity {e} on CPU {c} out of service");
                prop_assert!(d.quantum > 0);
                self.note_ran(e);
            }
            let ks = d.kicks;
            self.trace.push(format!("    kicks {ks:?}"));
            for k in ks {
                work.push((k.0 as usize, self.kick_reason(k.0 as usize)));
            }
        }
        Ok(())
    }

    fn note_ran(&mut self, e: usize) {
        if self.measuring {
            let gap = self.now - self.last_ran[e];
            self.max_gap[e] = self.max_gap[e].max(gap);
        }
        self.last_ran[e] = self.now;
    }

    fn wake(&mut self, e: usize) -> Result<(), TestCaseError> {
        if self.runnable[e] && self.run.contains(&Some(e)) {
            self.wake_pending[e] = true;
        }
        if !self.runnable[e] {
            self.last_ran[e] = self.now;
        }
        self.runnable[e] = true;
        let d = self
            .s
            .wake(self.ids[e], self.now)
            .map_err(|x| TestCaseError::fail(x.to_string()))?;
        self.trace.push(format!("  wake {e} -> {d:?}"));
        if let Some(d) = d.filter(|d| d.kick) {
            let c = d.cpu.0 as usize;
            self.sched(c, self.kick_reason(c))?;
        }
        Ok(())
    }

    fn apply(&mut self, op: &Op) -> Result<(), TestCaseError> {
        self.trace.push(format!(
            "t={} op {:?} run {:?} runnable {:?}",
            self.now, op, self.run, self.runnable
        ));
        let n = self.ids.len();
        let ncpus = self.run.len();
        match *op {
            Op::Wake(i) => self.wake(i % n)?,
            Op::Stop(c, r) => {
                let c = c % ncpus;
                let reason = match (self.run[c], r) {
                    (None, _) => StopReason::Idle,
                    (Some(_), 0) => StopReason::QuantumEnd,
                    (Some(_), 1) => StopReason::Blocked,
                    (Some(_), 2) => StopReason::Yielded,
                    _ => StopReason::Preempted,
                };
                self.sched(c, reason)?;
            }
            Op::Advance(us) => self.advance_to(self.now + us * US)?,
            Op::SetPrio(i, p) => {
                let realtime = self.realtime[i % n];
                let prio = if realtime { 100 + p % 21 } else { p };
                let kicks = self
                    .s
                    .set_priority(self.ids[i % n], prio, self.now)
                    .map_err(|x| TestCaseError::fail(x.to_string()))?;
                if !realtime {
                    self.prios[i % n] = p;
                }
                self.deliver(kicks)?;
            }
            Op::SetAffinity(i, kind, seed) => {
                let def = EntityDef {
                    vm: 0,
                    prio: 1,
                    aff_kind: kind,
                    aff_seed: seed,
                };
                let aff = affinity(&def, ncpus as u32);
                let kicks = self
                    .s
                    .set_affinity(self.ids[i % n], aff.clone(), self.now)
                    .map_err(|x| TestCaseError::fail(x.to_string()))?;
                self.affs[i % n] = aff;
                self.deliver(kicks)?;
            }
            Op::SetCpu(c, on) => {
                let c = c % ncpus;
                match self.s.set_cpu_enabled(CpuId(c as u32), on, self.now) {
                    Ok(kicks) => {
                        self.in_service[c] = on;
                        self.deliver(kicks)?;
                    }
                    Err(SchedError::LastCpuInService(_)) => {
                        prop_assert_eq!(self.in_service.iter().filter(|x| **x).count(), 1);
                    }
                    Err(x) => return Err(TestCaseError::fail(x.to_string())),
                }
            }
            Op::SetMode(power_saving) => {
                let mode = if power_saving {
                    Mode::PowerSaving
                } else {
                    Mode::LowLatency
                };
                let kicks = self.s.set_mode(mode, self.now);
                prop_assert_eq!(self.s.mode(), mode);
                self.deliver(kicks)?;
            }
            Op::SetClass(i, rt) => {
                let (class, prio) = match rt {
                    Some(p) => (SchedClass::Realtime, 100 + p),
                    None => (SchedClass::Timeshare, self.prios[i % n]),
                };
                let kicks = self
                    .s
                    .set_class(self.ids[i % n], class, prio, self.now)
                    .map_err(|x| TestCaseError::fail(x.to_string()))?;
                self.realtime[i % n] = rt.is_some();
                self.deliver(kicks)?;
            }
        }
        self.check()
    }

    /// Make every CPU in `kicks` call `schedule`, as a VMM would.
    fn deliver(&mut self, kicks: Vec<CpuId>) -> Result<(), TestCaseError> {
        self.trace.push(format!("    change kicks {kicks:?}"));
        for k in kicks {
            let c = k.0 as usize;
            self.sched(c, self.kick_reason(c))?;
        }
        Ok(())
    }

    /// Fire quantum timers in time order up to `t`.
    fn advance_to(&mut self, t: Nanos) -> Result<(), TestCaseError> {
        loop {
            let next = (0..self.run.len())
                .filter(|c| self.run[*c].is_some())
                .min_by_key(|c| self.slice_end[*c]);
            match next {
                Some(c) if self.slice_end[c] <= t => {
                    self.now = self.now.max(self.slice_end[c]);
                    self.sched(c, StopReason::QuantumEnd)?;
                }
                _ => break,
            }
        }
        self.now = t;
        Ok(())
    }

    fn check(&self) -> Result<(), TestCaseError> {
        self.s
            .check_invariants()
            .map_err(|e| TestCaseError::fail(format!("{e}\n{}", self.trace.join("\n"))))?;
        let mut seen = vec![false; self.ids.len()];
        for e in self.run.iter().flatten() {
            prop_assert!(!seen[*e], "entity {e} runs on two CPUs");
            seen[*e] = true;
        }
        let waiting: Vec<usize> = (0..self.ids.len())
            .filter(|e| self.runnable[*e] && !seen[*e])
            .collect();
        if self.isolation {
            let topo = self.s.topology();
            for core in &topo.cores {
                let vms: std::collections::HashSet<u32> = core
                    .cpus
                    .iter()
                    .filter_map(|c| self.run[c.0 as usize])
                    .map(|e| self.vms[e])
                    .collect();
                prop_assert!(vms.len() <= 1, "core {:?} co-runs VMs {vms:?}", core.id);
            }
            return Ok(());
        }
        for (c, r) in self.run.iter().enumerate() {
            if r.is_none() && self.in_service[c] {
                let w: Vec<_> = waiting
                    .iter()
                    .filter(|e| self.affs[**e].contains(CpuId(c as u32)))
                    .collect();
                prop_assert!(
                    w.is_empty(),
                    "CPU {c} idle while allowed entities {w:?} wait (run {:?}) affs {:?}\n{}",
                    self.run,
                    self.affs,
                    self.trace.join("\n")
                );
            }
        }
        Ok(())
    }
}

fn build(spec: &str, defs: &[EntityDef], isolation: bool, mode: Mode) -> Driver {
    let topo = Topology::from_spec(spec).expect("valid spec");
    let ncpus = topo.num_cpus() as u32;
    let cfg = SchedConfig {
        smt_isolation: isolation,
        mode,
        max_entities: 64,
        ..SchedConfig::default()
    };
    let s = HaikuScheduler::new(topo, cfg).expect("scheduler");
    let affs: Vec<CpuSet> = defs.iter().map(|d| affinity(d, ncpus)).collect();
    let ids = defs
        .iter()
        .zip(&affs)
        .map(|(d, a)| {
            let spec = EntitySpec {
                vm: VmId(d.vm),
                class: SchedClass::Timeshare,
                priority: d.prio,
                affinity: a.clone(),
            };
            s.add_entity(spec, 0).expect("add")
        })
        .collect();
    let n = defs.len();
    Driver {
        s,
        ids,
        affs,
        vms: defs.iter().map(|d| d.vm).collect(),
        prios: defs.iter().map(|d| d.prio).collect(),
        runnable: vec![false; n],
        wake_pending: vec![false; n],
        run: vec![None; ncpus as usize],
        slice_end: vec![0; ncpus as usize],
        last_ran: vec![0; n],
        now: 0,
        isolation,
        in_service: vec![true; ncpus as usize],
        realtime: vec![false; n],
        max_gap: vec![0; n],
        measuring: false,
        trace: vec![],
    }
}

const SPECS: [&str; 5] = ["1x2x1", "1x2x2", "1x4x2", "2x2x2", "1x2x2x2"];

proptest! {
    // More cases: HAIKU_PROP_CASES=5000 (release build).
    #![proptest_config(ProptestConfig {
        cases: std::env::var("HAIKU_PROP_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(64),
        ..ProptestConfig::default()
    })]

    /// Structural invariants, affinity, idle-while-waiting and SMT isolation
    /// after every event.
    #[test]
    fn invariants_hold_over_random_events(
        spec in 0usize..SPECS.len(),
        defs in prop::collection::vec(entity_def(), 1..10),
        ops in prop::collection::vec(op(), 1..150),
        isolation in any::<bool>(),
        power_saving in any::<bool>(),
    ) {
        let mode = if power_saving { Mode::PowerSaving } else { Mode::LowLatency };
        let mut d = build(SPECS[spec], &defs, isolation, mode);
        for op in &ops {
            d.apply(op)?;
        }
    }

    /// No starvation: in a phase of only quantum ends, every runnable
    /// timeshare entity runs within the bound derived in the module docs.
    #[test]
    fn every_timeshare_entity_runs_within_bound(
        spec in 0usize..SPECS.len(),
        defs in prop::collection::vec(entity_def(), 1..9),
        ops in prop::collection::vec(op(), 0..60),
        power_saving in any::<bool>(),
    ) {
        let mode = if power_saving { Mode::PowerSaving } else { Mode::LowLatency };
        let mut d = build(SPECS[spec], &defs, false, mode);
        // Class changes leave the timeshare-only setting of the bound.
        for op in ops.iter().filter(|op| !matches!(op, Op::SetClass(..))) {
            d.apply(op)?;
        }
        // The bound is for the mode it was derived with, all CPUs in service.
        d.apply(&Op::SetMode(power_saving))?;
        for c in 0..d.run.len() {
            d.apply(&Op::SetCpu(c, true))?;
        }
        for e in 0..defs.len() {
            if !d.runnable[e] {
                d.wake(e)?;
            }
        }
        d.check()?;
        let table = SchedConfig::default().tunables.quantum_table(mode).to_owned();
        let max_q = table.base_quantum * table.quantum_multipliers[1] as Nanos;
        let sum_p: Nanos = d.prios.iter().map(|p| *p as Nanos + 20).sum();
        let bound = (sum_p + 1) * max_q;
        d.measuring = true;
        let start = d.now;
        for e in 0..defs.len() {
            d.last_ran[e] = d.last_ran[e].max(start);
        }
        d.advance_to(start + bound + 2 * max_q)?;
        d.check()?;
        for e in 0..defs.len() {
            let tail = if d.run.contains(&Some(e)) { 0 } else { d.now - d.last_ran[e] };
            let worst = d.max_gap[e].max(tail);
            prop_assert!(worst <= bound, "entity {e} (P {}) waited {worst} > bound {bound}", d.prios[e]);
        }
    }
}
