//! Workload description: what the simulated machine and its vCPUs look like.
//!
//! A [`Workload`] is read from TOML (see `vcpu_sched/scenarios/*.toml`) or
//! built in Rust with [`Workload::new`] and [`GroupSpec::new`]. Unknown keys
//! are rejected so that a typo never silently changes a scenario.
//!
//! ```toml
//! name = "overload_balance"
//! topology = "1x2x1"        # Topology::from_spec syntax
//! seed = 1
//! duration_ms = 200         # simulated time
//! warmup_ms = 20            # the simulator's own metrics ignore this prefix
//! kick_latency_us = 2.0     # WakeDecision.kick -> target CPU calls schedule
//!
//! [sched]                   # a SchedConfig (policy, mode, smt_isolation, ...)
//! policy = "haiku"
//!
//! [[group]]
//! name = "hog"
//! count = 4
//! vm = 0
//! priority = 10
//! affinity = "0-1"                        # optional, default: every CPU
//! burst = { dist = "fixed", us = 1000 }    # run burst
//! sleep = "never"                         # CPU hog
//! ```

use super::change::{Change, ChangeSpec};
use super::dist::Dist;
use crate::{CpuSet, Nanos, SchedClass, SchedConfig};
use serde::{Deserialize, Serialize};

/// What a vCPU does after a run burst when it does not yield.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "SleepRepr", into = "SleepRepr")]
pub enum Sleep {
    /// Never sleeps: starts the next burst at once (a CPU hog). Also
    /// written `{ dist = "fixed", us = 0 }`.
    Never,
    /// Blocks until another vCPU sends it a message (a pure receiver).
    UntilMessage,
    /// Blocks for a sampled time (a message ends the sleep early).
    For(Dist),
    /// Blocks until the next tick of a period (ns) counted from time 0:
    /// a timer-driven guest (cyclictest, the bench guest's `sleep` and
    /// `burst`), which skips the ticks it missed. Written
    /// `{ period_us = 100 }`.
    Period(Nanos),
}

/// Serialised form of [`Sleep`]: a word or a distribution table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SleepRepr {
    /// `"never"` or `"until_message"`.
    Word(String),
    /// A distribution table such as `{ dist = "exponential", mean_us = 70 }`.
    Dist(Dist),
    /// `{ period_us = 100 }`.
    Period(PeriodRepr),
}

/// Serialised form of [`Sleep::Period`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeriodRepr {
    /// The period in microseconds (> 0).
    pub period_us: f64,
}

impl TryFrom<SleepRepr> for Sleep {
    type Error = String;
    fn try_from(r: SleepRepr) -> Result<Sleep, String> {
        match r {
            SleepRepr::Word(w) => match w.as_str() {
                "never" => Ok(Sleep::Never),
                "until_message" => Ok(Sleep::UntilMessage),
                other => Err(format!(
                    "sleep must be \"never\", \"until_message\" or a distribution table, not {other:?}"
                )),
            },
            SleepRepr::Dist(d) if d.is_zero() => Ok(Sleep::Never),
            SleepRepr::Dist(d) => Ok(Sleep::For(d)),
            SleepRepr::Period(p) if p.period_us.is_finite() && p.period_us >= 0.001 => {
                Ok(Sleep::Period((p.period_us * 1000.0).round() as Nanos))
            }
            SleepRepr::Period(p) => Err(format!(
                "sleep.period_us must be a finite number of at least 0.001, not {}",
                p.period_us
            )),
        }
    }
}

impl From<Sleep> for SleepRepr {
    fn from(s: Sleep) -> SleepRepr {
        match s {
            Sleep::Never => SleepRepr::Word("never".into()),
            Sleep::UntilMessage => SleepRepr::Word("until_message".into()),
            Sleep::For(d) => SleepRepr::Dist(d),
            Sleep::Period(ns) => SleepRepr::Period(PeriodRepr {
                period_us: ns as f64 / 1000.0,
            }),
        }
    }
}

/// Message passing: after each completed burst the vCPU wakes other vCPUs
/// (hackbench / chat-server style). A target that is running or already
/// runnable gets the message as pending: its next burst end does not block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MessageSpec {
    /// Wake random members of the group with this name (never the sender itself).
    #[serde(default)]
    pub to_group: Option<String>,
    /// Wake the vCPU with this global index (declaration order of groups, 0-based).
    #[serde(default)]
    pub to_vcpu: Option<u32>,
    /// Messages sent per burst (default 1).
    #[serde(default = "one")]
    pub fanout: u32,
}

fn one() -> u32 {
    1
}

/// A VM-wide spin lock taken for the last part of each burst. A vCPU that
/// finds it held spins: it consumes CPU time without progress until the
/// holder releases it, so preempting the holder shows as lost throughput.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockSpec {
    /// Fraction of each burst spent holding the lock (0 < f <= 1).
    pub hold_fraction: f64,
}

/// A vCPU's part in its VM's TLB-shootdown-like round trips (the bench
/// guest's `shootdown`): the initiator, after each burst, interrupts
/// every responder of its VM and spins until each has acknowledged; a
/// responder acknowledges as soon as it is on a CPU (its interrupt
/// handler runs between two instructions of its work), so a responder
/// parked behind another VM holds up the initiator's spin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ShootdownRole {
    /// Sends the rounds (one vCPU per VM).
    Initiator,
    /// Acknowledges them, working in between.
    Responder,
}

/// A vCPU's part in its VM's request server (the bench guest's
/// `server`; the behaviour is `server.rs`'s).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "lowercase", deny_unknown_fields)]
pub enum ServerRole {
    /// Takes the arrivals (one vCPU per VM): `rate_per_s` requests per
    /// second, exponential inter-arrival times.
    Dispatcher {
        /// Mean arrival rate, requests per second (> 0).
        rate_per_s: f64,
    },
    /// Serves the requests handed to it.
    Worker,
}

/// A group of identical vCPUs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupSpec {
    /// Name used in reports and by [`MessageSpec::to_group`] (default `g<index>`).
    #[serde(default)]
    pub name: String,
    /// Number of vCPUs in the group.
    pub count: u32,
    /// VM the vCPUs belong to (SMT isolation, per-VM throughput, the VM lock).
    #[serde(default)]
    pub vm: u32,
    /// Each vCPU is a VM of its own: VMs `vm`, `vm + 1`, ... (unrelated
    /// single-vCPU VMs; no `lock` then).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub separate_vms: bool,
    /// Scheduling class (default timeshare).
    #[serde(default)]
    pub class: SchedClass,
    /// Base priority on Haiku's scale (default 10).
    #[serde(default = "normal_priority")]
    pub priority: u8,
    /// Hard affinity as a CPU list ("0-3,8"); default every CPU of the topology.
    #[serde(default)]
    pub affinity: Option<CpuSet>,
    /// Operator weight of each vCPU (`crate::shares`; default 100). Haiku
    /// only: other policies refuse it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u32>,
    /// Cap of each vCPU, per mille of one CPU (haiku only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cap: Option<u32>,
    /// Reservation of each vCPU, per mille of one CPU (haiku only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation: Option<u32>,
    /// Wake-to-run bound of each vCPU, us (`crate::bound`; haiku only),
    /// with `bound_budget`, per mille of one CPU, the budget it holds for
    /// it. Both or neither.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_bound_us: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound_budget: Option<u32>,
    /// Length of each run burst.
    pub burst: Dist,
    /// CPU time each wake from a sleep costs before the burst's own work
    /// (not useful work): the guest's interrupt entry, handler and return,
    /// and the exits they make. ~100-200 us on a KVM that emulates guest
    /// ring 0; a packet or a disk block's handling on any KVM. Default none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake_cost: Option<Dist>,
    /// CPU time between the end of a burst's work and the block that
    /// follows it (not useful work): the guest's system call into its
    /// kernel and its timer programming. A `period_us` sleep's tick is
    /// chosen before it, as a guest reads its clock before the call; if
    /// the tick passes meanwhile the vCPU does not block. Default none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_cost: Option<Dist>,
    /// What happens after a burst (ignored when `yield` is set).
    #[serde(default = "never")]
    pub sleep: Sleep,
    /// Yield (StopReason::Yielded) after each burst instead of sleeping: the
    /// vCPU stays runnable (the loop_yield pattern).
    #[serde(default, rename = "yield")]
    pub yield_after_burst: bool,
    /// Messages sent after each burst.
    #[serde(default)]
    pub message: Option<MessageSpec>,
    /// VM-wide spin lock behaviour.
    #[serde(default)]
    pub lock: Option<LockSpec>,
    /// Meet the VM's other `barrier` vCPUs at a spin barrier after each
    /// burst (after its lock, if any): a vCPU that arrives spins, burning
    /// its slice, until the last one arrives, so a parked sibling holds up
    /// the rest (a bulk-synchronous guest, the bench guest's `barrier`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub barrier: bool,
    /// Take part in the VM's shootdown round trips ([`ShootdownRole`]);
    /// the initiator's bursts are its round trips, and its group reports
    /// their latency (IPI sent to the last acknowledgement).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shootdown: Option<ShootdownRole>,
    /// Take part in the VM's request server ([`ServerRole`], `server.rs`):
    /// `{ role = "dispatcher", rate_per_s = 5800 }` or `{ role =
    /// "worker" }`; the dispatcher's group reports the requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerRole>,
    /// Runnable at time 0 (default true); receivers usually start blocked,
    /// server vCPUs always do.
    #[serde(default = "yes")]
    pub start_awake: bool,
    /// The VM's co-scheduling, `off` or `relaxed` (`crate::cosched`;
    /// unset: the default, `Coschedule::default()`). Groups of one VM
    /// must agree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coschedule: Option<crate::Coschedule>,
}

fn normal_priority() -> u8 {
    crate::tunables::PRIORITY_NORMAL
}
fn never() -> Sleep {
    Sleep::Never
}
fn yes() -> bool {
    true
}

impl GroupSpec {
    /// A group of `count` CPU hogs with the given fixed burst length (us),
    /// VM 0, priority 10, no affinity restriction. Adjust with the `with_*` methods.
    pub fn new(name: &str, count: u32, burst: Dist) -> GroupSpec {
        GroupSpec {
            name: name.to_string(),
            count,
            vm: 0,
            separate_vms: false,
            class: SchedClass::Timeshare,
            priority: normal_priority(),
            affinity: None,
            weight: None,
            cap: None,
            reservation: None,
            latency_bound_us: None,
            bound_budget: None,
            burst,
            wake_cost: None,
            block_cost: None,
            sleep: Sleep::Never,
            yield_after_burst: false,
            message: None,
            lock: None,
            barrier: false,
            shootdown: None,
            server: None,
            start_awake: true,
            coschedule: None,
        }
    }
    /// Set the VM id.
    pub fn with_vm(mut self, vm: u32) -> Self {
        self.vm = vm;
        self
    }
    /// Make each vCPU a VM of its own (VMs `vm`, `vm + 1`, ...).
    pub fn with_separate_vms(mut self, on: bool) -> Self {
        self.separate_vms = on;
        self
    }
    /// Set class and priority.
    pub fn with_priority(mut self, class: SchedClass, priority: u8) -> Self {
        self.class = class;
        self.priority = priority;
        self
    }
    /// Set the operator shares of each vCPU (`crate::shares`): weight,
    /// cap and reservation (per mille of one CPU).
    pub fn with_shares(
        mut self,
        weight: Option<u32>,
        cap: Option<u32>,
        reservation: Option<u32>,
    ) -> Self {
        self.weight = weight;
        self.cap = cap;
        self.reservation = reservation;
        self
    }
    /// Promise each vCPU a wake-to-run bound (us) with a budget (per
    /// mille of one CPU), `crate::bound`.
    pub fn with_latency_bound(mut self, bound_us: u64, budget_permille: u32) -> Self {
        self.latency_bound_us = Some(bound_us);
        self.bound_budget = Some(budget_permille);
        self
    }
    /// The group's bound, if it has one (both keys set).
    pub fn latency_bound(&self) -> Option<crate::bound::LatencyBound> {
        Some(crate::bound::LatencyBound {
            bound: self.latency_bound_us?.saturating_mul(1000),
            budget_permille: self.bound_budget?,
        })
    }
    /// Restrict to the given CPUs.
    pub fn with_affinity(mut self, affinity: CpuSet) -> Self {
        self.affinity = Some(affinity);
        self
    }
    /// Charge each wake from a sleep this much CPU time before the burst.
    pub fn with_wake_cost(mut self, cost: Dist) -> Self {
        self.wake_cost = Some(cost);
        self
    }
    /// Charge each block this much CPU time after the burst's work.
    pub fn with_block_cost(mut self, cost: Dist) -> Self {
        self.block_cost = Some(cost);
        self
    }
    /// Set the sleep behaviour.
    pub fn with_sleep(mut self, sleep: Sleep) -> Self {
        self.sleep = sleep;
        self
    }
    /// Yield after each burst instead of sleeping.
    pub fn with_yield(mut self, on: bool) -> Self {
        self.yield_after_burst = on;
        self
    }
    /// Send messages after each burst.
    pub fn with_message(mut self, message: MessageSpec) -> Self {
        self.message = Some(message);
        self
    }
    /// Hold the VM-wide lock for this fraction of each burst.
    pub fn with_lock(mut self, hold_fraction: f64) -> Self {
        self.lock = Some(LockSpec { hold_fraction });
        self
    }
    /// Meet the VM's other barrier vCPUs after each burst.
    pub fn with_barrier(mut self, on: bool) -> Self {
        self.barrier = on;
        self
    }
    /// Take part in the VM's shootdown round trips in `role`.
    pub fn with_shootdown(mut self, role: ShootdownRole) -> Self {
        self.shootdown = Some(role);
        self
    }
    /// Take part in the VM's request server in `role`.
    pub fn with_server(mut self, role: ServerRole) -> Self {
        self.server = Some(role);
        self
    }
    /// Whether the group sleeps, yields, is split into VMs or meets its
    /// VM's barrier or lock: what a VM-wide exchange (a shootdown, a
    /// request server), which drives its vCPUs itself, cannot be
    /// combined with.
    fn has_a_pattern_of_its_own(&self) -> bool {
        self.separate_vms
            || self.sleep != Sleep::Never
            || self.yield_after_burst
            || self.barrier
            || self.lock.is_some()
    }
    /// Whether the group is runnable at time 0.
    pub fn with_start_awake(mut self, on: bool) -> Self {
        self.start_awake = on;
        self
    }
}

/// A whole simulation input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    /// Scenario name (reports).
    #[serde(default)]
    pub name: String,
    /// Free text shown by the CLI.
    #[serde(default)]
    pub description: String,
    /// Synthetic topology spec, e.g. "2x22x2" (see [`crate::Topology::from_spec`]).
    pub topology: String,
    /// Seed of the simulator's random stream (ChaCha8).
    #[serde(default)]
    pub seed: u64,
    /// Simulated duration in milliseconds.
    pub duration_ms: u64,
    /// The simulator's own metrics (throughput, wake latency, per-CPU
    /// shares) ignore the first `warmup_ms`; the policy snapshot does not.
    #[serde(default)]
    pub warmup_ms: u64,
    /// Delay from a kicking wake decision until the target CPU calls
    /// `schedule` (IPI + exit), in microseconds (default 2).
    #[serde(default = "default_kick_latency")]
    pub kick_latency_us: f64,
    /// Model the engine's spin watch (`vcpu_engine::spin_watch`, relaxed
    /// co-scheduling under the `threads` dispatch) for the VMs whose
    /// groups set `coschedule = "relaxed"`: a vCPU that leaves its CPU
    /// runnable outside a spin wait makes its running siblings look
    /// (after `kick_latency_us`), a vCPU dispatched while such a sibling
    /// waits parked looks 100 us in, and a look that finds the vCPU
    /// spinning asks `yield_to` for that sibling. Looks cost nothing here.
    #[serde(default)]
    pub spin_watch: bool,
    /// How the VMM carries the policy's decisions out: `"policy"` (the
    /// default: every wake goes through the policy, as under Pacer's
    /// `threads`) or `"ranked"` (Pacer's default dispatch: the hypervisor
    /// wakes a halted vCPU at a real-time rank, preempting the CPU's
    /// owner, and the policy hears of it at the agent's looks; see the
    /// simulator's `ranked.rs`). The eevdf policy, the host kernel's own
    /// model, is left as it is.
    #[serde(default)]
    pub dispatch: SimDispatch,
    /// Under `ranked`: the agent's look period in microseconds (the
    /// engine's `host.kvm_poll_us`, default 5000).
    #[serde(default = "default_agent_look")]
    pub agent_look_us: f64,
    /// Under `ranked`: the host kernel's tick in microseconds (4000: HZ =
    /// 250), at which it takes turns between the threads that share a CPU
    /// (a co-scheduled VM wider than its CPUs, `sibling_share.rs`).
    #[serde(default = "default_host_tick")]
    pub host_tick_us: f64,
    /// Scheduler configuration.
    #[serde(default)]
    pub sched: SchedConfig,
    /// The vCPU groups.
    #[serde(default, rename = "group")]
    pub groups: Vec<GroupSpec>,
    /// Changes made while it runs (CPUs out of service, mode, affinity,
    /// class), in any order.
    #[serde(default, rename = "change", skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<ChangeSpec>,
}

fn default_kick_latency() -> f64 {
    2.0
}

fn default_agent_look() -> f64 {
    5000.0
}

fn default_host_tick() -> f64 {
    4000.0
}

/// How the simulated VMM carries the policy's decisions out
/// ([`Workload::dispatch`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SimDispatch {
    /// Every wake goes through the policy.
    #[default]
    Policy,
    /// Pacer's `ranked`: the hypervisor wakes halted vCPUs by itself.
    Ranked,
}

/// Errors of reading or validating a workload, or of running it.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The TOML text did not parse or did not match the schema.
    #[error("workload parse error: {0}")]
    Parse(#[from] toml::de::Error),
    /// A file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// The workload is inconsistent (names, CPU lists, fractions, ...).
    #[error("invalid workload: {0}")]
    Invalid(String),
    /// The scheduler refused an operation.
    #[error("scheduler error: {0}")]
    Sched(#[from] crate::SchedError),
}

impl Workload {
    /// The scheduler's configuration as the VMM gives it under this
    /// workload's dispatch (`vcpu_engine::effective_tunables`): sibling
    /// gathering only under `ranked`, where queued siblings share the
    /// CPUs their VM owns.
    pub fn sched_config(&self) -> SchedConfig {
        let mut c = self.sched.clone();
        if self.dispatch != SimDispatch::Ranked {
            c.tunables.gather_siblings = false;
        }
        c
    }

    /// An empty workload on `topology` running for `duration_ms`.
    pub fn new(name: &str, topology: &str, duration_ms: u64) -> Workload {
        Workload {
            name: name.to_string(),
            description: String::new(),
            topology: topology.to_string(),
            seed: 0,
            duration_ms,
            warmup_ms: 0,
            kick_latency_us: default_kick_latency(),
            spin_watch: false,
            dispatch: SimDispatch::Policy,
            agent_look_us: default_agent_look(),
            host_tick_us: default_host_tick(),
            sched: SchedConfig::default(),
            groups: Vec::new(),
            changes: Vec::new(),
        }
    }
    /// Add a group.
    pub fn group(mut self, g: GroupSpec) -> Self {
        self.groups.push(g);
        self
    }
    /// Add a change made while it runs.
    pub fn change(mut self, c: ChangeSpec) -> Self {
        self.changes.push(c);
        self
    }
    /// Set the seed.
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }
    /// Set the scheduler configuration.
    pub fn with_sched(mut self, sched: SchedConfig) -> Self {
        self.sched = sched;
        self
    }
    /// Set the kick latency (us).
    pub fn with_kick_latency_us(mut self, us: f64) -> Self {
        self.kick_latency_us = us;
        self
    }
    /// Set the warm-up prefix.
    pub fn with_warmup_ms(mut self, warmup_ms: u64) -> Self {
        self.warmup_ms = warmup_ms;
        self
    }

    /// Parse TOML text and validate it.
    pub fn from_toml(text: &str) -> Result<Workload, SimError> {
        let mut w: Workload = toml::from_str(text)?;
        w.normalise();
        w.validate()?;
        Ok(w)
    }

    /// Read and parse a TOML file.
    pub fn from_file(path: impl AsRef<std::path::Path>) -> Result<Workload, SimError> {
        let p = path.as_ref();
        let text = std::fs::read_to_string(p).map_err(|source| SimError::Io {
            path: p.display().to_string(),
            source,
        })?;
        Workload::from_toml(&text)
    }

    /// Serialise to TOML.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).unwrap_or_default()
    }

    /// Multiply every group's count by `factor` (used to grow a scenario
    /// with the machine, e.g. hackbench groups per CPU).
    pub fn scale_groups(mut self, factor: u32) -> Self {
        for g in &mut self.groups {
            g.count *= factor;
        }
        self
    }

    /// The admission rule (`crate::bound::admit`) over every bounded vCPU,
    /// the CPUs any of them may use, and the kick latency as the cost of
    /// reaching a CPU. The simulator runs refused layouts too (to show
    /// what the rule prevents); a caller that wants the promise asks this.
    pub fn bound_admission(&self) -> Result<(), crate::bound::AdmissionError> {
        let topo = crate::Topology::from_spec(&self.topology).ok();
        let mut cpus = CpuSet::new();
        let mut bounded = Vec::new();
        for g in &self.groups {
            if let Some(b) = g.latency_bound() {
                bounded.extend((0..g.count).map(|_| b));
                let all = topo.as_ref().map(|t| t.all_cpus()).unwrap_or_default();
                let may = g
                    .affinity
                    .as_ref()
                    .map_or(all.clone(), |a| a.intersection(&all));
                for c in may.iter() {
                    // In range: it came from the topology's own set.
                    let _ = cpus.insert(c);
                }
            }
        }
        let kick = (self.kick_latency_us * 1000.0).round() as Nanos;
        crate::bound::admit(&bounded, cpus.len(), kick)
    }

    /// Total number of vCPUs.
    pub fn num_vcpus(&self) -> usize {
        self.groups.iter().map(|g| g.count as usize).sum()
    }

    fn normalise(&mut self) {
        for (i, g) in self.groups.iter_mut().enumerate() {
            if g.name.is_empty() {
                g.name = format!("g{i}");
            }
        }
    }

    /// Check names, message targets, fractions and distributions.
    pub fn validate(&self) -> Result<(), SimError> {
        let bad = |m: String| Err(SimError::Invalid(m));
        if self.duration_ms == 0 {
            return bad("duration_ms must be > 0".into());
        }
        if self.warmup_ms >= self.duration_ms {
            return bad("warmup_ms must be below duration_ms".into());
        }
        if !(self.kick_latency_us >= 0.0 && self.kick_latency_us.is_finite()) {
            return bad("kick_latency_us must be a finite number >= 0".into());
        }
        if !(self.agent_look_us >= 1.0 && self.agent_look_us.is_finite()) {
            return bad("agent_look_us must be a finite number >= 1".into());
        }
        if !(self.host_tick_us >= 1.0 && self.host_tick_us.is_finite()) {
            return bad("host_tick_us must be a finite number >= 1".into());
        }
        if self.dispatch == SimDispatch::Ranked && self.spin_watch {
            return bad(
                "spin_watch models the engine's spin watch, which runs under its `threads` \
                 dispatch only: it cannot be set with dispatch = \"ranked\""
                    .into(),
            );
        }
        let total = self.num_vcpus();
        for (i, g) in self.groups.iter().enumerate() {
            let name = if g.name.is_empty() {
                format!("g{i}")
            } else {
                g.name.clone()
            };
            if self
                .groups
                .iter()
                .enumerate()
                .any(|(j, o)| j != i && !o.name.is_empty() && o.name == name)
            {
                return bad(format!("group name {name:?} is used twice"));
            }
            g.burst
                .validate()
                .map_err(|e| SimError::Invalid(format!("group {name}: burst: {e}")))?;
            if let Sleep::For(d) = &g.sleep {
                d.validate()
                    .map_err(|e| SimError::Invalid(format!("group {name}: sleep: {e}")))?;
            }
            for (what, d) in [("wake_cost", &g.wake_cost), ("block_cost", &g.block_cost)] {
                if let Some(d) = d {
                    d.validate()
                        .map_err(|e| SimError::Invalid(format!("group {name}: {what}: {e}")))?;
                }
            }
            if let Some(other) = self.groups.iter().find(|o| {
                o.vm == g.vm
                    && !o.separate_vms
                    && !g.separate_vms
                    && o.coschedule.unwrap_or_default() != g.coschedule.unwrap_or_default()
            }) {
                return bad(format!(
                    "group {name}: coschedule differs from group {:?} of the same VM {}",
                    other.name, g.vm
                ));
            }
            if g.separate_vms && g.lock.is_some() {
                return bad(format!(
                    "group {name}: a VM-wide lock needs one VM (separate_vms is set)"
                ));
            }
            if g.barrier && (g.separate_vms || g.sleep != Sleep::Never || g.yield_after_burst) {
                return bad(format!(
                    "group {name}: a barrier needs one VM of vCPUs that never sleep or yield \
                     (separate_vms, sleep and yield must be unset)"
                ));
            }
            if let Some(role) = g.shootdown {
                self.validate_shootdown(&name, g, role)?;
            }
            if g.server.is_some() {
                self.validate_server(&name, g)?;
            }
            if let Some(l) = &g.lock {
                if !(l.hold_fraction > 0.0 && l.hold_fraction <= 1.0) {
                    return bad(format!(
                        "group {name}: lock.hold_fraction must be in (0, 1]"
                    ));
                }
            }
            match (g.latency_bound_us, g.bound_budget) {
                (None, None) => {}
                (Some(b), Some(p)) if b > 0 && (1..=crate::shares::PERMILLE).contains(&p) => {}
                (Some(_), Some(_)) => {
                    return bad(format!(
                        "group {name}: latency_bound_us must be > 0 and bound_budget 1..=1000"
                    ))
                }
                _ => {
                    return bad(format!(
                        "group {name}: latency_bound_us and bound_budget go together"
                    ))
                }
            }
            if let Some(a) = &g.affinity {
                if a.is_empty() {
                    return bad(format!("group {name}: empty affinity"));
                }
            }
            if let Some(m) = &g.message {
                match (&m.to_group, m.to_vcpu) {
                    (Some(t), None) => {
                        if !self.groups.iter().any(|o| &o.name == t) {
                            return bad(format!("group {name}: message to unknown group {t:?}"));
                        }
                    }
                    (None, Some(v)) => {
                        if v as usize >= total {
                            return bad(format!("group {name}: message to vCPU {v} of {total}"));
                        }
                    }
                    _ => {
                        return bad(format!(
                            "group {name}: message needs exactly one of to_group / to_vcpu"
                        ))
                    }
                }
            }
        }
        for c in &self.changes {
            let group = match c.kind()? {
                Change::Affinity { group, .. }
                | Change::Class { group, .. }
                | Change::Priority { group, .. } => Some(group),
                Change::CpuEnabled { .. } | Change::Mode(_) => None,
            };
            if let Some(g) = group.filter(|g| !self.groups.iter().any(|o| o.name == *g)) {
                return bad(format!("change at {} us: unknown group {g:?}", c.at_us));
            }
        }
        Ok(())
    }

    /// Check a server group: one VM, no other behaviour; one dispatcher vCPU
    /// per VM with a positive rate and at least one worker beside it.
    fn validate_server(&self, name: &str, g: &GroupSpec) -> Result<(), SimError> {
        let bad = |m: String| Err(SimError::Invalid(m));
        if g.has_a_pattern_of_its_own() || g.message.is_some() || g.shootdown.is_some() {
            return bad(format!(
                "group {name}: a server vCPU blocks when it has no work and does nothing else \
                 (separate_vms, sleep, yield, barrier, lock, message and shootdown must be unset)"
            ));
        }
        if let Some(ServerRole::Dispatcher { rate_per_s }) = g.server {
            if !(rate_per_s > 0.0 && rate_per_s.is_finite()) {
                return bad(format!(
                    "group {name}: server.rate_per_s must be a finite number > 0"
                ));
            }
        }
        let in_vm = |dispatcher: bool| {
            self.groups
                .iter()
                .filter(|o| {
                    o.vm == g.vm
                        && match o.server {
                            Some(ServerRole::Dispatcher { .. }) => dispatcher,
                            Some(ServerRole::Worker) => !dispatcher,
                            None => false,
                        }
                })
                .map(|o| o.count)
                .sum::<u32>()
        };
        if in_vm(true) != 1 {
            return bad(format!(
                "group {name}: VM {} needs exactly one server dispatcher vCPU, has {}",
                g.vm,
                in_vm(true)
            ));
        }
        if in_vm(false) == 0 {
            return bad(format!(
                "group {name}: a server needs a worker beside its dispatcher in VM {}",
                g.vm
            ));
        }
        Ok(())
    }

    /// A shootdown group: one VM of vCPUs that never sleep or yield and
    /// take no lock or barrier; one initiator vCPU per VM, with at least
    /// one responder beside it.
    fn validate_shootdown(
        &self,
        name: &str,
        g: &GroupSpec,
        role: ShootdownRole,
    ) -> Result<(), SimError> {
        let bad = |m: String| Err(SimError::Invalid(m));
        if g.has_a_pattern_of_its_own() {
            return bad(format!(
                "group {name}: a shootdown needs one VM of vCPUs that never sleep or yield \
                 (separate_vms, sleep, yield, barrier and lock must be unset)"
            ));
        }
        let in_vm = |r: ShootdownRole| {
            self.groups
                .iter()
                .filter(|o| o.vm == g.vm && o.shootdown == Some(r))
                .map(|o| o.count)
                .sum::<u32>()
        };
        if in_vm(ShootdownRole::Initiator) != 1 {
            return bad(format!(
                "group {name}: VM {} needs exactly one shootdown initiator vCPU, has {}",
                g.vm,
                in_vm(ShootdownRole::Initiator)
            ));
        }
        if role == ShootdownRole::Initiator && in_vm(ShootdownRole::Responder) == 0 {
            return bad(format!(
                "group {name}: a shootdown initiator needs a responder in VM {}",
                g.vm
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_rejects_unknown_keys() {
        let text = r#"
            topology = "1x2x1"
            duration_ms = 10
            [sched]
            policy = "global-rr"
            [[group]]
            name = "a"
            count = 2
            burst = { dist = "uniform", min_us = 30, max_us = 45 }
            sleep = { dist = "exponential", mean_us = 70 }
            message = { to_group = "b" }
            [[group]]
            name = "b"
            count = 1
            burst = { dist = "fixed", us = 5 }
            sleep = "until_message"
            start_awake = false
        "#;
        let w = Workload::from_toml(text).unwrap();
        assert_eq!(w.groups.len(), 2);
        assert_eq!(w.groups[1].sleep, Sleep::UntilMessage);
        assert!(matches!(
            w.groups[0].sleep,
            Sleep::For(Dist::Exponential { .. })
        ));
        let back = Workload::from_toml(&w.to_toml()).unwrap();
        assert_eq!(back, w);

        let typo = text.replace("count = 1", "count = 1\nprio = 3");
        assert!(Workload::from_toml(&typo).is_err());
        let bad_target = text.replace("to_group = \"b\"", "to_group = \"zz\"");
        assert!(Workload::from_toml(&bad_target).is_err());
    }

    #[test]
    fn a_shootdown_needs_one_initiator_and_responders_that_never_sleep() {
        let good = r#"
            topology = "1x2x1"
            duration_ms = 10
            [[group]]
            name = "init"
            count = 1
            burst = { dist = "fixed", us = 20 }
            shootdown = "initiator"
            [[group]]
            name = "resp"
            count = 2
            burst = { dist = "fixed", us = 20 }
            shootdown = "responder"
        "#;
        let w = Workload::from_toml(good).unwrap();
        assert_eq!(w.groups[0].shootdown, Some(ShootdownRole::Initiator));
        assert_eq!(w.groups[1].shootdown, Some(ShootdownRole::Responder));
        for (from, to, says) in [
            (
                "count = 1",
                "count = 2",
                "group init: VM 0 needs exactly one shootdown initiator vCPU, has 2",
            ),
            (
                "shootdown = \"responder\"",
                "",
                "group init: a shootdown initiator needs a responder",
            ),
            (
                "shootdown = \"initiator\"",
                "",
                "group resp: VM 0 needs exactly one shootdown initiator vCPU, has 0",
            ),
            (
                "shootdown = \"responder\"",
                "shootdown = \"responder\"\nsleep = \"until_message\"",
                "group resp: a shootdown needs one VM",
            ),
            (
                "shootdown = \"initiator\"",
                "shootdown = \"initiator\"\nbarrier = true",
                "group init: a shootdown needs one VM",
            ),
        ] {
            let e = Workload::from_toml(&good.replacen(from, to, 1)).unwrap_err();
            assert!(e.to_string().contains(says), "{from} -> {to}: {e}");
        }
    }

    #[test]
    fn a_barrier_needs_one_vm_of_vcpus_that_never_sleep() {
        let text = r#"
            topology = "1x2x1"
            duration_ms = 1
            [[group]]
            name = "bar"
            count = 2
            burst = { dist = "fixed", us = 5 }
            barrier = true
        "#;
        let w = Workload::from_toml(text).unwrap();
        assert!(w.groups[0].barrier);
        assert_eq!(Workload::from_toml(&w.to_toml()).unwrap(), w);
        for bad in [
            "barrier = true\nsleep = \"until_message\"",
            "barrier = true\nyield = true",
            "barrier = true\nseparate_vms = true",
        ] {
            let e = Workload::from_toml(&text.replace("barrier = true", bad)).unwrap_err();
            assert!(
                e.to_string().contains("group bar: a barrier needs one VM"),
                "{e}"
            );
        }
    }

    #[test]
    fn zero_sleep_is_a_hog() {
        let text = r#"
            topology = "1x1x1"
            duration_ms = 1
            [[group]]
            count = 1
            burst = { dist = "fixed", us = 5 }
            sleep = { dist = "fixed", us = 0 }
        "#;
        let w = Workload::from_toml(text).unwrap();
        assert_eq!(w.groups[0].sleep, Sleep::Never);
        assert_eq!(w.groups[0].name, "g0");
    }
}
