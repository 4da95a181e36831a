//! Host real-time ranks: how the `ranked` dispatch hands the scheduler's
//! decisions to the host kernel ([`crate::DispatchKind::Ranked`], the
//! design in `ranked.rs`).
//!
//! Every vCPU thread of a ranked engine has a rank the engine chooses from
//! the scheduler's state, and the host kernel switches between them by
//! itself: a thread KVM wakes preempts the running one at once if it
//! ranks higher, and a thread that halts hands its CPU to the
//! highest-ranked runnable thread there. The ranks, top first:
//!
//! | rank | class | threads |
//! |---|---|---|
//! | [`Rank::Service`] | SCHED_FIFO 48 | the engine's timer thread and the agent, and any thread while it takes the engine's locks: they stand for interrupts and must preempt any vCPU |
//! | [`Rank::Park`] | SCHED_FIFO 47 | a vCPU thread leaving KVM_RUN to park (paused, capped while queued, its VM stopping): it takes its signal at once |
//! | [`Rank::Halted`] | SCHED_FIFO 2..=46 | halted vCPUs, by the scheduler's effective priority E ([`halted_priority`]): KVM's wake-up of one preempts any owner at once, and a higher E wins among them |
//! | [`Rank::Owner`] | SCHED_OTHER | the CPU's owner: the vCPU the scheduler dispatched there; and, bound there too, the queued siblings of a VM that shares the CPUs it owns (`sibling_share.rs`) |
//! | [`Rank::LongTurnOwner`] | SCHED_OTHER, a kernel slice of [`LONG_TURN_SLICE_NS`] | the same, for a VM whose siblings sharing its CPUs spin together (`SiblingShare::long_turns`): the kernel's turns between them come at that slice, and Pacer's looks give the CPU away in between |
//! | [`Rank::Filler`] | SCHED_IDLE | vCPUs queued behind an owner: they run only while their CPU's owner is halted, and any other thread preempts them at its wake-up |
//!
//! Only halted vCPUs are real-time while they run, between KVM's wake-up
//! and their next halt: the CPU-bound work is the owners', in the normal
//! class, so the kernel's real-time throttling (`sched_rt_runtime_us`:
//! real-time threads are stopped for the rest of a period once they used
//! 95 % of it) never stops a CPU-bound vCPU, and the owners share the CPU
//! with the host's other normal threads as the host kernel's own vCPU
//! threads do. The real-time ranks stay below 50, the rank of the
//! kernel's threaded interrupt handlers.

use std::io;

/// The real-time priority of the engine's own threads that stand for
/// interrupts (timers, agent), and of [`ServiceSection`]s.
pub(crate) const SERVICE_RANK: i32 = 48;
/// The real-time priority of a vCPU thread on its way out of KVM_RUN.
const PARK_PRIORITY: i32 = 47;
/// The lowest and highest real-time priority of halted vCPUs.
const FIRST_HALTED: i32 = 2;
const LAST_HALTED: i32 = 46;

// The order of the table above, below the kernel's interrupt threads (50).
const _: () = assert!(LAST_HALTED < PARK_PRIORITY && PARK_PRIORITY < SERVICE_RANK);
const _: () = assert!(SERVICE_RANK < 50);

/// The kernel slice of a [`Rank::LongTurnOwner`] (EEVDF's custom slice:
/// `sched_attr.sched_runtime` of a SCHED_OTHER thread, Linux 6.12 and
/// later, which clamp it to 0.1-100 ms; older kernels ignore it). The
/// kernel takes turns between the threads sharing a CPU at their slice's
/// end (its base slice, a few ms); between siblings that spin together,
/// on a lock or at a barrier, such a turn most often stops the one they
/// wait for. At this slice the siblings change places where Pacer's looks
/// find one spinning, and otherwise at the scheduler's slice ends (6 ms
/// at the default priority). Why 30 ms and not the kernel's longest (100
/// ms), measured at 3:1 and 4:2 beside hogs (`docs/measurements/sync.md`,
/// "Long kernel turns"): the spin lock gains with the slice (1.34-1.38x
/// the host kernel's acquisitions at 12 ms, 1.41x at 20, 1.45-1.49x at
/// 30, 1.53-1.58x at 100), and a 4-vCPU barrier VM beside two 1-vCPU hogs
/// loses with it (within its noise at 12-20 ms, 6-22 % fewer rounds at
/// 30, 27-46 % at 100, its hogs taking the CPU time it lost).
pub(crate) const LONG_TURN_SLICE_NS: u64 = 30_000_000;

/// Where a vCPU's thread ranks (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rank {
    /// The engine's own work.
    Service,
    /// Leaving KVM_RUN to park.
    Park,
    /// Halted, of effective priority E.
    Halted(u8),
    /// The owner of its CPU.
    Owner,
    /// The owner of its CPU, taking the kernel's turns with the siblings
    /// beside it at the long slice.
    LongTurnOwner,
    /// Queued behind an owner.
    Filler,
}

impl Rank {
    /// As one number (for the engine's atomics; 0 is none).
    pub(crate) fn code(self) -> i32 {
        match self {
            Rank::Service => SERVICE_RANK,
            Rank::Park => PARK_PRIORITY,
            Rank::Halted(e) => halted_priority(e),
            Rank::Owner => -1,
            Rank::Filler => -2,
            Rank::LongTurnOwner => -3,
        }
    }

    /// Whether a [`Rank::code`] is an owner's, at either kernel slice.
    pub(crate) fn is_owner(code: i32) -> bool {
        code == Rank::Owner.code() || code == Rank::LongTurnOwner.code()
    }

    /// The scheduling class, real-time priority and kernel slice (0: the
    /// kernel's own) of a [`Rank::code`].
    fn class_of(code: i32) -> (u32, u32, u64) {
        match code {
            -1 => (libc::SCHED_OTHER as u32, 0, 0),
            -2 => (libc::SCHED_IDLE as u32, 0, 0),
            -3 => (libc::SCHED_OTHER as u32, 0, LONG_TURN_SLICE_NS),
            p => (libc::SCHED_FIFO as u32, p as u32, 0),
        }
    }
}

/// The real-time priority of a halted vCPU of effective priority `e`:
/// monotone in `e`, one per level where priorities are common (idle 0,
/// timeshare up to 30), compressed above (timeshare 31..=99, realtime
/// 100..=120), within 2..=46.
pub(crate) fn halted_priority(e: u8) -> i32 {
    let e = i32::from(e);
    let r = match e {
        0..=30 => FIRST_HALTED + e,
        31..=99 => FIRST_HALTED + 31 + (e - 31) / 10,
        _ => FIRST_HALTED + 38 + (e - 100) / 3,
    };
    r.min(LAST_HALTED)
}

/// `SCHED_FLAG_RESET_ON_FORK`: a thread the vCPU thread starts (none
/// does) would not inherit its real-time class.
const RESET_ON_FORK: u64 = 0x01;

/// The first fields of the kernel's `struct sched_attr`
/// (SCHED_ATTR_SIZE_VER0).
#[repr(C)]
struct SchedAttr {
    size: u32,
    policy: u32,
    flags: u64,
    nice: i32,
    priority: u32,
    runtime: u64,
    deadline: u64,
    period: u64,
}

/// Give thread `tid` (0: the calling thread) the rank of [`Rank::code`]
/// `code`.
pub(crate) fn set_rank(tid: i32, code: i32) -> io::Result<()> {
    let (policy, priority, runtime) = Rank::class_of(code);
    let attr = SchedAttr {
        size: std::mem::size_of::<SchedAttr>() as u32,
        policy,
        flags: RESET_ON_FORK,
        nice: 0,
        priority,
        runtime,
        deadline: 0,
        period: 0,
    };
    // SAFETY: sched_setattr with a valid, correctly sized attribute block
    // that outlives the call; `tid` names a thread or is refused.
    let r = unsafe { libc::syscall(libc::SYS_sched_setattr, tid, &attr as *const SchedAttr, 0) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The calling thread's scheduling class (SCHED_*), for tests.
#[cfg(test)]
pub(crate) fn own_policy() -> u32 {
    own_attr().expect("sched_getattr").policy
}

/// The calling thread's scheduling attributes (`sched_getattr`).
fn own_attr() -> io::Result<SchedAttr> {
    let mut attr = SchedAttr {
        size: std::mem::size_of::<SchedAttr>() as u32,
        policy: 0,
        flags: 0,
        nice: 0,
        priority: 0,
        runtime: 0,
        deadline: 0,
        period: 0,
    };
    // SAFETY: sched_getattr on the calling thread (pid 0) writes at most
    // `size` bytes into the attribute block, which outlives the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_sched_getattr,
            0,
            &mut attr as *mut SchedAttr,
            std::mem::size_of::<SchedAttr>() as u32,
            0,
        )
    };
    if r == 0 {
        Ok(attr)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The calling thread runs at [`SERVICE_RANK`] while this lives, and at
/// what it ran at before afterwards.
///
/// Under the ranked dispatch a thread of the VMM's that takes the
/// engine's locks (a CPU's owner, a vCPU's state, the scheduler's: the
/// control API, a VM's controller) runs above every vCPU thread while it
/// holds them: one preempted by a vCPU KVM woke would otherwise keep the
/// agent, which needs them, waiting for as long as that vCPU runs
/// (priority inversion). Each of the engine's entry points takes one
/// ([`crate::Engine`]'s `section`); the agent runs at this rank
/// throughout. vCPU threads take none: a thread that leaves the normal
/// class and comes back is placed anew by the kernel's fair scheduler
/// (EEVDF), which lost CPU-bound vCPUs most of their time when their
/// slice ends went through a section (measured: 0.1x their CPU time on a
/// host busy with other processes); the engine's work on a vCPU thread
/// is its own turn's, at the class its rank gives it.
pub(crate) struct ServiceSection {
    /// What to restore (None: the thread ranked this high already).
    before: Option<SchedAttr>,
}

impl ServiceSection {
    /// Raise the calling thread to [`SERVICE_RANK`] if it is below.
    pub(crate) fn enter() -> ServiceSection {
        let before = match own_attr() {
            Ok(a) if a.policy == libc::SCHED_FIFO as u32 && a.priority >= SERVICE_RANK as u32 => {
                None
            }
            Ok(a) => match set_rank(0, Rank::Service.code()) {
                Ok(()) => Some(a),
                Err(e) => {
                    log::warn!("cannot rank this thread for the engine's work: {e}");
                    None
                }
            },
            Err(e) => {
                log::warn!("cannot read this thread's scheduling class: {e}");
                None
            }
        };
        ServiceSection { before }
    }
}

impl Drop for ServiceSection {
    fn drop(&mut self) {
        if let Some(a) = self.before.take() {
            // SAFETY: sched_setattr on the calling thread with the block
            // sched_getattr filled (size set), which outlives the call.
            let r = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &a as *const SchedAttr, 0) };
            if r != 0 {
                log::warn!(
                    "cannot give this thread its scheduling class back: {}",
                    io::Error::last_os_error()
                );
            }
        }
    }
}

/// Whether this process may give its threads the ranks above: a thread
/// is started, made SCHED_FIFO at [`SERVICE_RANK`], and ends. Refused
/// without CAP_SYS_NICE or an RLIMIT_RTPRIO of at least that rank.
pub(crate) fn ranks_allowed() -> io::Result<()> {
    std::thread::Builder::new()
        .name("pacer/rank-probe".into())
        .spawn(|| set_rank(0, Rank::Service.code()))?
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("the probe thread panicked")))
}

/// The CPU time thread `tid` of this process has used, ns: its CPU-time
/// clock (what `pthread_getcpuclockid` names; the kernel's
/// `MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)`), read without stopping
/// it. None if the thread is gone.
pub(crate) fn thread_cpu_ns_of(tid: i32) -> Option<u64> {
    if tid <= 0 {
        return None;
    }
    let clock = ((!(tid as u32)) << 3 | 6) as libc::clockid_t;
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec to a valid pointer; an
    // invalid clock id is refused with EINVAL.
    let r = unsafe { libc::clock_gettime(clock, &mut ts) };
    (r == 0).then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn halted_priorities_keep_the_order_of_e_below_the_engines_own() {
        let ranks: Vec<i32> = (0..=120u8).map(halted_priority).collect();
        assert!(ranks.windows(2).all(|w| w[0] <= w[1]), "monotone");
        assert_eq!(halted_priority(0), FIRST_HALTED);
        assert_eq!(halted_priority(120), LAST_HALTED);
        // Distinct where penalties cycle (timeshare E 1..=30).
        assert!((0..30u8).all(|e| halted_priority(e) < halted_priority(e + 1)));
        // Realtime above every timeshare level.
        assert!(halted_priority(100) > halted_priority(99));
        assert!(ranks
            .iter()
            .all(|r| (FIRST_HALTED..=LAST_HALTED).contains(r)));
        // Codes are distinct and never 0 (none).
        let codes = [
            Rank::Service,
            Rank::Park,
            Rank::Halted(0),
            Rank::Owner,
            Rank::LongTurnOwner,
            Rank::Filler,
        ]
        .map(Rank::code);
        assert!(codes.iter().all(|c| *c != 0));
        assert!((1..codes.len()).all(|i| !codes[..i].contains(&codes[i])));
        assert!(Rank::is_owner(Rank::Owner.code()) && Rank::is_owner(Rank::LongTurnOwner.code()));
        assert!(!Rank::is_owner(Rank::Filler.code()) && !Rank::is_owner(Rank::Halted(1).code()));
        assert_eq!(
            Rank::class_of(Rank::LongTurnOwner.code()),
            (libc::SCHED_OTHER as u32, 0, LONG_TURN_SLICE_NS)
        );
        assert_eq!(
            Rank::class_of(Rank::Owner.code()).0,
            libc::SCHED_OTHER as u32
        );
        assert_eq!(
            Rank::class_of(Rank::Filler.code()).0,
            libc::SCHED_IDLE as u32
        );
        assert_eq!(
            Rank::class_of(Rank::Halted(10).code()),
            (libc::SCHED_FIFO as u32, 12, 0)
        );
    }

    #[test]
    fn a_long_turn_owner_takes_the_kernels_long_slice_and_an_owner_its_own() {
        std::thread::spawn(|| {
            set_rank(0, Rank::LongTurnOwner.code()).expect("a normal-class rank");
            let long = own_attr().unwrap();
            assert_eq!(long.policy, libc::SCHED_OTHER as u32);
            set_rank(0, Rank::Owner.code()).expect("a normal-class rank");
            let own = own_attr().unwrap();
            assert_eq!(own.policy, libc::SCHED_OTHER as u32);
            // Kernels before 6.12 keep no slice per thread and report none.
            if long.runtime == 0 {
                eprintln!("SKIPPED: this kernel reports no slice per thread");
                return;
            }
            assert_eq!(long.runtime, LONG_TURN_SLICE_NS);
            assert!(own.runtime < LONG_TURN_SLICE_NS, "{}", own.runtime);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_service_section_ranks_its_thread_and_gives_the_class_back() {
        std::thread::spawn(|| {
            let before = own_attr().unwrap();
            {
                let _s = ServiceSection::enter();
                if ranks_allowed().is_err() {
                    eprintln!("SKIPPED: no real-time priorities here");
                    return;
                }
                let now = own_attr().unwrap();
                assert_eq!(now.policy, libc::SCHED_FIFO as u32);
                assert_eq!(now.priority, SERVICE_RANK as u32);
                // Nested: already this high, nothing to restore.
                let inner = ServiceSection::enter();
                assert!(inner.before.is_none());
            }
            let after = own_attr().unwrap();
            assert_eq!(
                (after.policy, after.priority),
                (before.policy, before.priority)
            );
        })
        .join()
        .unwrap();
    }

    #[test]
    fn another_threads_cpu_clock_counts_its_work() {
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let worker = std::thread::spawn(move || {
            tx.send(crate::signals::current_tid()).unwrap();
            let start = crate::clock::thread_cpu_ns();
            while crate::clock::thread_cpu_ns() - start < 20_000_000 {
                std::hint::spin_loop();
            }
            done_rx.recv().unwrap();
        });
        let tid = rx.recv().unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let used = thread_cpu_ns_of(tid).expect("a live thread's clock");
            if used >= 20_000_000 {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "used {used} ns");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        done_tx.send(()).unwrap();
        worker.join().unwrap();
        assert_eq!(thread_cpu_ns_of(0), None);
    }
}
