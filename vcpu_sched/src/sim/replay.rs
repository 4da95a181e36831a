//! Replaying recorded vCPUs: instead of drawing bursts and sleeps from
//! distributions, each vCPU follows the script a real run recorded (a
//! VMM's scheduling trace, turned into scripts by the VMM): how long it
//! ran between halts, how long each timer sleep was, whose IPI woke it and
//! where in the sender's run that IPI went out. The script says what the
//! guest *asked for*; the scheduler under test decides when it gets it,
//! on any topology and policy. Deterministic: no randomness is drawn.
//!
//! Script steps ([`Step`]) are taken in order. A `Run` consumes CPU time
//! (it survives preemptions, as a burst does); `RunUntil` runs until a
//! simulated time (the guest's work loops are bounded by wall time, not
//! by CPU: a hog given more CPU does not finish sooner); `Send` wakes the
//! vCPU it names if that one waits for a message, and otherwise leaves it
//! a message (counted: a recorded wake is never lost to timing); `Sleep`
//! blocks for a time (a guest timer); `WaitMessage` blocks until a message
//! (an IPI) unless one is waiting; `Yield` gives the CPU up.
//!
//! The engine's hooks (`model.rs`, `engine.rs`) call the three functions
//! at the bottom: at a burst's start, at its end, and at each dispatch.

use super::engine::{Engine, Simulator};
use super::events::EvKind;
use super::model::State;
use super::report::SimReport;
use super::workload::{GroupSpec, SimError, Sleep, Workload};
use super::Dist;
use crate::{build, CpuSet, Nanos, SchedClass, SchedConfig, StopReason, Topology};
use serde::{Deserialize, Serialize};

/// One step of a vCPU's script.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Step {
    /// Run for this much CPU time.
    Run(Nanos),
    /// Run until this simulated time (ns from the start).
    RunUntil(Nanos),
    /// Wake (or leave a message for) the vCPU with this index.
    Send(u32),
    /// Block for this long.
    Sleep(Nanos),
    /// Block until a message arrives (at once if one is waiting).
    WaitMessage,
    /// Give the CPU up, staying runnable.
    Yield,
}

/// One recorded vCPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplayVcpu {
    /// Its name in reports (e.g. `pingpong/vcpu0`).
    pub name: String,
    pub vm: u32,
    pub class: SchedClass,
    pub priority: u8,
    /// Where it may run (None: everywhere).
    pub affinity: Option<CpuSet>,
    pub script: Vec<Step>,
}

/// A whole replay: the vCPUs, the machine and how long.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Replay {
    pub name: String,
    pub topology: Topology,
    pub sched: SchedConfig,
    pub duration_ns: Nanos,
    /// Delay from a kicking wake decision until the target CPU runs the
    /// woken vCPU (the recorded wake mechanism's cost), microseconds.
    pub kick_latency_us: f64,
    pub vcpus: Vec<ReplayVcpu>,
}

/// Where each vCPU is in its script (kept by the simulator's engine).
#[derive(Debug, Clone)]
pub(super) struct Scripts {
    scripts: Vec<Vec<Step>>,
    /// Index of the next step per vCPU.
    at: Vec<usize>,
    /// Messages sent to it and not yet taken by a `WaitMessage`.
    messages: Vec<u32>,
    /// Blocked in a `WaitMessage`.
    waiting: Vec<bool>,
    /// The time a `RunUntil` in progress ends, per vCPU.
    until: Vec<Option<Nanos>>,
}

impl Replay {
    /// The simulator's workload for this replay: one group per vCPU
    /// (its burst and sleep are never drawn).
    fn workload(&self) -> Workload {
        let mut w = Workload::new(
            &self.name,
            "replay",
            self.duration_ns.div_ceil(1_000_000).max(1),
        );
        w.kick_latency_us = self.kick_latency_us;
        w.sched = self.sched.clone();
        w.groups = self
            .vcpus
            .iter()
            .map(|v| {
                let mut g = GroupSpec::new(&v.name, 1, Dist::Fixed { us: 1.0 })
                    .with_vm(v.vm)
                    .with_priority(v.class, v.priority)
                    .with_sleep(Sleep::UntilMessage)
                    // Blocked at the start only if it waits for a message.
                    .with_start_awake(v.script.first() != Some(&Step::WaitMessage));
                if let Some(a) = &v.affinity {
                    g = g.with_affinity(a.clone());
                }
                g
            })
            .collect();
        w
    }

    /// Check the replay: names, indexes of `Send`, affinities.
    pub fn validate(&self) -> Result<(), SimError> {
        let n = self.vcpus.len() as u32;
        if n == 0 {
            return Err(SimError::Invalid("a replay needs at least one vCPU".into()));
        }
        for v in &self.vcpus {
            if let Some(Step::Send(k)) = v
                .script
                .iter()
                .find(|s| matches!(s, Step::Send(k) if *k >= n))
            {
                return Err(SimError::Invalid(format!(
                    "{}: sends to vCPU {k}, the replay has {n}",
                    v.name
                )));
            }
        }
        Ok(())
    }

    /// Run the replay under its `sched` configuration.
    pub fn run(&self) -> Result<SimReport, SimError> {
        self.validate()?;
        let sched = build(self.topology.clone(), self.sched.clone())?;
        let mut w = self.workload();
        w.topology = format!("replay of {} CPUs", self.topology.num_cpus());
        let scripts = Scripts {
            at: self
                .vcpus
                .iter()
                .map(|v| usize::from(v.script.first() == Some(&Step::WaitMessage)))
                .collect(),
            waiting: self
                .vcpus
                .iter()
                .map(|v| v.script.first() == Some(&Step::WaitMessage))
                .collect(),
            messages: vec![0; self.vcpus.len()],
            until: vec![None; self.vcpus.len()],
            scripts: self.vcpus.iter().map(|v| v.script.clone()).collect(),
        };
        Simulator::with_scheduler(w, sched)?
            .with_replay(scripts)
            .run()
    }
}

/// A time long enough to outlast any replay.
const FOREVER: Nanos = Nanos::MAX / 4;

impl Engine {
    /// A burst starts for replayed vCPU `e` (dispatched fresh, or going on
    /// after the previous step): the CPU its next step needs. False if
    /// `e` is not replayed.
    pub(super) fn replay_start_burst(&mut self, e: usize) -> bool {
        let now = self.now;
        let Some(r) = self.replay.as_mut() else {
            return false;
        };
        let step = r.scripts[e].get(r.at[e]).copied();
        let work = match step {
            Some(Step::Run(ns)) => {
                r.at[e] += 1;
                ns
            }
            Some(Step::RunUntil(t)) => {
                r.at[e] += 1;
                r.until[e] = Some(t);
                t.saturating_sub(now)
            }
            // Not a run: an empty burst, whose end takes the next steps.
            _ => 0,
        };
        // Zero is fine here: every step moves the script on, so an empty
        // burst cannot repeat for ever at one instant.
        let ent = &mut self.ents[e];
        ent.work_left = work;
        ent.crit_left = 0;
        ent.phase = super::model::Phase::Work;
        true
    }

    /// Replayed vCPU `e` is dispatched: a `RunUntil` in progress ends at
    /// its time, however long the vCPU waited.
    pub(super) fn replay_dispatched(&mut self, e: usize, now: Nanos) {
        if let Some(t) = self.replay.as_ref().and_then(|r| r.until[e]) {
            self.ents[e].work_left = t.saturating_sub(now);
        }
    }

    /// Replayed vCPU `e` finished a burst: take the steps up to the next
    /// run, a block or a yield. None if `e` is not replayed.
    pub(super) fn replay_burst_done(
        &mut self,
        e: usize,
        now: Nanos,
    ) -> Option<Result<Option<StopReason>, SimError>> {
        self.replay.as_mut()?.until[e] = None;
        Some(self.replay_steps(e, now))
    }

    fn replay_steps(&mut self, e: usize, now: Nanos) -> Result<Option<StopReason>, SimError> {
        self.ents[e].phase = super::model::Phase::Fresh;
        loop {
            let Some(r) = self.replay.as_mut() else {
                return Ok(None);
            };
            let Some(step) = r.scripts[e].get(r.at[e]).copied() else {
                // The script is over: the vCPU never runs again.
                return Ok(Some(self.block(e, None)));
            };
            r.at[e] += 1;
            match step {
                Step::Run(_) | Step::RunUntil(_) => {
                    r.at[e] -= 1;
                    self.replay_start_burst(e);
                    return Ok(None);
                }
                Step::Send(k) => {
                    let k = k as usize;
                    if r.waiting[k] {
                        r.waiting[k] = false;
                        if self.ents[k].state == State::Blocked {
                            self.wake(k, now, Some(e))?;
                        }
                    } else {
                        r.messages[k] += 1;
                    }
                }
                Step::Sleep(ns) => return Ok(Some(self.block(e, Some(now.saturating_add(ns))))),
                Step::WaitMessage => {
                    if r.messages[e] > 0 {
                        r.messages[e] -= 1;
                        continue;
                    }
                    r.waiting[e] = true;
                    return Ok(Some(self.block(e, None)));
                }
                Step::Yield => return Ok(Some(StopReason::Yielded)),
            }
        }
    }

    /// Block `e` until `until` (None: until a message or for ever).
    fn block(&mut self, e: usize, until: Option<Nanos>) -> StopReason {
        let ent = &mut self.ents[e];
        ent.state = State::Blocked;
        ent.sleep_gen = ent.sleep_gen.wrapping_add(1);
        let gen = ent.sleep_gen;
        if let Some(t) = until.filter(|&t| t < FOREVER) {
            self.push(t, EvKind::SleepEnd, e as u32, gen);
        }
        StopReason::Blocked
    }
}

impl Simulator {
    /// Drive the vCPUs by `scripts` instead of the workload's distributions.
    pub(super) fn with_replay(mut self, scripts: Scripts) -> Simulator {
        self.replay = Some(scripts);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Nanos = 1000;
    const MS: Nanos = 1_000_000;

    fn vcpu(name: &str, vm: u32, script: Vec<Step>) -> ReplayVcpu {
        ReplayVcpu {
            name: name.into(),
            vm,
            class: SchedClass::Timeshare,
            priority: 10,
            affinity: None,
            script,
        }
    }

    /// Two vCPUs that wake each other 100 times, and a hog, on one CPU.
    fn pingpong_next_to_a_hog() -> Replay {
        let mut a = vec![];
        let mut b = vec![Step::WaitMessage];
        for _ in 0..100 {
            a.extend([Step::Run(30 * US), Step::Send(1), Step::WaitMessage]);
            b.extend([Step::Run(40 * US), Step::Send(0), Step::WaitMessage]);
        }
        Replay {
            name: "pp".into(),
            topology: Topology::from_spec("1x1x1").unwrap(),
            sched: SchedConfig::default(),
            duration_ns: 200 * MS,
            kick_latency_us: 5.0,
            vcpus: vec![
                vcpu("pp/vcpu0", 0, a),
                vcpu("pp/vcpu1", 0, b),
                vcpu("hog/vcpu0", 1, vec![Step::RunUntil(150 * MS)]),
            ],
        }
    }

    #[test]
    fn a_replay_is_deterministic() {
        let r = pingpong_next_to_a_hog();
        let a = r.run().unwrap().without_host_timing();
        let b = r.run().unwrap().without_host_timing();
        assert_eq!(a, b);
    }

    #[test]
    fn scripts_are_followed_to_their_end() {
        let mut r = pingpong_next_to_a_hog();
        // Alone, the pair runs its whole script: 100 x 30 us and 100 x 40 us.
        r.vcpus.truncate(2);
        let rep = r.run().unwrap();
        assert_eq!(rep.violations.total(), 0);
        assert_eq!(rep.vcpus[0].throughput.run_ns, 100 * 30 * US);
        assert_eq!(rep.vcpus[1].throughput.run_ns, 100 * 40 * US);
        // Each wake of vcpu1 but the first follows a send: 100 wakes each.
        assert_eq!(rep.vcpus[1].wake_latency.count, 100);
    }

    #[test]
    fn run_until_ends_at_its_time_whatever_the_cpu_it_got() {
        let mut r = pingpong_next_to_a_hog();
        r.vcpus.drain(..2);
        r.vcpus.push(vcpu(
            "sleeper",
            2,
            vec![Step::Sleep(10 * MS), Step::Run(5 * MS)],
        ));
        let rep = r.run().unwrap();
        let hog = rep.vcpus[0].throughput.run_ns;
        // 150 ms of wall time, of which the sleeper took its 5 ms.
        assert!((140 * MS..=147 * MS).contains(&hog), "{hog}");
        assert_eq!(rep.vcpus[1].throughput.run_ns, 5 * MS);
    }

    #[test]
    fn a_send_to_an_unknown_vcpu_is_refused() {
        let mut r = pingpong_next_to_a_hog();
        r.vcpus[0].script.push(Step::Send(7));
        assert!(r.run().unwrap_err().to_string().contains("sends to vCPU 7"));
    }
}
