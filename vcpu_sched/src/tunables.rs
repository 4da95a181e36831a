//! Every constant of the scheduler, named and documented in one place.
//!
//! Defaults are Haiku's (src/system/kernel/scheduler/, 2014) unless noted.
//! All of them are fields of [`Tunables`] so a VMM or the simulator can
//! change them; the `const`s are the defaults.

use crate::Nanos;
use serde::{Deserialize, Serialize};

const US: Nanos = 1_000;
const MS: Nanos = 1_000_000;

/// Number of priority levels (0..=120), Haiku's `THREAD_MAX_SET_PRIORITY + 1`.
pub const PRIORITY_LEVELS: usize = 121;
/// Idle class priority.
pub const PRIORITY_IDLE: u8 = 0;
/// Lowest active (timeshare) priority.
pub const PRIORITY_LOWEST_ACTIVE: u8 = 1;
/// The default priority of a VM's vCPUs.
pub const PRIORITY_NORMAL: u8 = 10;
/// Haiku's B_URGENT_DISPLAY_PRIORITY: at and above it the base quantum is not stretched.
pub const PRIORITY_URGENT: u8 = 20;
/// Highest timeshare priority.
pub const PRIORITY_MAX_TIMESHARE: u8 = 99;
/// Lowest realtime priority (Haiku's B_REAL_TIME_DISPLAY_PRIORITY).
pub const PRIORITY_REALTIME_MIN: u8 = 100;
/// Highest realtime priority.
pub const PRIORITY_REALTIME_MAX: u8 = 120;

/// Minimal priority a penalty may push an entity to: clamp(P / divisor, 1, cap).
pub const MINIMAL_PRIORITY_DIVISOR: u8 = 5;
/// Upper bound of the minimal priority (Haiku: 25).
pub const MINIMAL_PRIORITY_CAP: u8 = 25;

/// Load is expressed in 1/LOAD_SCALE of a CPU (Haiku's kMaxLoad = 1000).
pub const LOAD_SCALE: u32 = 1000;
/// Entity load estimates are updated at most this often (Haiku: 1 ms).
pub const LOAD_MEASURE_INTERVAL: Nanos = MS;
/// Length of a core's load epoch: entities that were ready during the
/// current epoch keep counting in the core load (likely to return).
pub const LOAD_EPOCH: Nanos = MS;
/// Below this a core counts as lightly loaded (Haiku kLowLoad).
pub const LOAD_LOW: u32 = 200;
/// Load a balanced core aims for (Haiku kTargetLoad).
pub const LOAD_TARGET: u32 = 550;
/// A core leaves the high-load set below this (Haiku kMediumLoad).
pub const LOAD_MEDIUM: u32 = 625;
/// A core enters the high-load set above this (Haiku kHighLoad).
pub const LOAD_HIGH: u32 = 700;
/// Haiku kVeryHighLoad: power saving stops packing onto a core above it.
pub const LOAD_VERY_HIGH: u32 = 850;
/// Rebalance moves an entity only if load(core) - load(other) - this >= load(entity) / CPUs.
pub const LOAD_DIFFERENCE: u32 = 200;

/// A core is cache-warm for an entity that ran there within this much of
/// the core's active time (Haiku kCacheExpire).
pub const CACHE_EXPIRE: Nanos = 100 * MS;

/// Idle-CPU search: CPUs examined per LLC before giving up on that LLC.
/// Bitmap words make one examination cover up to 64 CPUs, so the default
/// covers any LLC of up to 64 * this many CPUs exactly.
pub const IDLE_SEARCH_CANDIDATES_PER_LLC: u32 = 16;

/// Choosing the least loaded core (no idle CPU found) examines at most
/// this many cores: the origin core, a rotating window over the rest of
/// its LLC (half of them), and a rotating window over the other cores.
/// Machines with no more cores than this get an exact full scan; larger
/// ones a sample whose cost does not grow with the machine (Haiku keeps
/// heaps of cores by load instead; a bounded sample needs no shared
/// structure on the hot path). Four keeps the choice exact on an 8-CPU
/// host and the cost of a quantum end on 1024 CPUs that of 8 (16 cost
/// 2x there: a cache line per sampled core); successive calls rotate the
/// windows, and idle CPUs are found by the idle search, not by this.
pub const BALANCE_CANDIDATES: u32 = 4;

/// Rotation (beyond Haiku): when the entities ready on two cores do not
/// divide evenly (5 CPU-bound vCPUs on 2 CPUs: 3 + 2), load balancing
/// alone leaves them 3 + 2 for good, and those on the crowded core get a
/// third of a CPU against the others' half (Jain 0.96 over 5 hogs). A
/// quantum end on a crowded core moves the entity to a less crowded one
/// when the move leaves it no more crowded than the source was and the
/// entity has run on its core at least this long, so each entity takes
/// its turn on the crowded side (Linux gets there through its balancer's
/// repeated failures). Long enough that a move's cold cache is paid at
/// most once per this time per entity; 0 turns rotation off.
pub const ROTATE_AFTER: Nanos = 100 * MS;

/// Limited preemption for bursty wakers (FreeBSD ULE): a timeshare entity
/// that wakes with an effective priority at least this much above the
/// running timeshare entity preempts it. Realtime always preempts timeshare.
pub const WAKE_PREEMPT_PRIORITY_DELTA: u8 = 5;

/// Load estimate (1/1000 of a CPU) at or below which a timeshare entity is
/// *bursty* (interactive) and receives no penalties: FreeBSD ULE's
/// interactivity threshold (run / sleep <= 0.6) as run / (run + sleep).
/// Beyond Haiku: without it a vCPU that runs 30 us every 100 us collects
/// quantum ends (time used carries across blocks) and a penalty on every
/// early block, sinks to a hog's effective priority, and the limited wake
/// preemption can never let it in.
pub const BURSTY_LOAD: u32 = 375;

/// Half-life of an entity's recent CPU share (`share.rs`), the history
/// the fair-share wake boost reads. Beyond Haiku. Long enough to span
/// several slices of a contended core (the mode's maximum latency is
/// 5 ms), so one long wait or one long run does not swing it; short
/// enough that a vCPU starved for a few slices is boosted at its next
/// wake.
pub const SHARE_HALF_LIFE: Nanos = 8 * MS;

/// The fair-share wake boost is on: a timeshare entity woken below its
/// entitled share of its core is forgiven its penalty and may preempt a
/// CPU-bound runner of lower E (`share.rs`). Off: Haiku's rules alone
/// (plus the bursty rule).
pub const SHARE_BOOST: bool = true;

/// Sibling co-start is off by default: not yet measured on guests. On, a
/// CPU's pick prefers, among the entries of its queue's top level, one
/// whose VM has a vCPU running on another CPU of the LLC over the head
/// (relaxed co-scheduling: a laggard sibling runs next to the vCPU that
/// may be spinning for it; `policy/haiku/schedule.rs` `co_start_pick`).
pub const CO_START: bool = false;

/// Relaxed co-scheduling's skew bound (`cosched.rs`): a vCPU whose
/// progress is this far ahead of a parked sibling's is co-stopped at its
/// next dispatch, its CPU going to that laggard (a swap between
/// siblings, within Haiku's priorities). 0, the default, turns co-stop
/// off, leaving co-start and directed yields: in the simulator every
/// bound tried lost against them (scenario 19, barrier rounds/s with
/// co-start alone 17032; bound 100-200 us 13000, 0.5-3 ms 800: the swaps
/// serialise the siblings on one CPU where co-start runs them side by
/// side; scenario 20, lock bursts/s 31477 alone, 24217 at 0.1-0.5 ms,
/// 30751-31163 at 1-3 ms). The scheduler sees run time, not spinning,
/// so a bound can only stand in for "the leader is likely waiting";
/// ESXi's is 3 ms.
pub const COSTOP_SKEW: Nanos = 0;

/// Sibling gathering (`policy/haiku/gather.rs`): a co-scheduled VM with
/// more vCPUs than the CPUs it may use, none of which has halted for
/// 20 ms, has its vCPUs queued on as few cores as the ready counts allow.
/// A vCPU of it whose quantum ends on a core holding fewer of its
/// siblings than another with as many ready entities per CPU goes to
/// that core, and an entry of another VM waiting there comes back in its
/// place: a swap, so every core keeps its count of ready entities and
/// every entity its share. Such a VM then owns a CPU all the time, where
/// its queued siblings take turns beside the one the policy runs (the
/// engine's sibling sharing); spread over the cores it owned none for a
/// third of the time beside hogs, and each TLB-shootdown round trip in
/// flight then waited out their slices (docs/measurements/sync.md). The
/// VMM turns it off under every dispatch but `ranked`
/// (`vcpu_engine::effective_tunables`), where siblings do not share.
pub const GATHER_SIBLINGS: bool = true;

/// The length of a sibling turn (`coschedule = "turns"`,
/// `policy/haiku/cosched.rs`): in a co-scheduled VM with more vCPUs than
/// CPUs in its core set, while a sibling is parked a running sibling's
/// turn ends after this much and the CPU goes to the parked sibling, the
/// siblings sharing the one slice the first of them was given. A round of
/// a barrier or a shootdown's answer needs every sibling on a CPU in turn,
/// so such a VM advances once per change of sibling: the turn, not the
/// slice, sets its pace. 250 us: under `threads` the 3:1 barrier VM did
/// 944 rounds/s at 250 us against 669 at 500 us, the shootdown 509 round
/// trips/s against 279 (docs/measurements/sync.md). Under the engine's
/// `ranked` dispatch it is also the shortest interval between a relaxed
/// wide VM's looks for a spin (paced sibling turns, `vcpu_engine`'s
/// `sibling_share.rs`). 0 turns them off for every VM.
pub const SIBLING_TURN: Nanos = 250 * US;

/// Entity table capacity when the caller does not say.
pub const DEFAULT_MAX_ENTITIES: usize = 65_536;

/// The two scheduler modes of Haiku, spelled `low-latency` and
/// `power-saving` everywhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Spread load, short slices (Haiku scheduler_mode low_latency).
    #[default]
    LowLatency,
    /// Pack small loads onto one core, longer slices (Haiku power_saving).
    PowerSaving,
}

impl Mode {
    pub const ALL: [Mode; 2] = [Mode::LowLatency, Mode::PowerSaving];

    /// The one spelling of the mode's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::LowLatency => "low-latency",
            Mode::PowerSaving => "power-saving",
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Mode::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| format!("unknown mode {s:?} (expected low-latency or power-saving)"))
    }
}

/// Time-slice constants of one mode (Haiku's `scheduler_mode_operations`
/// data part).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuantumTable {
    /// Base quantum for E >= PRIORITY_URGENT.
    pub base_quantum: Nanos,
    /// No slice is shorter than this (and a slice with <= half of it left counts as ended).
    pub minimal_quantum: Nanos,
    /// Base quantum multipliers: index 0 at E = 10, index 1 at E = 0.
    pub quantum_multipliers: [u32; 2],
    /// Target latency: all ready entities of a core run within this.
    pub maximum_latency: Nanos,
}

impl QuantumTable {
    pub const LOW_LATENCY: QuantumTable = QuantumTable {
        base_quantum: 1000 * US,
        minimal_quantum: 100 * US,
        quantum_multipliers: [2, 5],
        maximum_latency: 5000 * US,
    };
    /// Low latency's slices when a wake-up does not wait for a slice to
    /// end: a dispatch that lets a woken vCPU preempt the CPU's owner at
    /// once (the engine's `ranked`) takes this table in place of
    /// [`QuantumTable::LOW_LATENCY`]. Slices then only say how CPU-bound
    /// vCPUs take turns, and each turn costs a switch out of a guest
    /// (tens of microseconds where KVM runs without VT-x): with 2 ms slices
    /// CPU-bound VMs two and three to a CPU kept 0.95-0.96x of the host
    /// kernel's work, with these 1.00x, wake latency unchanged.
    pub const PREEMPTIVE_WAKES: QuantumTable = QuantumTable {
        base_quantum: 2000 * US,
        minimal_quantum: 500 * US,
        quantum_multipliers: [3, 10],
        maximum_latency: 20000 * US,
    };
    pub const POWER_SAVING: QuantumTable = QuantumTable {
        base_quantum: 2000 * US,
        minimal_quantum: 500 * US,
        quantum_multipliers: [3, 10],
        maximum_latency: 20000 * US,
    };

    pub fn for_mode(mode: Mode) -> QuantumTable {
        match mode {
            Mode::LowLatency => Self::LOW_LATENCY,
            Mode::PowerSaving => Self::POWER_SAVING,
        }
    }
}

/// All tunables of the default (Haiku) policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Tunables {
    pub low_latency: QuantumTable,
    pub power_saving: QuantumTable,
    pub minimal_priority_divisor: u8,
    pub minimal_priority_cap: u8,
    pub load_measure_interval: Nanos,
    pub load_epoch: Nanos,
    pub load_low: u32,
    pub load_target: u32,
    pub load_medium: u32,
    pub load_high: u32,
    pub load_very_high: u32,
    pub load_difference: u32,
    pub cache_expire: Nanos,
    pub idle_search_candidates_per_llc: u32,
    pub balance_candidates: u32,
    pub rotate_after: Nanos,
    pub wake_preempt_priority_delta: u8,
    pub bursty_load: u32,
    pub share_half_life: Nanos,
    pub share_boost: bool,
    pub co_start: bool,
    pub costop_skew: Nanos,
    pub sibling_turn: Nanos,
    pub gather_siblings: bool,
}

impl Default for Tunables {
    fn default() -> Self {
        Tunables {
            low_latency: QuantumTable::LOW_LATENCY,
            power_saving: QuantumTable::POWER_SAVING,
            minimal_priority_divisor: MINIMAL_PRIORITY_DIVISOR,
            minimal_priority_cap: MINIMAL_PRIORITY_CAP,
            load_measure_interval: LOAD_MEASURE_INTERVAL,
            load_epoch: LOAD_EPOCH,
            load_low: LOAD_LOW,
            load_target: LOAD_TARGET,
            load_medium: LOAD_MEDIUM,
            load_high: LOAD_HIGH,
            load_very_high: LOAD_VERY_HIGH,
            load_difference: LOAD_DIFFERENCE,
            cache_expire: CACHE_EXPIRE,
            idle_search_candidates_per_llc: IDLE_SEARCH_CANDIDATES_PER_LLC,
            balance_candidates: BALANCE_CANDIDATES,
            rotate_after: ROTATE_AFTER,
            wake_preempt_priority_delta: WAKE_PREEMPT_PRIORITY_DELTA,
            bursty_load: BURSTY_LOAD,
            share_half_life: SHARE_HALF_LIFE,
            share_boost: SHARE_BOOST,
            co_start: CO_START,
            costop_skew: COSTOP_SKEW,
            sibling_turn: SIBLING_TURN,
            gather_siblings: GATHER_SIBLINGS,
        }
    }
}

impl Tunables {
    pub fn quantum_table(&self, mode: Mode) -> &QuantumTable {
        match mode {
            Mode::LowLatency => &self.low_latency,
            Mode::PowerSaving => &self.power_saving,
        }
    }
}
