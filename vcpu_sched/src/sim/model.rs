//! The simulated machine and its vCPUs: what each vCPU does (run bursts
//! split into work and a critical section under a VM-wide spin lock,
//! sleeps, messages to other vCPUs, yields), the CPUs' timers and the
//! simulator's own measurements (run time, useful time, spinning, ready
//! wait, wake latency, SMT co-running). The engine (`engine.rs`) moves
//! this model from event to event and asks the scheduler; the checks of
//! the scheduler's decisions are the [`crate::monitor`]'s.

use super::engine::Engine;
use super::events::EvKind;
use super::server::Server;
use super::workload::{ShootdownRole, SimError, Sleep, Workload};
use crate::{EntityId, EntitySpec, Nanos, StopReason, Topology, VcpuScheduler};
use rand::Rng;

pub(super) const NONE: u32 = u32::MAX;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum State {
    Blocked,
    Ready,
    Running(u32),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// No burst in progress (starts one when dispatched).
    Fresh,
    /// Paying the cost of the wake that started this burst (not useful).
    WakeCost,
    /// Paying the cost of the block that ends this burst (not useful).
    BlockCost,
    /// Working outside the lock.
    Work,
    /// Spinning on the VM lock.
    WaitLock,
    /// Spinning at the VM barrier (its burst's work is done).
    WaitBarrier,
    /// A shootdown's initiator spinning until every responder has
    /// acknowledged its round.
    WaitShootdown,
    /// Holding the VM lock.
    Crit,
}

#[derive(Debug, Clone, Copy)]
pub(super) enum Target {
    None,
    Group { first: u32, count: u32 },
    Vcpu(u32),
}

pub(super) struct Group {
    pub first: u32,
    pub count: u32,
    pub sleep: Sleep,
    pub burst: super::dist::Dist,
    pub yield_after_burst: bool,
    pub target: Target,
    pub fanout: u32,
    pub lock_fraction: Option<f64>,
    pub wake_cost: Option<super::dist::Dist>,
    pub block_cost: Option<super::dist::Dist>,
}

pub(super) struct Ent {
    pub id: EntityId,
    pub group: u32,
    pub vm: u32,
    /// Index into `locks`, NONE without lock behaviour.
    pub lock: u32,
    /// Index into `barriers`, NONE without barrier behaviour.
    pub barrier: u32,
    /// The barrier's round this vCPU waits in (WaitBarrier).
    pub bar_round: u64,
    /// Index into `shootdowns`, NONE without shootdown behaviour.
    pub shootdown: u32,
    /// The last shootdown round a responder acknowledged.
    pub acked_round: u64,
    /// Index into `servers`, NONE if it is no server's.
    pub server: u32,
    pub state: State,
    pub phase: Phase,
    pub work_left: Nanos,
    pub crit_left: Nanos,
    /// Wake cost still to pay before the burst's work.
    pub cost_left: Nanos,
    /// Woken from a sleep since its last burst: the next burst pays the
    /// group's wake cost first.
    pub woke: bool,
    /// The tick a `Sleep::Period` vCPU sleeps until, chosen at work end.
    pub next_tick: Nanos,
    pub sleep_gen: u32,
    pub pending_msg: bool,
    pub latency_pending: bool,
    pub wake_at: Nanos,
    pub ready_since: Nanos,
    pub last_cpu: u32,
    // Window statistics.
    pub bursts: u64,
    pub useful: Nanos,
    pub spin: Nanos,
    /// Run time spent on wake and block costs.
    pub overhead: Nanos,
    pub run: Nanos,
    pub ready_wait: Nanos,
    pub migrations: u64,
    pub latencies: Vec<Nanos>,
    /// Its VM has the spin watch (`spin_watch.rs`).
    pub watch: bool,
    /// It was spinning when it last left its CPU runnable.
    pub spun_at_stop: bool,
    /// When it last left its CPU runnable outside a spin (the watch's
    /// likely holder is the parked sibling that did so last).
    pub stopped_holding_at: Nanos,
    /// Names its newest look (older look events are stale).
    pub look_gen: u32,
    /// Its newest look is the one into its turn (the backoff counts it).
    pub turn_look: bool,
    /// Turns started while its VM's looks were backed off.
    pub looks_skipped: u32,
    /// The initiator whose shootdown IPI reached it parked (the watch
    /// gives that initiator its next turn at the look, `spin_watch.rs`).
    pub answer_to: Option<usize>,
    /// This turn goes to that initiator at the look, unless it spins.
    pub turn_for: Option<usize>,
    /// Its VM has more vCPUs than this one may use CPUs (the watch
    /// then also yields to a sibling that spun when it stopped).
    pub wide: bool,
    /// Under `ranked` (`ranked.rs`): it runs or waits at a real-time
    /// rank, woken by the hypervisor, the policy not told.
    pub rt: bool,
    /// When it last began to run at that rank.
    pub rt_since: Nanos,
    /// The agent's looks that found it awake at that rank since its wake.
    pub rt_looks: u8,
    /// Run time at that rank the policy has not been told of yet.
    pub unseen: Nanos,
    /// All its run time (the thread's CPU clock; not only the window's).
    pub cpu_clock: Nanos,
    /// Under `ranked`, queued in the policy: the CPU its VM owns that it
    /// shares (`sibling_share.rs`).
    pub beside: Option<u32>,
    /// It halted while it shared, queued in the policy: the policy hears
    /// of the halt when it dispatches it (`sibling_share.rs`).
    pub halted_queued: bool,
    /// Its sibling turns while it shares (`sibling_share.rs`).
    pub turn: TurnState,
}

pub(super) struct Cpu {
    pub core: u32,
    /// The vCPU that runs here (under `ranked` a real-time thread or a
    /// sibling sharing the CPU may run instead of the policy's runner).
    pub current: Option<u32>,
    /// The policy's runner: the vCPU its last dispatch here named.
    pub runner: Option<u32>,
    pub since: Nanos,
    /// When the current entity was dispatched (names its turn).
    pub dispatched_at: Nanos,
    pub quantum_end: Nanos,
    pub timer_gen: u32,
    pub kick_pending: bool,
    pub busy: Nanos,
    pub ctx: u64,
    pub sched_calls: u64,
    pub kicks: u64,
    pub kicks_wasted: u64,
    /// Quantum timers brought forward by wake decisions.
    pub quantum_cuts: u64,
    /// Since when this CPU runs a vCPU while a sibling runs another VM's.
    pub foreign_since: Option<Nanos>,
    pub smt_foreign: Nanos,
    /// Under `ranked`: the policy's runner a real-time thread holds off.
    pub paused_owner: Option<PausedOwner>,
    /// The turn of this CPU's runner a real-time thread last held off
    /// (its dispatch) and the latest that turn may end.
    pub turn_latest: Option<(Nanos, Nanos)>,
    /// A kick that came while a real-time thread ran here, carried out
    /// when it leaves.
    pub deferred_kick: bool,
    /// Real-time wakes run here, in the window.
    pub hypervisor_wakes: u64,
    /// vCPUs handed to the policy, found awake at the agent's second
    /// look, running here or waiting to (last run here), in the window.
    pub found_running: u64,
    /// Queued siblings placed beside the owner here, in the window.
    pub placed_beside: u64,
    /// Sibling turns here given away from a spin-wait loop, in the window.
    pub spin_yields: u64,
    /// Turns here given back to a sibling that gave its CPU away from a
    /// spin-wait loop, in the window.
    pub turns_given_back: u64,
}

/// The policy's runner of a CPU while a real-time thread holds it off
/// (`ranked.rs`).
#[derive(Debug, Clone, Copy)]
pub(super) struct PausedOwner {
    pub ent: u32,
    /// The quantum it had left.
    pub left: Nanos,
    /// Its dispatch (names its turn).
    pub dispatched_at: Nanos,
    /// The latest its turn may end, lost time given back or not: three
    /// of its quanta after its dispatch, as the engine's give-back.
    pub latest: Nanos,
}

pub(super) struct Lock {
    pub holder: u32,
    pub spinners: Vec<u32>,
}

/// A VM's spin barrier: `parties` vCPUs, `arrived` of them in `round`.
pub(super) struct Barrier {
    pub parties: u32,
    pub arrived: u32,
    pub round: u64,
}

/// A VM's shootdown: its initiator, its responders, the round in flight
/// and the responders yet to acknowledge it, and the measured round
/// trips (sent in the window).
pub(super) struct Shootdown {
    pub initiator: u32,
    pub responders: Vec<u32>,
    pub round: u64,
    pub pending: u32,
    pub sent_at: Nanos,
    pub trips: Vec<Nanos>,
}

/// Everything the model holds, built from a workload.
pub(super) struct Model {
    pub groups: Vec<Group>,
    pub ents: Vec<Ent>,
    /// Entity index by `EntityId::index` (`NONE` where no vCPU).
    pub ent_of: Vec<u32>,
    pub cpus: Vec<Cpu>,
    pub core_cpus: Vec<Vec<u32>>,
    pub locks: Vec<Lock>,
    pub barriers: Vec<Barrier>,
    pub shootdowns: Vec<Shootdown>,
    pub servers: Vec<Server>,
}

impl Model {
    /// Groups, vCPUs (added to `sched`, all blocked), CPUs and VM locks of
    /// `w` on `topo`. `added` is told about every entity added.
    pub fn build(
        w: &Workload,
        topo: &Topology,
        sched: &dyn VcpuScheduler,
        mut added: impl FnMut(&EntitySpec, EntityId),
    ) -> Result<Model, SimError> {
        let all = topo.all_cpus();
        let mut groups = Vec::with_capacity(w.groups.len());
        let mut first = 0u32;
        for g in &w.groups {
            let target = match &g.message {
                None => Target::None,
                Some(m) => match (&m.to_group, m.to_vcpu) {
                    (Some(name), _) => {
                        let mut f = 0u32;
                        let mut t = Target::None;
                        for o in &w.groups {
                            if &o.name == name {
                                t = Target::Group {
                                    first: f,
                                    count: o.count,
                                };
                            }
                            f += o.count;
                        }
                        t
                    }
                    (None, Some(v)) => Target::Vcpu(v),
                    (None, None) => Target::None,
                },
            };
            groups.push(Group {
                first,
                count: g.count,
                sleep: g.sleep.clone(),
                burst: g.burst.clone(),
                yield_after_burst: g.yield_after_burst,
                target,
                fanout: g.message.as_ref().map_or(0, |m| m.fanout),
                lock_fraction: g.lock.as_ref().map(|l| l.hold_fraction),
                wake_cost: g.wake_cost.clone(),
                block_cost: g.block_cost.clone(),
            });
            first += g.count;
        }
        // One lock per VM that has lock behaviour, in ascending VM order.
        let lock_vms = vms_with(w, |g| g.lock.is_some());
        let locks = lock_vms
            .iter()
            .map(|_| Lock {
                holder: NONE,
                spinners: Vec::with_capacity(first as usize),
            })
            .collect();

        // One barrier per VM with barrier groups, in ascending VM order.
        let bar_vms = vms_with(w, |g| g.barrier);
        let barriers = bar_vms
            .iter()
            .map(|&vm| Barrier {
                parties: w
                    .groups
                    .iter()
                    .filter(|g| g.barrier && g.vm == vm)
                    .map(|g| g.count)
                    .sum(),
                arrived: 0,
                round: 0,
            })
            .collect();

        // One shootdown per VM with shootdown groups, in ascending VM
        // order; its members are filled in as the vCPUs are made.
        let sd_vms = vms_with(w, |g| g.shootdown.is_some());
        let mut shootdowns: Vec<Shootdown> = sd_vms
            .iter()
            .map(|_| Shootdown {
                initiator: NONE,
                responders: Vec::new(),
                round: 0,
                pending: 0,
                sent_at: 0,
                trips: Vec::new(),
            })
            .collect();

        // One server per VM with server groups, likewise.
        let (srv_vms, mut servers) = Server::for_workload(w);

        let mut ents = Vec::with_capacity(first as usize);
        let mut ent_of = Vec::new();
        for (gi, g) in w.groups.iter().enumerate() {
            let affinity = g.affinity.clone().unwrap_or_else(|| all.clone());
            let lock = if g.lock.is_some() {
                lock_vms.binary_search(&g.vm).map_or(NONE, |i| i as u32)
            } else {
                NONE
            };
            let barrier = if g.barrier {
                bar_vms.binary_search(&g.vm).map_or(NONE, |i| i as u32)
            } else {
                NONE
            };
            let shootdown = match g.shootdown {
                Some(_) => sd_vms.binary_search(&g.vm).map_or(NONE, |i| i as u32),
                None => NONE,
            };
            let server = match g.server {
                Some(_) => srv_vms.binary_search(&g.vm).map_or(NONE, |i| i as u32),
                None => NONE,
            };
            for k in 0..g.count {
                let vm = if g.separate_vms { g.vm + k } else { g.vm };
                if let (Some(srv), Some(role)) = (servers.get_mut(server as usize), g.server) {
                    srv.add_member(ents.len() as u32, role);
                }
                if let (Some(sd), Some(role)) =
                    (shootdowns.get_mut(shootdown as usize), g.shootdown)
                {
                    let me = ents.len() as u32;
                    match role {
                        ShootdownRole::Initiator => sd.initiator = me,
                        ShootdownRole::Responder => sd.responders.push(me),
                    }
                }
                // Before the VM's first vCPU, which then starts with it.
                let mode = g.coschedule.unwrap_or_default();
                sched.set_coschedule(crate::VmId(vm), mode, 0)?;
                let spec = EntitySpec {
                    vm: crate::VmId(vm),
                    class: g.class,
                    priority: g.priority,
                    affinity: affinity.clone(),
                };
                let id = sched.add_entity(spec.clone(), 0)?;
                if let Some(w) = g.weight {
                    sched.set_weight(id, w, 0)?;
                }
                if let Some(c) = g.cap {
                    sched.set_cap(id, Some(c), 0)?;
                }
                if let Some(r) = g.reservation {
                    sched.set_reservation(id, r, 0)?;
                }
                if let Some(b) = g.latency_bound() {
                    sched.set_latency_bound(id, Some(b), 0)?;
                }
                added(&spec, id);
                let slot = id.index() as usize;
                if slot > 1 << 24 {
                    return Err(SimError::Invalid(format!("entity id {slot} too large")));
                }
                if ent_of.len() <= slot {
                    ent_of.resize(slot + 1, NONE);
                }
                ent_of[slot] = ents.len() as u32;
                ents.push(Ent {
                    id,
                    group: gi as u32,
                    vm,
                    lock,
                    barrier,
                    bar_round: 0,
                    shootdown,
                    acked_round: 0,
                    server,
                    state: State::Blocked,
                    phase: Phase::Fresh,
                    work_left: 0,
                    crit_left: 0,
                    cost_left: 0,
                    woke: false,
                    next_tick: 0,
                    sleep_gen: 0,
                    pending_msg: false,
                    latency_pending: false,
                    wake_at: 0,
                    ready_since: 0,
                    last_cpu: NONE,
                    bursts: 0,
                    useful: 0,
                    spin: 0,
                    overhead: 0,
                    run: 0,
                    ready_wait: 0,
                    migrations: 0,
                    latencies: Vec::new(),
                    watch: w.spin_watch && g.coschedule == Some(crate::Coschedule::Relaxed),
                    spun_at_stop: false,
                    stopped_holding_at: 0,
                    look_gen: 0,
                    turn_look: false,
                    looks_skipped: 0,
                    answer_to: None,
                    turn_for: None,
                    wide: false,
                    rt: false,
                    rt_since: 0,
                    rt_looks: 0,
                    unseen: 0,
                    cpu_clock: 0,
                    beside: None,
                    halted_queued: false,
                    turn: Default::default(),
                });
            }
        }
        // Whether each vCPU's VM has more vCPUs than it may use CPUs.
        let mut vcpus_of_vm = std::collections::HashMap::<u32, usize>::new();
        for e in &ents {
            *vcpus_of_vm.entry(e.vm).or_default() += 1;
        }
        for (gi, g) in w.groups.iter().enumerate() {
            let allowed = g.affinity.as_ref().map_or(all.len(), |a| a.len());
            for e in ents.iter_mut().filter(|e| e.group == gi as u32) {
                e.wide = vcpus_of_vm[&e.vm] > allowed;
            }
        }
        let cpus = topo
            .cpus
            .iter()
            .map(|c| Cpu {
                core: c.core.0,
                current: None,
                runner: None,
                since: 0,
                dispatched_at: 0,
                quantum_end: 0,
                timer_gen: 0,
                kick_pending: false,
                busy: 0,
                ctx: 0,
                sched_calls: 0,
                kicks: 0,
                kicks_wasted: 0,
                quantum_cuts: 0,
                foreign_since: None,
                smt_foreign: 0,
                paused_owner: None,
                turn_latest: None,
                deferred_kick: false,
                hypervisor_wakes: 0,
                found_running: 0,
                placed_beside: 0,
                spin_yields: 0,
                turns_given_back: 0,
            })
            .collect();
        let core_cpus = topo
            .cores
            .iter()
            .map(|c| c.cpus.iter().map(|x| x.0).collect())
            .collect();
        Ok(Model {
            groups,
            ents,
            ent_of,
            cpus,
            core_cpus,
            locks,
            barriers,
            shootdowns,
            servers,
        })
    }
}

/// The VMs with a group that `has` a VM-wide behaviour, ascending, once
/// each (a behaviour's index per VM is the VM's place in this list).
fn vms_with(w: &Workload, has: impl Fn(&super::workload::GroupSpec) -> bool) -> Vec<u32> {
    let mut vms: Vec<u32> = w.groups.iter().filter(|g| has(g)).map(|g| g.vm).collect();
    vms.sort_unstable();
    vms.dedup();
    vms
}

/// What the vCPUs do, and what the simulator measures of it.
impl Engine {
    /// Charge the running entity of `c` for the time since the last charge.
    pub(super) fn account(&mut self, c: usize, now: Nanos) {
        let Some(e) = self.cpus[c].current else {
            return;
        };
        let since = self.cpus[c].since;
        if now <= since {
            return;
        }
        let dt = now - since;
        let wdt = self.win(since, now);
        self.cpus[c].since = now;
        self.cpus[c].busy += wdt;
        self.ents[e as usize].cpu_clock += dt;
        let ncpu = self.cpus.len();
        self.cpu_time[e as usize * ncpu + c] += wdt;
        let ent = &mut self.ents[e as usize];
        ent.run += wdt;
        match ent.phase {
            Phase::Work => {
                let p = dt.min(ent.work_left);
                ent.work_left -= p;
                ent.useful += p.min(wdt);
            }
            Phase::Crit => {
                let p = dt.min(ent.crit_left);
                ent.crit_left -= p;
                ent.useful += p.min(wdt);
            }
            Phase::WakeCost | Phase::BlockCost => {
                let p = dt.min(ent.cost_left);
                ent.cost_left -= p;
                ent.overhead += p.min(wdt);
            }
            Phase::WaitLock | Phase::WaitBarrier | Phase::WaitShootdown => ent.spin += wdt,
            Phase::Fresh => {}
        }
    }

    /// Arm the CPU timer at min(quantum end, phase end).
    pub(super) fn arm(&mut self, c: usize, now: Nanos) {
        let Some(e) = self.cpus[c].current else {
            return;
        };
        let ent = &self.ents[e as usize];
        let phase_end = match ent.phase {
            Phase::Work => now + ent.work_left,
            Phase::Crit => now + ent.crit_left,
            Phase::WakeCost | Phase::BlockCost => now + ent.cost_left,
            Phase::WaitLock | Phase::WaitBarrier | Phase::WaitShootdown => Nanos::MAX,
            Phase::Fresh => now,
        };
        let t = phase_end.min(self.cpus[c].quantum_end).max(now);
        self.cpus[c].timer_gen = self.cpus[c].timer_gen.wrapping_add(1);
        let gen = self.cpus[c].timer_gen;
        self.push(t, EvKind::CpuTimer, c as u32, gen);
    }

    pub(super) fn start_burst(&mut self, e: usize) {
        if self.replay_start_burst(e) {
            return;
        }
        let g = self.ents[e].group as usize;
        let total = self.groups[g].burst.sample(&mut self.rng).max(1);
        let crit = match self.groups[g].lock_fraction {
            Some(f) => ((total as f64 * f).round() as Nanos).clamp(1, total),
            None => 0,
        };
        let cost = match (&self.groups[g].wake_cost, self.ents[e].woke) {
            (Some(d), true) => d.sample(&mut self.rng),
            _ => 0,
        };
        let ent = &mut self.ents[e];
        ent.work_left = total - crit;
        ent.crit_left = crit;
        ent.cost_left = cost;
        ent.woke = false;
        ent.phase = if cost > 0 {
            Phase::WakeCost
        } else {
            Phase::Work
        };
    }

    /// Release the VM lock held by `e`; hand it to the first spinner that is
    /// on a CPU (the others take it when they run again).
    pub(super) fn release(&mut self, l: usize, e: usize, now: Nanos) {
        debug_assert_eq!(self.locks[l].holder, e as u32);
        self.locks[l].holder = NONE;
        let pos = self.locks[l]
            .spinners
            .iter()
            .position(|&s| matches!(self.ents[s as usize].state, State::Running(_)));
        if let Some(pos) = pos {
            let s = self.locks[l].spinners.remove(pos) as usize;
            let State::Running(sc) = self.ents[s].state else {
                return;
            };
            self.account(sc as usize, now);
            self.locks[l].holder = s as u32;
            self.ents[s].phase = Phase::Crit;
            self.arm(sc as usize, now);
        }
    }

    /// Take the VM lock at dispatch if the entity was spinning and it is free.
    pub(super) fn try_take_lock_on_dispatch(&mut self, e: usize) {
        let l = self.ents[e].lock;
        if l == NONE || self.ents[e].phase != Phase::WaitLock {
            return;
        }
        let lk = &mut self.locks[l as usize];
        if lk.holder == NONE {
            lk.holder = e as u32;
            if let Some(p) = lk.spinners.iter().position(|&s| s == e as u32) {
                lk.spinners.remove(p);
            }
            self.ents[e].phase = Phase::Crit;
        }
    }

    /// A burst's work (and its critical section) completed: meet the
    /// VM's barrier if it has one, then end the burst. The last to arrive
    /// releases the others: those on a CPU go on at once, the others when
    /// they next run (`pass_barrier_on_dispatch`).
    pub(super) fn work_end(
        &mut self,
        e: usize,
        now: Nanos,
    ) -> Result<Option<StopReason>, SimError> {
        let sd = self.ents[e].shootdown as usize;
        if self
            .shootdowns
            .get(sd)
            .is_some_and(|s| s.initiator == e as u32)
        {
            return self.send_shootdown(sd, now);
        }
        let b = self.ents[e].barrier;
        if b == NONE {
            return self.burst_done(e, now);
        }
        let bar = &mut self.barriers[b as usize];
        bar.arrived += 1;
        if bar.arrived < bar.parties {
            let round = bar.round;
            let ent = &mut self.ents[e];
            ent.phase = Phase::WaitBarrier;
            ent.bar_round = round;
            return Ok(None);
        }
        bar.arrived = 0;
        bar.round += 1;
        for s in 0..self.ents.len() {
            if s == e || self.ents[s].barrier != b || self.ents[s].phase != Phase::WaitBarrier {
                continue;
            }
            self.go_on_if_running(s, now)?;
        }
        self.burst_done(e, now)
    }

    /// A vCPU that waited at the barrier and was released while off a CPU
    /// goes on when it runs again.
    pub(super) fn pass_barrier_on_dispatch(
        &mut self,
        e: usize,
        now: Nanos,
    ) -> Result<(), SimError> {
        let b = self.ents[e].barrier;
        if b == NONE
            || self.ents[e].phase != Phase::WaitBarrier
            || self.barriers[b as usize].round == self.ents[e].bar_round
        {
            return Ok(());
        }
        // Never blocks or yields (validated).
        self.burst_done(e, now).map(|_| ())
    }

    /// The initiator of shootdown `sd` sends a round: responders on a CPU
    /// acknowledge at once; for each one parked the scheduler hears of an
    /// IPI to a preempted sibling (`yield_to`, as Pacer's engine reports
    /// it under its own local APIC), and the initiator spins until the
    /// last acknowledges, giving up its CPU (a yield) if the scheduler
    /// took a directed yield.
    fn send_shootdown(&mut self, sd: usize, now: Nanos) -> Result<Option<StopReason>, SimError> {
        let s = &mut self.shootdowns[sd];
        s.round += 1;
        s.sent_at = now;
        s.pending = 0;
        let (round, from) = (s.round, s.initiator as usize);
        let mut yielded = false;
        for i in 0..self.shootdowns[sd].responders.len() {
            let r = self.shootdowns[sd].responders[i] as usize;
            match self.ents[r].state {
                State::Running(_) => self.ents[r].acked_round = round,
                State::Ready => {
                    self.shootdowns[sd].pending += 1;
                    self.sched_calls += 1;
                    self.ents[r].answer_to = Some(from);
                    yielded |= self
                        .sched
                        .pass_turn(self.ents[from].id, self.ents[r].id, now)?;
                }
                // Responders never block (validated); counted all the same.
                State::Blocked => self.shootdowns[sd].pending += 1,
            }
        }
        if self.shootdowns[sd].pending == 0 {
            self.round_trip_done(sd, now);
            return self.burst_done(from, now);
        }
        self.ents[from].phase = Phase::WaitShootdown;
        Ok(yielded.then_some(StopReason::Yielded))
    }

    /// A shootdown member was dispatched: a responder acknowledges the
    /// round in flight (the last one ends it, and a running initiator goes
    /// on at once); an initiator whose round ended while it was off a CPU
    /// goes on.
    pub(super) fn shootdown_on_dispatch(&mut self, e: usize, now: Nanos) -> Result<(), SimError> {
        let sd = self.ents[e].shootdown as usize;
        let Some(s) = self.shootdowns.get(sd) else {
            return Ok(());
        };
        let from = s.initiator as usize;
        if from == e {
            if self.ents[e].phase == Phase::WaitShootdown && s.pending == 0 {
                // Never blocks or yields (validated).
                self.burst_done(e, now)?;
            }
            return Ok(());
        }
        if self.ents[e].acked_round >= s.round {
            return Ok(());
        }
        self.ents[e].acked_round = s.round;
        self.shootdowns[sd].pending -= 1;
        if self.shootdowns[sd].pending > 0 {
            return Ok(());
        }
        self.round_trip_done(sd, now);
        self.go_on_if_running(from, now)
    }

    /// A waiter (at a barrier, for a shootdown's answers) was released: if
    /// it is on a CPU its wait ends as a burst there, and the next burst
    /// starts at once (such vCPUs never sleep or yield: validated).
    fn go_on_if_running(&mut self, e: usize, now: Nanos) -> Result<(), SimError> {
        let State::Running(c) = self.ents[e].state else {
            return Ok(());
        };
        let c = c as usize;
        self.account(c, now);
        match self.burst_done(e, now)? {
            Some(reason) => self.do_schedule(c, now, reason),
            None => {
                self.arm(c, now);
                Ok(())
            }
        }
    }

    /// Shootdown `sd`'s round is acknowledged by every responder: its
    /// round trip is measured if it was sent in the window.
    fn round_trip_done(&mut self, sd: usize, now: Nanos) {
        let s = &mut self.shootdowns[sd];
        if s.sent_at >= self.warmup {
            s.trips.push(now - s.sent_at);
        }
    }

    /// A burst's work completed: count it, send its messages, choose the
    /// next tick of a periodic sleeper, then pay the block cost (if the
    /// vCPU is about to block) or finish the burst.
    pub(super) fn burst_done(
        &mut self,
        e: usize,
        now: Nanos,
    ) -> Result<Option<StopReason>, SimError> {
        if self.in_window(now) {
            self.ents[e].bursts += 1;
        }
        if let Some(stop) = self.replay_burst_done(e, now) {
            return stop;
        }
        let g = self.ents[e].group as usize;
        let server = self.is_server_member(e);
        if server {
            self.server_burst_done(e, now)?;
        }
        let (target, fanout) = (self.groups[g].target, self.groups[g].fanout);
        for _ in 0..fanout {
            let t = match target {
                Target::None => break,
                Target::Vcpu(v) => v as usize,
                Target::Group { first, count } => {
                    let me = e as u32;
                    if count == 0 {
                        break;
                    }
                    let self_in = me >= first && me < first + count;
                    if self_in && count == 1 {
                        break;
                    }
                    let span = if self_in { count - 1 } else { count };
                    let mut r = first + self.rng.random_range(0..span);
                    if self_in && r >= me {
                        r += 1;
                    }
                    r as usize
                }
            };
            if self.ents[t].state == State::Blocked {
                self.wake(t, now, Some(e))?;
            } else {
                self.ents[t].pending_msg = true;
            }
        }
        if let Sleep::Period(p) = self.groups[g].sleep {
            // The next tick after now (a tick exactly now was missed).
            self.ents[e].next_tick = now + (p - now % p);
        }
        let blocks = if server {
            !self.server_has_work(e)
        } else {
            !self.groups[g].yield_after_burst
                && !self.ents[e].pending_msg
                && self.groups[g].sleep != Sleep::Never
        };
        if let (true, Some(d)) = (blocks, &self.groups[g].block_cost) {
            let cost = d.sample(&mut self.rng);
            if cost > 0 {
                let ent = &mut self.ents[e];
                ent.cost_left = cost;
                ent.phase = Phase::BlockCost;
                return Ok(None);
            }
        }
        self.finish_burst(e, now)
    }

    /// The burst is over (block cost paid): yield, go on, or block.
    pub(super) fn finish_burst(
        &mut self,
        e: usize,
        now: Nanos,
    ) -> Result<Option<StopReason>, SimError> {
        let g = self.ents[e].group as usize;
        self.ents[e].phase = Phase::Fresh;
        if self.groups[g].yield_after_burst {
            return Ok(Some(StopReason::Yielded));
        }
        if self.ents[e].pending_msg {
            self.ents[e].pending_msg = false;
            self.start_burst(e);
            return Ok(None);
        }
        let sleep = match &self.groups[g].sleep {
            // A server vCPU goes on while it has work, else blocks until
            // an arrival or the dispatcher wakes it.
            _ if self.is_server_member(e) => (!self.server_has_work(e)).then_some(None),
            Sleep::Never => None,
            Sleep::UntilMessage => Some(None),
            Sleep::For(d) => Some(Some(d.sample(&mut self.rng))),
            // The tick chosen at work end passed meanwhile: no block, but
            // the way back from the guest's sleep call still costs.
            Sleep::Period(_) if self.ents[e].next_tick <= now => {
                self.ents[e].woke = true;
                None
            }
            Sleep::Period(_) => Some(Some(self.ents[e].next_tick - now)),
        };
        match sleep {
            None => {
                self.start_burst(e);
                Ok(None)
            }
            Some(t) => {
                let ent = &mut self.ents[e];
                ent.state = State::Blocked;
                ent.sleep_gen = ent.sleep_gen.wrapping_add(1);
                let gen = ent.sleep_gen;
                if let Some(t) = t {
                    self.push(now + t, EvKind::SleepEnd, e as u32, gen);
                }
                Ok(Some(StopReason::Blocked))
            }
        }
    }

    /// The vCPU is runnable and waits (woken, or stopped while runnable).
    pub(super) fn ready_add(&mut self, e: usize, now: Nanos) {
        let ent = &mut self.ents[e];
        ent.state = State::Ready;
        ent.ready_since = now;
    }

    /// Re-evaluate SMT co-running with another VM on `c`'s core at `now`.
    pub(super) fn update_corun(&mut self, c: usize, now: Nanos) {
        let core = self.cpus[c].core as usize;
        if self.core_cpus[core].len() < 2 {
            return;
        }
        for i in 0..self.core_cpus[core].len() {
            let s = self.core_cpus[core][i] as usize;
            let foreign = match self.cpus[s].current {
                Some(e) => self.sibling_runs_other_vm(s, self.ents[e as usize].vm),
                None => false,
            };
            if let Some(t0) = self.cpus[s].foreign_since {
                let w = self.win(t0, now);
                self.cpus[s].smt_foreign += w;
            }
            self.cpus[s].foreign_since = foreign.then_some(now);
        }
    }

    pub(super) fn sibling_runs_other_vm(&self, c: usize, vm: u32) -> bool {
        let core = self.cpus[c].core as usize;
        self.core_cpus[core].iter().any(|&s| {
            s as usize != c
                && self.cpus[s as usize]
                    .current
                    .is_some_and(|o| self.ents[o as usize].vm != vm)
        })
    }
}

/// What a request server's vCPUs do (`server.rs` holds its state).
impl Engine {
    /// Arm every server's first arrival.
    pub(super) fn start_servers(&mut self) {
        for s in 0..self.servers.len() {
            self.next_arrival(s, 0);
        }
    }

    fn next_arrival(&mut self, s: usize, after: Nanos) {
        let gap = super::dist::Dist::exponential(self.servers[s].mean_gap_us).sample(&mut self.rng);
        let at = after + gap.max(1);
        if at <= self.end {
            self.push(at, EvKind::Arrival, s as u32, 0);
        }
    }

    /// A request arrives at server `s`: queued for its dispatcher, which
    /// is woken if it is blocked (its timer fired).
    pub(super) fn on_arrival(&mut self, s: usize, now: Nanos) -> Result<(), SimError> {
        let in_window = self.in_window(now);
        let srv = &mut self.servers[s];
        srv.inbox.push_back(now);
        if in_window {
            srv.offered += 1;
        }
        let d = srv.dispatcher as usize;
        self.next_arrival(s, now);
        if self.ents[d].state == State::Blocked {
            self.wake(d, now, None)?;
        }
        Ok(())
    }

    /// Server member `e` finished a burst's work: the dispatcher hands
    /// the oldest arrival to a worker (woken by the dispatcher if
    /// blocked); a worker's oldest request is served.
    pub(super) fn server_burst_done(&mut self, e: usize, now: Nanos) -> Result<(), SimError> {
        let s = self.ents[e].server as usize;
        let warmup = self.warmup;
        let srv = &mut self.servers[s];
        if srv.dispatcher == e as u32 {
            let Some(arrival) = srv.inbox.pop_front() else {
                return Ok(());
            };
            let i = srv.pick();
            srv.queues[i].push_back(arrival);
            let w = srv.workers[i] as usize;
            if self.ents[w].state == State::Blocked {
                self.wake(w, now, Some(e))?;
            }
        } else if let Some(i) = srv.workers.iter().position(|&w| w == e as u32) {
            if let Some(arrival) = srv.queues[i].pop_front() {
                if arrival >= warmup {
                    srv.latencies.push(now - arrival);
                }
            }
        }
        Ok(())
    }

    /// Whether server member `e` has more work (it goes on rather than
    /// blocks); false for a vCPU that is no server's.
    pub(super) fn server_has_work(&self, e: usize) -> bool {
        self.servers
            .get(self.ents[e].server as usize)
            .is_some_and(|s| s.has_work(e as u32))
    }

    /// Whether `e` is a server's member.
    pub(super) fn is_server_member(&self, e: usize) -> bool {
        self.ents[e].server != NONE
    }
}

// Sibling sharing under `ranked` (`sibling_share.rs` plays it).

/// How a sharing VM's threads look for spins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Pacing {
    /// At the pace its looks set (`coschedule = "relaxed"`).
    Paced,
    /// Every sibling turn (`coschedule = "turns"`).
    Fixed,
}

/// One VM's sharing.
#[derive(Debug, Clone, Default)]
pub(super) struct VmShare {
    /// How its threads take turns; None: it never shares.
    pub pacing: Option<Pacing>,
    /// When one of its vCPUs last halted.
    pub halted_at: Nanos,
    /// Paced: the interval between looks as a shift of the sibling turn;
    /// None: no looks.
    pub shift: Option<u32>,
}

/// One vCPU's sibling turns (the engine's `SiblingTurns`).
#[derive(Debug, Clone, Default)]
pub(super) struct TurnState {
    /// Names its newest look (older look events are stale).
    pub gen: u32,
    /// Its look is armed.
    pub armed: bool,
    /// Its look came while it waited: taken when it runs again (a
    /// thread's timer signal waits for the thread).
    pub pending: bool,
    /// Its run clock when its look was last armed.
    pub armed_cpu: Nanos,
    /// Its run clock when it last gave its CPU away.
    pub yielded_cpu: Nanos,
    /// Its run clock when it first owed a spinner the CPU back.
    pub owes_since: Option<Nanos>,
    /// When a look or an exit last found it spinning.
    pub spun_at: Option<Nanos>,
}
