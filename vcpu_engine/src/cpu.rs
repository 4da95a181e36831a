//! One scheduled host CPU: which vCPU owns it, which thread executes there
//! now (the one a kick signals), whether the scheduler asked it to
//! reschedule, and when the current turn's time slice ends.
//!
//! Every change of ownership happens under `owner`: the executor giving the
//! CPU back, and a waker dispatching onto an idle CPU. The executor runs
//! the guest without holding it.
//!
//! The slice's end lives here, not with the vCPU, because a wake on
//! another thread may bring it forward (`WakeDecision::shorten_quantum`:
//! a vCPU queued behind the runner changed the ready count its slice was
//! computed from). `quantum` holds the turn the end belongs to and the
//! quantum timer of the thread executing it; a cut re-arms that timer
//! from the waker's thread (timer_settime works on any timer of the
//! process), so the runner leaves KVM_RUN at the new end with no extra
//! exit before it. A cut that comes before the executor armed its timer
//! is armed by the executor, which always arms at the end held here. The
//! mutex orders the three, so a cut never re-arms the timer of a thread
//! that has moved on; a cut naming an older turn is ignored. The CPU
//! that picks holds it across its `schedule` call (after `owner`), so a
//! cut the scheduler makes for the turn it just dispatched waits for that
//! turn to begin here instead of missing it. Otherwise it is held across
//! one timer_settime at most, and no wake or kick is made under it.

use super::clock::QuantumTimer;
use super::vcpu_state::EngineVcpu;
use crate::host_cpus::HostCpu;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use vcpu_sched::{CpuId, EntityId, QuantumCut};

/// The quantum of a CPU's current turn (see [`CpuSlot::lock_turn`]).
#[derive(Default)]
pub struct TurnQuantum {
    /// The dispatched entity and the `now` of the `schedule` call that
    /// dispatched it (None while idle).
    turn: Option<(EntityId, u64)>,
    /// The executor's timer, while it runs the turn.
    timer: Option<Arc<QuantumTimer>>,
}

/// A scheduled host CPU.
pub struct CpuSlot {
    pub id: CpuId,
    pub host: HostCpu,
    /// The dispatched vCPU (None: idle).
    owner: Mutex<Option<Arc<EngineVcpu>>>,
    /// Signalled when an idle CPU is kicked (a worker waits here).
    idle: Condvar,
    /// The scheduler asked this CPU to call `schedule` (a wake that may
    /// preempt, or work for an idle CPU).
    pub kick_pending: AtomicBool,
    /// Kernel thread id of the thread executing on this CPU (0: none).
    pub executor: AtomicI32,
    /// The executor is in KVM_RUN, or past its last look before entering
    /// it: only then does a kick or a notification need a signal. Set by
    /// [`CpuSlot::try_enter`], cleared by [`CpuSlot::left_guest`].
    in_guest: AtomicBool,
    /// Something was posted for the running vCPU while its executor was
    /// out of the guest: it looks again before it enters.
    look_again: AtomicBool,
    /// When this CPU, idle, was last given work by a kick (workers
    /// dispatch; stored under `owner`): where its worker's block ended,
    /// for halt polling's window.
    pub kicked_idle_at: AtomicU64,
    quantum: Mutex<TurnQuantum>,
    /// End of the current turn's slice (CLOCK_MONOTONIC ns), read before
    /// every entry; written under `quantum`.
    quantum_end: AtomicU64,
    /// The length of the current turn's slice as granted (cut by wakes,
    /// never lengthened): the CPU time the ranked dispatch lets its owner
    /// use, however long it takes (`set_quantum_end`).
    granted: AtomicU64,
    /// The VM of the dispatched vCPU, as its engine index + 1 (0: idle;
    /// ranked dispatch: where a sharing VM's queued siblings run).
    pub(crate) owner_vm: AtomicUsize,
    /// Queued siblings of the owner ran beside it in this turn (ranked
    /// dispatch): the turn's wall time is the VM's.
    pub(crate) shared_turn: AtomicBool,
}

impl CpuSlot {
    pub fn new(id: CpuId, host: HostCpu) -> CpuSlot {
        CpuSlot {
            id,
            host,
            owner: Mutex::new(None),
            idle: Condvar::new(),
            kick_pending: AtomicBool::new(false),
            executor: AtomicI32::new(0),
            in_guest: AtomicBool::new(false),
            look_again: AtomicBool::new(false),
            kicked_idle_at: AtomicU64::new(0),
            quantum: Mutex::new(TurnQuantum::default()),
            quantum_end: AtomicU64::new(0),
            granted: AtomicU64::new(0),
            owner_vm: AtomicUsize::new(0),
            shared_turn: AtomicBool::new(false),
        }
    }

    fn lock_quantum(&self) -> MutexGuard<'_, TurnQuantum> {
        self.quantum.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Hold the turn while the scheduler picks the next one and until
    /// [`CpuSlot::begin_turn`]: a cut the scheduler decides for the new
    /// turn meanwhile waits, then finds it (it would not match the old
    /// turn). Taken under `owner`; no scheduler lock is held while taking
    /// it anywhere else.
    pub fn lock_turn(&self) -> MutexGuard<'_, TurnQuantum> {
        self.lock_quantum()
    }

    /// A turn begins: `entity`, dispatched at `dispatched_at`, runs until
    /// `end`; `None`: the CPU idles. Called by whoever dispatched (under
    /// `owner` and [`CpuSlot::lock_turn`]), before the executor arms its
    /// timer.
    pub fn begin_turn(&self, q: &mut TurnQuantum, turn: Option<(EntityId, u64)>, end: u64) {
        self.granted.store(
            turn.map_or(0, |(_, at)| end.saturating_sub(at)),
            Ordering::Release,
        );
        q.turn = turn;
        q.timer = None;
        self.quantum_end.store(end, Ordering::Release);
    }

    /// [`CpuSlot::set_quantum_end`] for a caller holding the turn
    /// ([`CpuSlot::lock_turn`]).
    pub fn set_quantum_end_locked(&self, _q: &mut TurnQuantum, end: u64) {
        self.quantum_end.store(end, Ordering::Release);
    }

    /// The current turn's slice as granted (see `granted`).
    pub fn granted(&self) -> u64 {
        self.granted.load(Ordering::Acquire)
    }

    /// End of the current turn's slice.
    pub fn quantum_end(&self) -> u64 {
        self.quantum_end.load(Ordering::Acquire)
    }

    /// The executor of the current turn arms its `timer` at the turn's end
    /// (cut or not) and leaves it to cuts until [`CpuSlot::disarm_turn`].
    pub fn arm_turn(&self, timer: &Arc<QuantumTimer>) {
        let mut q = self.lock_quantum();
        timer.arm(self.quantum_end.load(Ordering::Acquire));
        q.timer = Some(timer.clone());
    }

    /// [`CpuSlot::arm_turn`] for a caller holding the turn
    /// ([`CpuSlot::lock_turn`]): the ranked dispatch arms the new owner's
    /// timer from whichever thread dispatched it.
    pub fn arm_turn_locked(&self, q: &mut TurnQuantum, timer: &Arc<QuantumTimer>) {
        timer.arm(self.quantum_end.load(Ordering::Acquire));
        q.timer = Some(timer.clone());
    }

    /// The executor's turn is over: disarm `timer`, which cuts no longer
    /// reach.
    pub fn disarm_turn(&self, timer: &QuantumTimer) {
        let mut q = self.lock_quantum();
        q.timer = None;
        timer.disarm();
    }

    /// Bring the current turn's end forward as a wake's decision asks;
    /// false if the CPU runs another turn by now or the end is not earlier.
    pub fn cut_quantum(&self, cut: &QuantumCut) -> bool {
        let q = self.lock_quantum();
        if q.turn != Some((cut.runner, cut.dispatched_at)) || cut.end >= self.quantum_end() {
            return false;
        }
        self.quantum_end.store(cut.end, Ordering::Release);
        self.granted.store(
            self.granted()
                .min(cut.end.saturating_sub(cut.dispatched_at)),
            Ordering::Release,
        );
        if let Some(timer) = &q.timer {
            timer.arm(cut.end);
        }
        true
    }

    /// Move the current turn's end to `end` (the ranked dispatch: later
    /// for an owner that lost CPU time to vCPUs KVM woke, or that nothing
    /// waits behind; earlier again when something does). The granted
    /// slice stays.
    pub fn set_quantum_end(&self, end: u64) {
        let q = self.lock_quantum();
        self.quantum_end.store(end, Ordering::Release);
        if let Some(timer) = &q.timer {
            timer.arm(end);
        }
    }

    pub fn lock_owner(&self) -> MutexGuard<'_, Option<Arc<EngineVcpu>>> {
        self.owner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wait (a worker with nothing to run) until kicked or `stop` holds.
    pub fn wait_idle<'a>(
        &'a self,
        mut owner: MutexGuard<'a, Option<Arc<EngineVcpu>>>,
        stop: impl Fn() -> bool,
    ) -> MutexGuard<'a, Option<Arc<EngineVcpu>>> {
        while !self.kick_pending.load(Ordering::Acquire) && !stop() {
            owner = self.idle.wait(owner).unwrap_or_else(|p| p.into_inner());
        }
        owner
    }

    /// Wake a worker waiting in [`CpuSlot::wait_idle`] (call with `owner`
    /// held, after setting what it waits for).
    pub fn wake_idle(&self) {
        self.idle.notify_all();
    }

    /// The executor is out of KVM_RUN and looks at what is pending (its
    /// first look after an exit, or the start of a turn).
    pub fn left_guest(&self) {
        self.in_guest.store(false, Ordering::SeqCst);
    }

    /// The executor has looked at everything and is about to enter: say
    /// so, then check that nothing came meanwhile. False: a kick or a
    /// notification came (it did not signal, seeing the executor out of
    /// the guest), so look again. With [`CpuSlot::post_look`] and
    /// [`CpuSlot::kick_needs_signal`] this is Dekker's pattern (KVM's
    /// `vcpu->mode` and `kvm_vcpu_kick` do the same): of the executor's
    /// store here and the poster's, at least one sees the other's.
    pub fn try_enter(&self) -> bool {
        self.in_guest.store(true, Ordering::SeqCst);
        if self.look_again.swap(false, Ordering::SeqCst) || self.kick_pending.load(Ordering::SeqCst)
        {
            self.in_guest.store(false, Ordering::SeqCst);
            return false;
        }
        true
    }

    /// Something was posted for the vCPU running here: make its executor
    /// look before its next entry. True if it must be signalled (it may be
    /// in the guest); false if it looks anyway before it enters.
    pub fn post_look(&self) -> bool {
        self.look_again.store(true, Ordering::SeqCst);
        self.in_guest.load(Ordering::SeqCst)
    }

    /// Ask this CPU to call `schedule`. Returns whether this kick is the
    /// first since the CPU last did (a second finds the first still
    /// pending, whose `schedule` call will see what it was for).
    pub fn set_kick_pending(&self) -> bool {
        !self.kick_pending.swap(true, Ordering::SeqCst)
    }

    /// After [`CpuSlot::set_kick_pending`] on a CPU running a vCPU: whether
    /// the executor must be signalled. Not if it is out of the guest (it
    /// sees the kick before entering), nor if its turn ends within
    /// `slack_ns` anyway (its own quantum timer fires then, and it sees the
    /// kick at that exit).
    pub fn kick_needs_signal(&self, now: u64, slack_ns: u64) -> bool {
        self.in_guest.load(Ordering::SeqCst) && self.quantum_end() > now.saturating_add(slack_ns)
    }

    /// Signal the thread executing here, if any; returns whether one was.
    pub fn signal_executor(&self) -> bool {
        let tid = self.executor.load(Ordering::Acquire);
        if tid == 0 {
            return false;
        }
        if let Err(e) = crate::signals::kick_thread(tid) {
            log::warn!("kick of CPU {} (thread {tid}) failed: {e}", self.host);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::now_ns;
    use crate::signals::{register_kick_handler, set_current_kvm_run};
    use kvm_bindings::kvm_run;

    const MS: u64 = 1_000_000;

    /// A stand-in for a vCPU's `kvm_run` that the kick handler of the
    /// calling thread marks, as it marks a real one to stop KVM_RUN.
    struct KickFlag(Box<kvm_run>);

    impl KickFlag {
        fn install() -> KickFlag {
            register_kick_handler().unwrap();
            let mut run = Box::new(kvm_run::default());
            set_current_kvm_run(&mut *run);
            KickFlag(run)
        }

        fn kicked(&self) -> bool {
            // SAFETY: a valid, live kvm_run; the signal handler of this
            // thread may write the byte, hence the volatile read.
            unsafe { std::ptr::addr_of!(self.0.immediate_exit).read_volatile() != 0 }
        }

        /// Wait up to `limit_ns` for the kick; the time it was seen.
        fn wait(&self, limit_ns: u64) -> Option<u64> {
            let until = now_ns() + limit_ns;
            while now_ns() < until {
                if self.kicked() {
                    return Some(now_ns());
                }
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
            None
        }
    }

    impl Drop for KickFlag {
        fn drop(&mut self) {
            set_current_kvm_run(std::ptr::null_mut());
        }
    }

    fn slot() -> CpuSlot {
        CpuSlot::new(CpuId(0), HostCpu(0))
    }

    #[test]
    fn a_cut_brings_the_running_turns_timer_forward() {
        let flag = KickFlag::install();
        let timer = Arc::new(QuantumTimer::for_current_thread().unwrap());
        let slot = Arc::new(slot());
        let runner = EntityId::new(3, 0);
        let t0 = now_ns();
        let old_end = t0 + 20_000 * MS;
        slot.begin_turn(&mut slot.lock_turn(), Some((runner, t0)), old_end);
        slot.arm_turn(&timer);
        // Cuts of another turn, or that would lengthen it, change nothing.
        let cut = |runner, dispatched_at, end| QuantumCut {
            runner,
            dispatched_at,
            end,
        };
        assert!(!slot.cut_quantum(&cut(EntityId::new(4, 0), t0, t0 + MS)));
        assert!(!slot.cut_quantum(&cut(runner, t0 + 1, t0 + MS)));
        assert!(!slot.cut_quantum(&cut(runner, t0, old_end + MS)));
        assert_eq!(slot.quantum_end(), old_end);
        // The waker is another thread; the timer kicks this one.
        let new_end = now_ns() + 50 * MS;
        let waker = {
            let slot = slot.clone();
            std::thread::spawn(move || slot.cut_quantum(&cut(runner, t0, new_end)))
        };
        assert!(waker.join().unwrap(), "the cut applies to the running turn");
        assert_eq!(slot.quantum_end(), new_end);
        let seen = flag.wait(10_000 * MS).expect("the runner was kicked");
        assert!(
            seen >= new_end && seen < old_end,
            "kicked at the cut end, not the old one"
        );
        slot.disarm_turn(&timer);
    }

    #[test]
    fn a_cut_before_the_executor_arms_is_armed_by_it_and_a_past_turn_is_left_alone() {
        let flag = KickFlag::install();
        let timer = Arc::new(QuantumTimer::for_current_thread().unwrap());
        let slot = slot();
        let runner = EntityId::new(1, 2);
        // Turn 1 is cut after its executor disarmed: no kick reaches it.
        let t1 = now_ns();
        slot.begin_turn(&mut slot.lock_turn(), Some((runner, t1)), t1 + 20_000 * MS);
        slot.arm_turn(&timer);
        slot.disarm_turn(&timer);
        slot.cut_quantum(&QuantumCut {
            runner,
            dispatched_at: t1,
            end: t1,
        });
        assert_eq!(
            flag.wait(100 * MS),
            None,
            "a disarmed timer is not re-armed"
        );
        // Turn 2 of the same entity: a cut of turn 1 does not apply; its
        // own cut, made before the executor arms, does.
        let t2 = now_ns();
        let old_end = t2 + 20_000 * MS;
        slot.begin_turn(&mut slot.lock_turn(), Some((runner, t2)), old_end);
        assert!(!slot.cut_quantum(&QuantumCut {
            runner,
            dispatched_at: t1,
            end: t2,
        }));
        let new_end = now_ns() + 20 * MS;
        assert!(slot.cut_quantum(&QuantumCut {
            runner,
            dispatched_at: t2,
            end: new_end,
        }));
        slot.arm_turn(&timer);
        let seen = flag.wait(10_000 * MS).expect("the runner was kicked");
        assert!(seen >= new_end && seen < old_end);
        slot.disarm_turn(&timer);
        slot.begin_turn(&mut slot.lock_turn(), None, 0);
        assert_eq!(slot.quantum_end(), 0);
    }
}
