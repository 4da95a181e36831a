//! Where entities run: the lock-free view of every CPU and core, the idle
//! bitmaps, the bounded idle search, core and CPU choice and stealing
//! (Haiku's `scheduler_cpu`, `choose_core_and_cpu` and the CPU/core heaps,
//! with Linux's bounded `select_idle_sibling` idea).
//!
//! CPU state (running entity, its effective priority, its VM) and core
//! state (queued count, load, SMT-isolation occupancy) are atomics so that
//! placement and preemption decisions never take a lock. Each LLC has a
//! bitmap of *available* idle CPUs (idle and not yet claimed by a waker)
//! and one of fully idle cores. A waker claims an idle CPU by clearing its
//! bit, so two wakers never send two entities to the same idle CPU.
//!
//! The idle search visits LLCs in locality order from the origin CPU
//! (previous CPU of the entity) and examines at most
//! `idle_search_candidates_per_llc` bitmap words per LLC, starting at a
//! word rotated by the entity's own counts: its cost is flat as LLCs grow
//! (one word covers 64 CPUs, so the default bound is exact for LLCs up to
//! 1024 CPUs). Per-package counts of CPUs that are not available let a
//! search on a busy machine stop at once and skip full packages.
//!
//! Stealing is the mirror image: per-LLC bitmaps of non-empty core queues
//! and pinned queues, with a count per LLC, kept exact under the queues'
//! locks, so an idle CPU visits only queues that hold something.
//!
//! Nothing here is written per operation by every CPU: the bitmaps and
//! counts change on idle/busy and empty/non-empty transitions only, the
//! per-LLC light core (a balancing hint) at most once per core and load
//! epoch, and each CPU's and core's state sits on cache lines of its own.

use crate::entity::QueueRef;
use crate::load::CoreLoad;
use crate::run_queue::{QueueEntry, RunQueue};
use crate::tunables::Tunables;
use crate::{CoreId, CpuId, CpuSet, Distance, LlcId, Nanos, SchedClass, Topology, VmId};
use crossbeam_utils::CachePadded;
use parking_lot::{Mutex, MutexGuard};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// `CpuSlot::running` when the CPU runs nothing.
pub(crate) const NO_ENTITY: u32 = u32::MAX;
/// `CpuSlot::prio` when the CPU runs nothing (below every class).
pub(crate) const IDLE_PRIO: i32 = -1;
/// `CpuSlot::prio` of a CPU out of service: above every class, so no
/// placement prefers it and no waker preempts it.
pub(crate) const OUT_OF_SERVICE_PRIO: i32 = i32::MAX;

/// Lock-free view of one logical CPU plus its pinned queue.
#[derive(Debug)]
pub(crate) struct CpuSlot {
    /// Entity running, or `NO_ENTITY`.
    pub running: AtomicU32,
    /// Effective priority of the running entity, `IDLE_PRIO` if none.
    pub prio: AtomicI32,
    /// The running entity is interactive (see [`Candidate::interactive`]).
    pub interactive: AtomicBool,
    /// VM of the running entity (meaningful only while running).
    pub vm: AtomicU32,
    /// The running entity's recent share as its dispatch left it: a
    /// boosted waker does not preempt a runner owed more than itself
    /// ([`Machine::must_preempt`]).
    pub share: crate::share::RunnerShare,
    /// Pinned queue: entities that may run only here or on part of the core.
    pub pinned: Mutex<RunQueue>,
    /// Mirror of the pinned queue length, read without the lock.
    pub pinned_len: AtomicUsize,
    /// In service (`set_cpu_enabled`); out of service it runs nothing and
    /// nothing is placed on it.
    pub in_service: AtomicBool,
    /// Busy time of this CPU; summed over a core's CPUs it is Haiku's core
    /// active time, the clock of cache warmth (`Machine::core_active`).
    /// Written only by this CPU's `schedule` (under its accounting lock),
    /// so a plain load and store: no locked instruction per quantum end,
    /// where one counter per core took a `fetch_add` its SMT siblings
    /// contended for.
    pub active_time: AtomicU64,
}

/// Lock-free view of one core plus its run queue.
#[derive(Debug)]
pub(crate) struct CoreState {
    /// Queue of entities allowed on every CPU of the core.
    pub queue: Mutex<RunQueue>,
    /// Mirror of the queue length, read without the lock.
    pub queued: AtomicUsize,
    pub load: CoreLoad,
    /// SMT isolation: VM (high 32 bits) and number of CPUs running it.
    pub occupancy: AtomicU64,
    /// Rebalance memo: in load epoch (low 32 bits) a search from this core
    /// found its best other core at a load gap (high 32 bits, signed) too
    /// small for a move; see `calm_gap`.
    pub calm: AtomicU64,
    /// When an entity last rotated into or out of this core (`mode.rs`,
    /// `rotation_target`).
    pub rotated_at: AtomicU64,
    /// How many of its CPUs are in service (0: its queue is served by no
    /// CPU of its own, and placement skips it).
    pub in_service: AtomicU32,
}

/// Per-LLC bitmaps: available idle CPUs and fully idle cores (the idle
/// search), cores whose queue and CPUs whose pinned queue hold entries
/// (the steal search: an idle CPU looks only at non-empty queues).
#[derive(Debug)]
struct IdleMaps {
    cpu_words: Vec<Words>,
    core_words: Vec<Words>,
    /// Cores with a non-empty core queue (bit set and cleared under that
    /// queue's lock, so it is exact whenever the lock is free).
    queued_core_words: Vec<Words>,
    /// CPUs with a non-empty pinned queue (same rule).
    queued_pinned_words: Vec<Words>,
    /// Per LLC: how many of its core queues (low 32 bits) and pinned
    /// queues (high 32 bits) are non-empty, updated with the bits, so a
    /// search skips an LLC with nothing queued in one read.
    queued_counts: Vec<CachePadded<AtomicU64>>,
    /// (LLC, index inside the LLC) of each CPU and each core.
    cpu_pos: Vec<(usize, usize)>,
    core_pos: Vec<(usize, usize)>,
    /// Per package: number of CPUs that are not available-idle.
    package_busy: Vec<CachePadded<AtomicU32>>,
}

/// A bitmap whose words each have a cache line of their own: a word is
/// written by the CPUs it covers, and must not share a line with another
/// LLC's word or with read-mostly data.
type Words = Vec<CachePadded<AtomicU64>>;

fn bit_words(n: usize, all_set: bool) -> Words {
    (0..n.div_ceil(64).max(1))
        .map(|w| {
            let bits = if !all_set {
                0
            } else if (w + 1) * 64 <= n {
                u64::MAX
            } else {
                (1u64 << (n - w * 64)) - 1
            };
            CachePadded::new(AtomicU64::new(bits))
        })
        .collect()
}

fn test_bit(words: &[CachePadded<AtomicU64>], i: usize) -> bool {
    words[i / 64].load(Ordering::SeqCst) & (1 << (i % 64)) != 0
}

/// Everything placement needs: topology, CPU and core state, idle maps,
/// precomputed locality orders.
#[derive(Debug)]
pub(crate) struct Machine {
    pub topo: Topology,
    /// Per CPU and per core state, each on cache lines of its own (no
    /// false sharing between CPUs that schedule at the same time).
    pub cpus: Vec<CachePadded<CpuSlot>>,
    pub cores: Vec<CachePadded<CoreState>>,
    idle: IdleMaps,
    /// For each LLC, all LLCs nearest first (same LLC, same package, remote).
    llc_order: Vec<Vec<LlcId>>,
    /// For each core, all cores nearest first (same, same LLC, package, remote).
    core_order: Vec<Vec<CoreId>>,
    pub smt_isolation: bool,
    pub idle_core_search: AtomicBool,
    /// Bitmap words examined per LLC by the idle search.
    pub candidates_per_llc: usize,
    /// Cores examined when choosing the least loaded core.
    pub balance_candidates: usize,
    /// Tunables (load epochs and thresholds).
    pub tun: Tunables,
    /// Per LLC, its light core: a core of the LLC whose load was the lowest
    /// seen when it last rolled its epoch (Linux keeps per-LLC shared
    /// state; Haiku a heap of cores by load). Each core, when its epoch
    /// rolls, takes the place if its load is below the current holder's,
    /// so the slot is written at most once per core and epoch, never per
    /// operation. A hint: `least_loaded_core` compares live loads.
    llc_light: Vec<CachePadded<AtomicU32>>,
    /// Per CPU, the other CPUs of its core (its SMT siblings), read on
    /// every `schedule` for the foreign-VM statistic.
    siblings: Vec<Box<[CpuId]>>,
}

/// An entity's hard affinity as placement reads it. `all` (the set holds
/// every CPU of the machine, the common case) answers without reading the
/// set, which lives behind a pointer on cache lines of its own.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Allowed<'a> {
    pub set: &'a CpuSet,
    pub all: bool,
}

impl Allowed<'_> {
    pub fn contains(&self, cpu: CpuId) -> bool {
        self.all || self.set.contains(cpu)
    }
}

/// The facts about an entity that placement uses.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Candidate<'a> {
    pub affinity: Allowed<'a>,
    pub vm: VmId,
    pub class: SchedClass,
    pub effective: u8,
    /// Previous CPU, or the first allowed CPU for a new entity.
    pub origin: CpuId,
    pub prev: Option<CpuId>,
    /// Ran on the previous core within cache_expire of its active time.
    pub warm: bool,
    /// Load estimate, 0..=1000.
    pub load: u32,
    /// An interactive timeshare entity: bursty (load at most
    /// `tunables::BURSTY_LOAD`, FreeBSD ULE's interactive threads) or
    /// woken below its fair share (`share.rs`).
    pub interactive: bool,
    /// A bounded entity holding budget (`crate::bound`): it preempts any
    /// runner below the bounded level at once.
    pub bounded: bool,
    /// Its recent share and its weight in the share judgement if its E is
    /// the fair-share boost's (`share.rs`): such a waker does not preempt
    /// a runner owed more than itself.
    pub boosted_share: Option<(u32, u32)>,
    /// Time of the event being placed (load epochs of the cores read).
    pub now: Nanos,
    /// Rotating start of bounded searches, from the entity's own event
    /// counts (no shared cursor is written).
    pub rotor: usize,
    /// Woken by an entity of its VM: the LLC that one runs (or last ran)
    /// in, which may hold the data they share.
    pub waker_llc: Option<LlcId>,
}

impl Machine {
    /// Build the state for a topology (every CPU starts idle and available).
    pub fn new(
        topo: Topology,
        smt_isolation: bool,
        idle_core_search: bool,
        tun: Tunables,
    ) -> Machine {
        let cpus = topo
            .cpus
            .iter()
            .map(|_| {
                CachePadded::new(CpuSlot {
                    running: AtomicU32::new(NO_ENTITY),
                    prio: AtomicI32::new(IDLE_PRIO),
                    interactive: AtomicBool::new(false),
                    vm: AtomicU32::new(0),
                    share: Default::default(),
                    pinned: Mutex::new(RunQueue::default()),
                    pinned_len: AtomicUsize::new(0),
                    in_service: AtomicBool::new(true),
                    active_time: AtomicU64::new(0),
                })
            })
            .collect();
        let cores = topo
            .cores
            .iter()
            .map(|core| {
                CachePadded::new(CoreState {
                    queue: Mutex::new(RunQueue::default()),
                    queued: AtomicUsize::new(0),
                    load: CoreLoad::default(),
                    occupancy: AtomicU64::new(0),
                    calm: AtomicU64::new(u64::MAX),
                    rotated_at: AtomicU64::new(0),
                    in_service: AtomicU32::new(core.cpus.len() as u32),
                })
            })
            .collect();
        let idle = IdleMaps::new(&topo);
        let n_llcs = topo.llcs.len();
        let llc_order = topo
            .llcs
            .iter()
            .map(|l| llc_order_from(&topo, l.id))
            .collect();
        let core_order = topo
            .cores
            .iter()
            .map(|c| core_order_from(&topo, c.id))
            .collect();
        let siblings = topo
            .cpus
            .iter()
            .map(|c| {
                topo.cores[c.core.0 as usize]
                    .cpus
                    .iter()
                    .copied()
                    .filter(|s| *s != c.id)
                    .collect()
            })
            .collect();
        Machine {
            siblings,
            topo,
            cpus,
            cores,
            idle,
            llc_order,
            core_order,
            smt_isolation,
            idle_core_search: AtomicBool::new(idle_core_search),
            candidates_per_llc: tun.idle_search_candidates_per_llc.max(1) as usize,
            balance_candidates: tun.balance_candidates.max(2) as usize,
            tun,
            llc_light: (0..n_llcs)
                .map(|_| CachePadded::new(AtomicU32::new(u32::MAX)))
                .collect(),
        }
    }

    /// Core of a (valid) CPU.
    #[inline]
    pub fn core_of(&self, cpu: CpuId) -> CoreId {
        self.topo.cpus[cpu.0 as usize].core
    }

    /// The load accounting of a core.
    #[inline]
    pub fn load_of(&self, core: CoreId) -> &CoreLoad {
        &self.cores[core.0 as usize].load
    }

    /// The core whose CPUs a queue serves first.
    pub fn core_of_queue(&self, q: QueueRef) -> CoreId {
        match q {
            QueueRef::Core(c) => c,
            QueueRef::Pinned(cpu) => self.core_of(cpu),
        }
    }

    /// Whether `cpu` runs an entity of `vm` now (a hint read without a
    /// lock: the slot may change the moment after).
    #[inline]
    pub fn runs_vm(&self, cpu: CpuId, vm: VmId) -> bool {
        let slot = &self.cpus[cpu.0 as usize];
        slot.running.load(Ordering::Acquire) != NO_ENTITY && slot.vm.load(Ordering::Acquire) == vm.0
    }

    /// Whether `cpu` runs an entity of another VM than `vm` now.
    #[inline]
    pub fn runs_other_vm(&self, cpu: CpuId, vm: VmId) -> bool {
        let slot = &self.cpus[cpu.0 as usize];
        slot.running.load(Ordering::Acquire) != NO_ENTITY && slot.vm.load(Ordering::Acquire) != vm.0
    }

    /// Whether an SMT sibling of `cpu` runs an entity of another VM.
    #[inline]
    pub fn sibling_foreign(&self, cpu: CpuId, vm: VmId) -> bool {
        self.siblings[cpu.0 as usize].iter().any(|s| {
            let slot = &self.cpus[s.0 as usize];
            slot.running.load(Ordering::SeqCst) != NO_ENTITY
                && slot.vm.load(Ordering::SeqCst) != vm.0
        })
    }

    /// CPUs of a core.
    #[inline]
    pub fn core_cpus(&self, core: CoreId) -> &[CpuId] {
        &self.topo.cores[core.0 as usize].cpus
    }

    /// Haiku's core active time: the busy time of the core's CPUs.
    #[inline]
    pub fn core_active(&self, core: CoreId) -> Nanos {
        self.core_cpus(core)
            .iter()
            .map(|c| self.cpus[c.0 as usize].active_time.load(Ordering::Relaxed))
            .fold(0, Nanos::wrapping_add)
    }

    /// `cpu` was busy `ran` more: its share of the core active time, then
    /// the core's total. Only `cpu`'s own `schedule` calls this.
    #[inline]
    pub fn add_active(&self, cpu: CpuId, ran: Nanos) -> Nanos {
        let own = &self.cpus[cpu.0 as usize].active_time;
        let mine = own.load(Ordering::Relaxed).wrapping_add(ran);
        own.store(mine, Ordering::Relaxed);
        // `core_active`: this CPU's time and its siblings' (a wrapping
        // sum, in any order).
        self.siblings[cpu.0 as usize]
            .iter()
            .map(|s| self.cpus[s.0 as usize].active_time.load(Ordering::Relaxed))
            .fold(mine, Nanos::wrapping_add)
    }

    /// Whether the affinity covers every CPU of the core (may use its queue).
    pub fn covers_core(&self, affinity: Allowed, core: CoreId) -> bool {
        affinity.all || self.core_cpus(core).iter().all(|c| affinity.contains(*c))
    }

    /// The queue an entity placed on `cpu` goes to: the core queue if its
    /// affinity covers the whole core, else the pinned queue of `cpu`.
    pub fn queue_for(&self, affinity: Allowed, cpu: CpuId) -> QueueRef {
        let core = self.core_of(cpu);
        if self.covers_core(affinity, core) {
            QueueRef::Core(core)
        } else {
            QueueRef::Pinned(cpu)
        }
    }

    /// Cores nearest first from `core`.
    pub fn cores_near(&self, core: CoreId) -> &[CoreId] {
        &self.core_order[core.0 as usize]
    }

    /// Entities ready on a core: queued in its queue and pinned queues, plus running.
    #[inline]
    pub fn ready_on_core(&self, core: CoreId) -> usize {
        let c = &self.cores[core.0 as usize];
        let cpus = self.core_cpus(core);
        let mut n = c.queued.load(Ordering::Relaxed);
        for cpu in cpus {
            let s = &self.cpus[cpu.0 as usize];
            n += s.pinned_len.load(Ordering::Relaxed);
            n += usize::from(s.running.load(Ordering::Relaxed) != NO_ENTITY);
        }
        n
    }

    /// Core load per CPU at `now` (rolling the core's epoch first if it is
    /// over, so a core nobody schedules on does not keep stale sleepers).
    #[inline]
    pub fn core_load(&self, core: CoreId, now: Nanos) -> u32 {
        self.roll(core, now);
        self.cores[core.0 as usize]
            .load
            .per_cpu(self.core_cpus(core).len())
    }

    /// Roll the core's load epoch if it is over; a core whose epoch rolls
    /// offers itself as its LLC's light core.
    /// The check whether the epoch is over is inline (one load and a
    /// compare on every call); the roll itself is out of line.
    #[inline]
    pub fn roll(&self, core: CoreId, now: Nanos) {
        if self.cores[core.0 as usize].load.epoch_over(now, &self.tun) {
            self.roll_over(core, now);
        }
    }

    #[inline(never)]
    fn roll_over(&self, core: CoreId, now: Nanos) {
        let cpus = self.core_cpus(core).len();
        let load = &self.cores[core.0 as usize].load;
        if !load.maybe_roll(now, cpus, &self.tun) {
            return;
        }
        let llc = self.topo.cores[core.0 as usize].llc;
        let light = &self.llc_light[llc.0 as usize];
        let current = light.load(Ordering::Relaxed);
        if current == core.0 {
            return;
        }
        let lighter = match self.cores.get(current as usize) {
            Some(other) => {
                let other_cpus = self.core_cpus(CoreId(current)).len();
                load.per_cpu(cpus) < other.load.per_cpu(other_cpus)
            }
            None => true,
        };
        if lighter {
            light.store(core.0, Ordering::Relaxed);
        }
    }

    /// The gap (own load - best other's - load_difference) that the last
    /// least-loaded search from `core` found in the core's current load
    /// epoch, if one ran and found no move worth it. Core loads change by
    /// epochs, so within one the answer stands for entities at least as
    /// heavy; a new epoch forgets it.
    #[inline]
    pub fn calm_gap(&self, core: CoreId) -> Option<i64> {
        let c = &self.cores[core.0 as usize];
        let memo = c.calm.load(Ordering::Relaxed);
        (memo as u32 == c.load.epoch() as u32).then_some((memo >> 32) as u32 as i32 as i64)
    }

    /// When an entity last rotated into or out of `core`.
    #[inline]
    pub fn rotated_at(&self, core: CoreId) -> Nanos {
        self.cores[core.0 as usize]
            .rotated_at
            .load(Ordering::Relaxed)
    }

    /// An entity rotates from `from` to `to` at `now`.
    pub fn note_rotation(&self, from: CoreId, to: CoreId, now: Nanos) {
        for core in [from, to] {
            self.cores[core.0 as usize]
                .rotated_at
                .store(now, Ordering::Relaxed);
        }
    }

    /// Remember a search from `core` that found no move (see `calm_gap`).
    pub fn remember_calm(&self, core: CoreId, gap: i64) {
        let c = &self.cores[core.0 as usize];
        let gap = gap.clamp(i32::MIN as i64, i32::MAX as i64) as i32 as u32 as u64;
        let memo = (gap << 32) | (c.load.epoch() as u32 as u64);
        if c.calm.load(Ordering::Relaxed) != memo {
            c.calm.store(memo, Ordering::Relaxed);
        }
    }

    // ---- idle bitmaps ----

    /// Whether `cpu` is idle and unclaimed.
    pub fn is_available(&self, cpu: CpuId) -> bool {
        let (l, i) = self.idle.cpu_pos[cpu.0 as usize];
        test_bit(&self.idle.cpu_words[l], i)
    }

    /// The CPU is idle: publish it (SeqCst, paired with the waker's
    /// enqueue-then-search; see `HaikuScheduler::pick_next`).
    pub fn set_available(&self, cpu: CpuId) {
        let (l, i) = self.idle.cpu_pos[cpu.0 as usize];
        let old = self.idle.cpu_words[l][i / 64].fetch_or(1 << (i % 64), Ordering::SeqCst);
        if old & (1 << (i % 64)) == 0 {
            let pkg = self.topo.cpus[cpu.0 as usize].package.0 as usize;
            self.idle.package_busy[pkg].fetch_sub(1, Ordering::SeqCst);
        }
        let core = self.core_of(cpu);
        if self.core_cpus(core).iter().all(|c| self.is_available(*c)) {
            let (cl, ci) = self.idle.core_pos[core.0 as usize];
            self.idle.core_words[cl][ci / 64].fetch_or(1 << (ci % 64), Ordering::SeqCst);
        }
    }

    /// Take `cpu` out of the available set; true if this call did it (the
    /// caller then owns the duty to kick it, or is the CPU itself).
    #[inline]
    pub fn claim(&self, cpu: CpuId) -> bool {
        let (l, i) = self.idle.cpu_pos[cpu.0 as usize];
        let word = &self.idle.cpu_words[l][i / 64];
        // Look before writing: a busy CPU's `schedule` must not write the
        // word its LLC's CPUs share.
        if word.load(Ordering::SeqCst) & (1 << (i % 64)) == 0 {
            return false;
        }
        let old = word.fetch_and(!(1 << (i % 64)), Ordering::SeqCst);
        if old & (1 << (i % 64)) == 0 {
            return false;
        }
        let core = self.core_of(cpu);
        let (cl, ci) = self.idle.core_pos[core.0 as usize];
        self.idle.core_words[cl][ci / 64].fetch_and(!(1 << (ci % 64)), Ordering::SeqCst);
        let pkg = self.topo.cpus[cpu.0 as usize].package.0 as usize;
        self.idle.package_busy[pkg].fetch_add(1, Ordering::SeqCst);
        true
    }

    /// SMT isolation: may an entity of `vm` start on a CPU of `core` now?
    #[inline]
    pub fn compatible(&self, core: CoreId, vm: VmId) -> bool {
        if !self.smt_isolation {
            return true;
        }
        let occ = self.cores[core.0 as usize].occupancy.load(Ordering::SeqCst);
        occ & 0xffff_ffff == 0 || (occ >> 32) as u32 == vm.0
    }

    /// SMT isolation: register a CPU of `core` as running `vm`; fails if a
    /// sibling runs another VM.
    #[inline]
    pub fn occupy(&self, core: CoreId, vm: VmId) -> bool {
        if !self.smt_isolation {
            return true;
        }
        let occ = &self.cores[core.0 as usize].occupancy;
        let mut cur = occ.load(Ordering::SeqCst);
        loop {
            let count = cur & 0xffff_ffff;
            if count != 0 && (cur >> 32) as u32 != vm.0 {
                return false;
            }
            let new = ((vm.0 as u64) << 32) | (count + 1);
            match occ.compare_exchange(cur, new, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => return true,
                Err(v) => cur = v,
            }
        }
    }

    /// SMT isolation: a CPU of `core` stopped running an entity.
    #[inline]
    pub fn vacate(&self, core: CoreId) {
        if self.smt_isolation {
            let occ = &self.cores[core.0 as usize].occupancy;
            let _ = occ.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| {
                (v & 0xffff_ffff != 0).then(|| v - 1)
            });
        }
    }

    /// A CPU an entity may use right now if it is idle: allowed and (SMT
    /// isolation) its siblings run nothing or the same VM.
    fn usable(&self, cpu: CpuId, c: &Candidate) -> bool {
        c.affinity.contains(cpu) && self.compatible(self.core_of(cpu), c.vm)
    }

    /// Claim `cpu` if it is available and usable.
    pub fn try_claim(&self, cpu: CpuId, c: &Candidate) -> bool {
        self.usable(cpu, c) && self.is_available(cpu) && self.claim(cpu)
    }

    /// Bounded search for an available idle CPU, locality order from the
    /// origin: the origin itself, its SMT siblings, then LLC by LLC.
    pub fn find_idle_cpu(&self, c: &Candidate) -> Option<CpuId> {
        self.search_idle_cpu(c, |cpu| self.try_claim(cpu, c))
    }

    /// Same search without claiming, skipping `exclude` (advisory kicks
    /// from `schedule`: the CPU stays available, so a wake can still claim
    /// and kick it).
    pub fn peek_idle_cpu(&self, c: &Candidate, exclude: &[CpuId]) -> Option<CpuId> {
        self.search_idle_cpu(c, |cpu| {
            !exclude.contains(&cpu) && self.usable(cpu, c) && self.is_available(cpu)
        })
    }

    /// Whether the LLC's package has an available-idle CPU (else its
    /// bitmaps need no look).
    fn llc_may_have_available(&self, llc: LlcId) -> bool {
        let pkg = self.topo.llcs[llc.0 as usize].package;
        let busy = self.idle.package_busy[pkg.0 as usize].load(Ordering::SeqCst) as usize;
        busy < self.topo.packages[pkg.0 as usize].cpus.len()
    }

    /// Whether any CPU at all is available-idle (O(packages)).
    pub fn any_available(&self) -> bool {
        self.topo.packages.iter().any(|p| {
            (self.idle.package_busy[p.id.0 as usize].load(Ordering::SeqCst) as usize) < p.cpus.len()
        })
    }

    fn search_idle_cpu(&self, c: &Candidate, take: impl Fn(CpuId) -> bool) -> Option<CpuId> {
        // Nothing available anywhere (a busy machine): O(packages), no
        // bitmap read. Exact for the lost-wake-up protocol: an idler makes
        // itself available, package count included, before its fence.
        if !self.any_available() {
            return None;
        }
        if take(c.origin) {
            return Some(c.origin);
        }
        let core = self.core_of(c.origin);
        if let Some(s) = self.core_cpus(core).iter().copied().find(|s| take(*s)) {
            return Some(s);
        }
        let origin_llc = self.topo.cpus[c.origin.0 as usize].llc;
        for &llc in &self.llc_order[origin_llc.0 as usize] {
            if !self.llc_may_have_available(llc) {
                continue;
            }
            if let Some(cpu) = self.scan_llc_cpus(llc, c.rotor, &take) {
                return Some(cpu);
            }
        }
        None
    }

    fn scan_llc_cpus(
        &self,
        llc: LlcId,
        cursor: usize,
        take: &impl Fn(CpuId) -> bool,
    ) -> Option<CpuId> {
        let words = &self.idle.cpu_words[llc.0 as usize];
        let cpus = &self.topo.llcs[llc.0 as usize].cpus;
        find_set_bit(words, cursor, self.candidates_per_llc, |i| {
            Some(cpus[i]).filter(|cpu| take(*cpu))
        })
    }

    /// Bounded search for a fully idle core (all SMT siblings idle) with a
    /// CPU the entity may use; claims and returns that CPU. Skipped when the
    /// idle-core search is switched off.
    pub fn find_idle_core(&self, c: &Candidate) -> Option<CpuId> {
        if !self.idle_core_search.load(Ordering::Relaxed) || !self.any_available() {
            return None;
        }
        let origin_llc = self.topo.cpus[c.origin.0 as usize].llc;
        for &llc in &self.llc_order[origin_llc.0 as usize] {
            if !self.llc_may_have_available(llc) {
                continue;
            }
            if let Some(cpu) = self.scan_llc_cores(llc, c.rotor, c, |_| true) {
                return Some(cpu);
            }
        }
        None
    }

    fn scan_llc_cores(
        &self,
        llc: LlcId,
        cursor: usize,
        c: &Candidate,
        accept: impl Fn(CoreId) -> bool,
    ) -> Option<CpuId> {
        let words = &self.idle.core_words[llc.0 as usize];
        let cores = &self.topo.llcs[llc.0 as usize].cores;
        find_set_bit(words, cursor, self.candidates_per_llc, |i| {
            let core = cores[i];
            if !accept(core) || !self.core_fully_available(core) {
                return None;
            }
            self.core_cpus(core)
                .iter()
                .copied()
                .find(|s| self.try_claim(*s, c))
        })
    }

    /// The idle-core bit is a hint; this checks the CPUs themselves.
    fn core_fully_available(&self, core: CoreId) -> bool {
        self.core_cpus(core).iter().all(|s| self.is_available(*s))
    }

    /// Fully idle cores of an LLC (the population of its idle-core bitmap;
    /// a hint, as the bits are).
    fn idle_cores_in(&self, llc: LlcId) -> u32 {
        self.idle.core_words[llc.0 as usize]
            .iter()
            .map(|w| w.load(Ordering::Relaxed).count_ones())
            .sum()
    }

    /// LLC spreading (beyond Haiku, which has no level between core and
    /// package): the LLC with the most fully idle cores that the entity
    /// may use, the nearest to the origin among equals; claims a CPU of an
    /// idle core there. O(LLCs), on the cold-placement path only.
    pub fn find_idle_core_in_emptiest_llc(&self, c: &Candidate) -> Option<CpuId> {
        if self.topo.llcs.len() < 2
            || !self.idle_core_search.load(Ordering::Relaxed)
            || !self.any_available()
        {
            return None;
        }
        let origin_llc = self.topo.cpus[c.origin.0 as usize].llc;
        let mut best: Option<(u32, LlcId)> = None;
        for &llc in &self.llc_order[origin_llc.0 as usize] {
            if !self.llc_may_have_available(llc) {
                continue;
            }
            let usable = c.affinity.all
                || self.topo.llcs[llc.0 as usize]
                    .cpus
                    .iter()
                    .any(|x| c.affinity.contains(*x));
            let n = if usable { self.idle_cores_in(llc) } else { 0 };
            if n > best.map_or(0, |b| b.0) {
                best = Some((n, llc));
            }
        }
        let (_, llc) = best?;
        self.scan_llc_cores(llc, c.rotor, c, |_| true)
    }

    /// A fully idle core of `llc`, claimed (a waker's LLC).
    pub fn find_idle_core_in_llc(&self, llc: LlcId, c: &Candidate) -> Option<CpuId> {
        if !self.idle_core_search.load(Ordering::Relaxed) || !self.llc_may_have_available(llc) {
            return None;
        }
        self.scan_llc_cores(llc, c.rotor, c, |_| true)
    }

    /// The LLC of a CPU.
    pub fn llc_of(&self, cpu: CpuId) -> LlcId {
        self.topo.cpus[cpu.0 as usize].llc
    }

    /// A fully idle package other than the origin's (Haiku's idle package
    /// list: low latency wakes a new package before doubling up); claims a
    /// CPU of an idle core in it.
    pub fn find_idle_package(&self, c: &Candidate) -> Option<CpuId> {
        let origin_pkg = self.topo.cpus[c.origin.0 as usize].package;
        for pkg in &self.topo.packages {
            if pkg.id == origin_pkg
                || self.idle.package_busy[pkg.id.0 as usize].load(Ordering::SeqCst) != 0
            {
                continue;
            }
            for &llc in &pkg.llcs {
                if let Some(cpu) = self.scan_llc_cores(llc, 0, c, |_| true) {
                    return Some(cpu);
                }
            }
        }
        None
    }

    /// Claim an available idle CPU of one core, nearest to the origin first.
    pub fn find_idle_in_core(&self, core: CoreId, c: &Candidate) -> Option<CpuId> {
        let mut cpus: Vec<CpuId> = self.core_cpus(core).to_vec();
        cpus.sort_by_key(|s| self.topo.distance(c.origin, *s));
        cpus.into_iter().find(|s| self.try_claim(*s, c))
    }

    // ---- choosing without idle CPUs ----

    /// Cores the entity may run on: at least one CPU in service, and
    /// (unless it may use every CPU) an allowed CPU.
    #[inline]
    pub fn eligible(&self, core: CoreId, affinity: Allowed) -> bool {
        self.core_in_service(core)
            && (affinity.all || self.core_cpus(core).iter().any(|c| affinity.contains(*c)))
    }

    // ---- CPUs in and out of service ----

    /// Whether `cpu` is in service.
    #[inline]
    pub fn in_service(&self, cpu: CpuId) -> bool {
        self.cpus[cpu.0 as usize].in_service.load(Ordering::Acquire)
    }

    /// Whether any CPU of `core` is in service.
    #[inline]
    pub fn core_in_service(&self, core: CoreId) -> bool {
        self.cores[core.0 as usize]
            .in_service
            .load(Ordering::Acquire)
            > 0
    }

    /// Whether some CPU in service picks from queue `q`.
    pub fn serves(&self, q: QueueRef) -> bool {
        match q {
            QueueRef::Core(core) => self.core_in_service(core),
            QueueRef::Pinned(cpu) => self.in_service(cpu),
        }
    }

    /// Put `cpu` in or out of service; false if it already was. Out of
    /// service, it is claimed (never offered to wakers) and shows a
    /// priority above every class (never preferred, never preempted).
    /// SeqCst: a queue push that follows a drain of its queues must see it
    /// (see `HaikuScheduler::set_cpu_enabled`).
    pub fn set_in_service(&self, cpu: CpuId, on: bool) -> bool {
        let slot = &self.cpus[cpu.0 as usize];
        if slot.in_service.swap(on, Ordering::SeqCst) == on {
            return false;
        }
        let core = &self.cores[self.core_of(cpu).0 as usize];
        if on {
            core.in_service.fetch_add(1, Ordering::SeqCst);
            if slot.running.load(Ordering::Acquire) == NO_ENTITY {
                slot.prio.store(IDLE_PRIO, Ordering::Release);
            }
        } else {
            core.in_service.fetch_sub(1, Ordering::SeqCst);
            self.claim(cpu);
            slot.prio.store(OUT_OF_SERVICE_PRIO, Ordering::Release);
        }
        true
    }

    /// CPUs in service.
    pub fn cpus_in_service(&self) -> usize {
        self.cpus
            .iter()
            .filter(|c| c.in_service.load(Ordering::Acquire))
            .count()
    }

    /// Least loaded eligible core, cores outside the high-load set first,
    /// ties by locality from the origin (Haiku: gCoreLoadHeap minimum, then
    /// gCoreHighLoadHeap minimum). Examines at most `balance_candidates`
    /// cores: all of them on machines that small, else the origin core,
    /// the light core of its LLC and of one other LLC (`llc_light`), and
    /// rotating windows over the rest of its LLC and over the other cores
    /// for what the budget leaves, so the cost stays flat as the machine
    /// grows. The rotation (the entity's own counts) makes every core a
    /// candidate over successive calls.
    pub fn least_loaded_core(&self, c: &Candidate) -> Option<CoreId> {
        let origin_core = self.core_of(c.origin);
        let near = self.cores_near(origin_core);
        let key = |core: &CoreId| self.balance_key(*core, c.now);
        if near.len() <= self.balance_candidates {
            return self.lightest(near.iter().copied(), c);
        }
        // `near` is the origin, then the rest of its LLC, then the others.
        let llc = self.topo.cores[origin_core.0 as usize].llc;
        let in_llc = self.topo.llcs[llc.0 as usize]
            .cores
            .len()
            .clamp(1, near.len());
        let (local, remote) = (&near[1..in_llc], &near[in_llc..]);
        let cursor = c.rotor;
        let order = &self.llc_order[llc.0 as usize];
        let light = |l: LlcId| {
            let core = self.llc_light[l.0 as usize].load(Ordering::Relaxed);
            ((core as usize) < self.cores.len() && core != origin_core.0).then_some(CoreId(core))
        };
        let other_llc = (order.len() > 1).then(|| order[1 + cursor % (order.len() - 1)]);
        let hints = [light(llc), other_llc.and_then(light)];
        let budget = self
            .balance_candidates
            .saturating_sub(1 + hints.iter().flatten().count());
        let n_remote = remote.len().min(budget / 2);
        let n_local = local.len().min(budget - n_remote);
        let local = (0..n_local).map(|i| local[(cursor + i) % local.len()]);
        let remote = (0..n_remote).map(|i| remote[(cursor + i) % remote.len()]);
        let sample = std::iter::once(origin_core)
            .chain(hints.into_iter().flatten())
            .chain(local)
            .chain(remote);
        self.lightest(sample, c).or_else(|| {
            // The affinity missed the sample: the cores of its CPUs.
            c.affinity
                .set
                .iter()
                .filter(|s| (s.0 as usize) < self.cpus.len())
                .map(|s| self.core_of(s))
                .min_by_key(key)
        })
    }

    /// A core's rank for `least_loaded_core` at `now`: outside the
    /// high-load set first, then its load per CPU (the high flag read
    /// before the load, which may roll the core's epoch).
    #[inline]
    fn balance_key(&self, core: CoreId, now: Nanos) -> (bool, u32) {
        let high = self.cores[core.0 as usize].load.is_high();
        (high, self.core_load(core, now))
    }

    /// The eligible core of `cores` with the lowest `balance_key`, the
    /// first among equals (as `Iterator::min_by_key`), in one plain loop:
    /// this runs on every balance search.
    #[inline]
    fn lightest(&self, cores: impl Iterator<Item = CoreId>, c: &Candidate) -> Option<CoreId> {
        let mut best: Option<((bool, u32), CoreId)> = None;
        for core in cores {
            if !self.eligible(core, c.affinity) {
                continue;
            }
            let k = self.balance_key(core, c.now);
            if best.is_none_or(|(b, _)| k < b) {
                best = Some((k, core));
            }
        }
        best.map(|(_, core)| core)
    }

    /// Inside a core: the previous CPU if it runs lower priority than the
    /// entity, else the allowed CPU running the lowest priority, ties by
    /// locality from the origin.
    pub fn choose_cpu_in_core(&self, core: CoreId, c: &Candidate) -> Option<CpuId> {
        if let Some(prev) = c
            .prev
            .filter(|p| self.core_of(*p) == core && c.affinity.contains(*p))
        {
            if self.cpus[prev.0 as usize].prio.load(Ordering::SeqCst) < c.effective as i32 {
                return Some(prev);
            }
        }
        self.core_cpus(core)
            .iter()
            .copied()
            .filter(|s| c.affinity.contains(*s))
            .min_by_key(|s| {
                (
                    self.cpus[s.0 as usize].prio.load(Ordering::SeqCst),
                    self.topo.distance(c.origin, *s),
                )
            })
    }

    /// The allowed CPU running the lowest priority, nearest to the origin
    /// among equals (realtime placement; O(allowed CPUs), lock-free).
    pub fn lowest_priority_cpu(&self, c: &Candidate) -> Option<CpuId> {
        c.affinity
            .set
            .iter()
            .filter(|s| (s.0 as usize) < self.cpus.len())
            .min_by_key(|s| {
                let prio = self.cpus[s.0 as usize].prio.load(Ordering::SeqCst);
                (prio, self.topo.distance(c.origin, *s))
            })
    }

    /// Whether waker `c` must preempt what runs on `cpu`: realtime beats
    /// lower priorities (so every timeshare entity); timeshare preempts
    /// idle-class runners, a timeshare runner whose E is behind by `delta`
    /// (limited preemption, FreeBSD ULE), and - an interactive waker
    /// only - a CPU-bound timeshare runner of any lower E. Without the last rule a
    /// vCPU that wakes every millisecond waits out a hog's whole quantum
    /// whenever the hog's penalty cycle has it within `delta` of the
    /// waker: the latency a guest's timer sees would be the quantum. (At
    /// equal E the runner would win the pick anyway: it goes back to the
    /// front of its level.)
    ///
    /// A waker whose E is the fair-share boost's preempts by neither rule
    /// a runner owed more than itself (its share per weight below three
    /// quarters of the waker's, `share::owed_more`): the boost gives a
    /// waker the share it is owed, not the CPU of one owed more.
    /// Without this a request dispatcher that never sleeps while requests
    /// queue (so it is penalised as CPU-bound) is preempted by every
    /// worker it wakes, which is boosted, and the workers starve on the
    /// requests the dispatcher cannot hand out (the simulator's scenario
    /// 24: 0.72x the offered rate and a p99 of 0.5 s).
    pub fn must_preempt(&self, cpu: CpuId, c: &Candidate, delta: u8) -> bool {
        let slot = &self.cpus[cpu.0 as usize];
        let running = slot.prio.load(Ordering::SeqCst);
        if running == IDLE_PRIO {
            // Idle but not available: already claimed (kicked) or inside
            // `schedule`, which will look at the queues anyway.
            return false;
        }
        let effective = c.effective as i32;
        match c.class {
            SchedClass::Realtime => effective > running,
            SchedClass::Timeshare => {
                let owed_more = || {
                    c.boosted_share.is_some_and(|waker| {
                        slot.share
                            .at(c.now, self.tun.share_half_life)
                            .is_some_and(|runner| crate::share::owed_more(waker, runner))
                    })
                };
                running == 0
                    || (c.bounded && running < crate::bound::BOUNDED_PRIORITY as i32)
                    || (running < crate::tunables::PRIORITY_REALTIME_MIN as i32
                        && !owed_more()
                        && (effective >= running + delta as i32
                            || (c.interactive
                                && effective > running
                                && !slot.interactive.load(Ordering::Relaxed))))
            }
            SchedClass::Idle => false,
        }
    }

    // ---- queues ----

    /// Push an entry to a queue (back or front), keeping the length mirror.
    pub fn push(&self, q: QueueRef, entry: QueueEntry, front: bool) {
        let (lock, len) = self.queue(q);
        let mut g = lock.lock();
        if front {
            g.push_front(entry);
        } else {
            g.push_back(entry);
        }
        self.publish_len(q, len, g.len());
    }

    /// `push`, returning the queue still locked: its next pop is the
    /// caller's, in the same hold (see `HaikuScheduler::stop_running`).
    pub fn push_held(
        &self,
        q: QueueRef,
        entry: QueueEntry,
        front: bool,
    ) -> MutexGuard<'_, RunQueue> {
        let (lock, len) = self.queue(q);
        let mut g = lock.lock();
        if front {
            g.push_front(entry);
        } else {
            g.push_back(entry);
        }
        self.publish_len(q, len, g.len());
        g
    }

    /// Remove a specific entry; false if it is not there (being popped).
    pub fn remove(&self, q: QueueRef, id: crate::EntityId, seq: u64, level: u8) -> bool {
        let (lock, len) = self.queue(q);
        let mut g = lock.lock();
        let found = g.remove(id, seq, level);
        self.publish_len(q, len, g.len());
        found
    }

    /// Lock and length mirror of a queue.
    pub fn queue(&self, q: QueueRef) -> (&Mutex<RunQueue>, &AtomicUsize) {
        match q {
            QueueRef::Core(core) => {
                let c = &self.cores[core.0 as usize];
                (&c.queue, &c.queued)
            }
            QueueRef::Pinned(cpu) => {
                let s = &self.cpus[cpu.0 as usize];
                (&s.pinned, &s.pinned_len)
            }
        }
    }

    /// Take the first entry of a queue that `accept` takes.
    pub fn take_from(
        &self,
        q: QueueRef,
        accept: impl FnMut(&QueueEntry) -> bool,
    ) -> Option<QueueEntry> {
        self.take_from_within(q, usize::MAX, accept)
    }

    /// Take the first of the first `scan` entries of a queue, in pick
    /// order, that `accept` takes ([`RunQueue::take_first_within`]).
    pub fn take_from_within(
        &self,
        q: QueueRef,
        scan: usize,
        accept: impl FnMut(&QueueEntry) -> bool,
    ) -> Option<QueueEntry> {
        let (lock, len) = self.queue(q);
        if len.load(Ordering::SeqCst) == 0 {
            return None;
        }
        let mut g = lock.lock();
        let got = g.take_first_within(scan, accept);
        self.publish_len(q, len, g.len());
        got
    }

    /// Whether the work bitmaps show the queue as non-empty (invariant checks).
    pub fn marked_queued(&self, q: QueueRef) -> bool {
        match q {
            QueueRef::Core(core) => {
                let (l, i) = self.idle.core_pos[core.0 as usize];
                test_bit(&self.idle.queued_core_words[l], i)
            }
            QueueRef::Pinned(cpu) => {
                let (l, i) = self.idle.cpu_pos[cpu.0 as usize];
                test_bit(&self.idle.queued_pinned_words[l], i)
            }
        }
    }

    /// Update a queue's length mirror and its bit in the work bitmaps.
    /// Call with the queue's lock held: its transitions between empty and
    /// non-empty are then ordered, and so are the bit updates.
    #[inline]
    pub fn publish_len(&self, q: QueueRef, mirror: &AtomicUsize, len: usize) {
        // A release store: the lost-wake-up protocol needs order only on
        // the transitions, whose bit and count updates are SeqCst (out of
        // line: most pushes and pops do not empty or fill a queue).
        let old = mirror.load(Ordering::Relaxed);
        mirror.store(len, Ordering::Release);
        if (old == 0) != (len == 0) {
            self.publish_transition(q, len);
        }
    }

    /// A queue became empty (`len` 0) or non-empty: its bit in the work
    /// bitmaps and its LLC's count (`publish_len`, under the queue's lock).
    #[inline(never)]
    fn publish_transition(&self, q: QueueRef, len: usize) {
        let (words, l, i, one) = match q {
            QueueRef::Core(core) => {
                let (l, i) = self.idle.core_pos[core.0 as usize];
                (&self.idle.queued_core_words[l], l, i, 1)
            }
            QueueRef::Pinned(cpu) => {
                let (l, i) = self.idle.cpu_pos[cpu.0 as usize];
                (&self.idle.queued_pinned_words[l], l, i, 1 << 32)
            }
        };
        let count = &self.idle.queued_counts[l];
        if len == 0 {
            words[i / 64].fetch_and(!(1 << (i % 64)), Ordering::SeqCst);
            count.fetch_sub(one, Ordering::SeqCst);
        } else {
            words[i / 64].fetch_or(1 << (i % 64), Ordering::SeqCst);
            count.fetch_add(one, Ordering::SeqCst);
        }
    }

    /// Visit the non-empty queues `cpu` may steal from, nearest first,
    /// until `f` returns something: the pinned queues of its SMT siblings,
    /// then LLC by LLC in locality order the non-empty core queues (not its
    /// own) and the non-empty pinned queues, each in index order. Only
    /// queues the work bitmaps show as non-empty are visited, so the cost
    /// is O(LLCs x bitmap words + non-empty queues), not O(queues).
    pub fn visit_queued<T>(
        &self,
        cpu: CpuId,
        mut f: impl FnMut(QueueRef) -> Option<T>,
    ) -> Option<T> {
        let own = self.core_of(cpu);
        for s in self.core_cpus(own) {
            if *s != cpu && self.cpus[s.0 as usize].pinned_len.load(Ordering::SeqCst) > 0 {
                if let Some(found) = f(QueueRef::Pinned(*s)) {
                    return Some(found);
                }
            }
        }
        let own_llc = self.topo.cpus[cpu.0 as usize].llc;
        for &llc in &self.llc_order[own_llc.0 as usize] {
            let counts = self.idle.queued_counts[llc.0 as usize].load(Ordering::SeqCst);
            let info = &self.topo.llcs[llc.0 as usize];
            if counts & 0xffff_ffff != 0 {
                let cores = &self.idle.queued_core_words[llc.0 as usize];
                let found = find_set_bit(cores, 0, cores.len(), |i| {
                    let core = info.cores[i];
                    (core != own).then(|| f(QueueRef::Core(core))).flatten()
                });
                if found.is_some() {
                    return found;
                }
            }
            if counts >> 32 == 0 {
                continue;
            }
            let pinned = &self.idle.queued_pinned_words[llc.0 as usize];
            let found = find_set_bit(pinned, 0, pinned.len(), |i| {
                let s = info.cpus[i];
                (self.core_of(s) != own)
                    .then(|| f(QueueRef::Pinned(s)))
                    .flatten()
            });
            if found.is_some() {
                return found;
            }
        }
        None
    }

    /// Distance used for locality ordering and migration statistics.
    pub fn distance(&self, a: CpuId, b: CpuId) -> Distance {
        self.topo.distance(a, b)
    }
}

impl IdleMaps {
    fn new(topo: &Topology) -> IdleMaps {
        let mut cpu_pos = vec![(0, 0); topo.cpus.len()];
        let mut core_pos = vec![(0, 0); topo.cores.len()];
        for llc in &topo.llcs {
            for (i, cpu) in llc.cpus.iter().enumerate() {
                cpu_pos[cpu.0 as usize] = (llc.id.0 as usize, i);
            }
            for (i, core) in llc.cores.iter().enumerate() {
                core_pos[core.0 as usize] = (llc.id.0 as usize, i);
            }
        }
        IdleMaps {
            cpu_words: topo
                .llcs
                .iter()
                .map(|l| bit_words(l.cpus.len(), true))
                .collect(),
            core_words: topo
                .llcs
                .iter()
                .map(|l| bit_words(l.cores.len(), true))
                .collect(),
            queued_core_words: topo
                .llcs
                .iter()
                .map(|l| bit_words(l.cores.len(), false))
                .collect(),
            queued_pinned_words: topo
                .llcs
                .iter()
                .map(|l| bit_words(l.cpus.len(), false))
                .collect(),
            queued_counts: topo
                .llcs
                .iter()
                .map(|_| CachePadded::new(AtomicU64::new(0)))
                .collect(),
            cpu_pos,
            core_pos,
            package_busy: topo
                .packages
                .iter()
                .map(|_| CachePadded::new(AtomicU32::new(0)))
                .collect(),
        }
    }
}

/// LLCs nearest first: the LLC itself, the others of its package, the rest.
/// The bounded, rotating part of every idle search: visit the set bits of
/// at most `limit` words of `words`, starting at word `cursor` (mod len) and
/// wrapping, until `f` returns something for a bit index.
fn find_set_bit<T>(
    words: &[CachePadded<AtomicU64>],
    cursor: usize,
    limit: usize,
    mut f: impl FnMut(usize) -> Option<T>,
) -> Option<T> {
    for k in 0..words.len().min(limit) {
        let w = (cursor + k) % words.len();
        let mut bits = words[w].load(Ordering::SeqCst);
        while bits != 0 {
            let b = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            if let Some(found) = f(w * 64 + b) {
                return Some(found);
            }
        }
    }
    None
}

fn llc_order_from(topo: &Topology, from: LlcId) -> Vec<LlcId> {
    let pkg = topo.llcs[from.0 as usize].package;
    let mut order: Vec<LlcId> = topo.llcs.iter().map(|l| l.id).collect();
    order.sort_by_key(|l| (*l != from, topo.llcs[l.0 as usize].package != pkg, l.0));
    order
}

/// Cores nearest first by the distance of their first CPUs.
fn core_order_from(topo: &Topology, from: CoreId) -> Vec<CoreId> {
    let a = topo.cores[from.0 as usize].cpus[0];
    let mut order: Vec<CoreId> = topo.cores.iter().map(|c| c.id).collect();
    order.sort_by_key(|c| {
        (
            *c != from,
            topo.distance(a, topo.cores[c.0 as usize].cpus[0]),
            c.0,
        )
    });
    order
}
