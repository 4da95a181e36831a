//! Halts and wake-ups that happen inside KVM: the `kvm-irqchip` dispatch
//! ([`crate::DispatchKind::KvmIrqchip`]).
//!
//! Under that dispatch a VM has KVM's in-kernel local APIC: the guest's
//! HLT, its APIC timer, its IPIs and EOIs are handled inside KVM_RUN, and
//! a halted vCPU's thread sleeps in the kernel until KVM wakes it. Nothing
//! of that reaches user space by itself, so the engine learns it in two
//! ways:
//!
//! - **At an exit.** Whenever a dispatched vCPU's KVM_RUN returns for a
//!   signal (its slice ended, a wake-up kicked its CPU, the watcher below),
//!   its gate asks KVM for the vCPU's state (KVM_GET_MP_STATE): halted
//!   means the turn ends as a block, exactly when the CPU is wanted.
//! - **From KVM's statistics.** One watcher thread samples the per-vCPU
//!   instant statistic `blocking` (KVM_GET_STATS_FD: 1 while the thread
//!   sleeps in the kernel's halt) every `kvm_poll_ns`: a dispatched vCPU
//!   that blocks is signalled so its CPU goes to the next vCPU (and its run
//!   time stops counting); a halted vCPU that no longer blocks was woken by
//!   KVM: the watcher takes it through the scheduler's wake path itself
//!   (its thread may be waiting for the CPU behind the vCPU dispatched
//!   there, which only the scheduler's kick moves), then signals its
//!   thread, which parks until the vCPU is dispatched.
//!
//! The wake-up itself is the host kernel's: KVM makes the halted thread
//! runnable on its CPU, where the dispatched vCPU's thread runs. So that
//! it preempts that thread at once, as an interrupt would, the thread of a
//! vCPU that halts asks the host for a short time slice (EEVDF's custom
//! slice, [`ask_host_slice`]) and one whose quantum ran out asks for the
//! default again: the scheduler's view of who is interactive, handed to
//! the host's wake-up preemption. Measured on the noisy neighbour: the
//! sleeper's p99 wake-up 0.12-0.31 ms with it, 0.3-1.0 ms without (the
//! watcher's period then bounds it).
//!
//! A vCPU halted this way (`RunState::HaltedInKvm`) is blocked in the
//! scheduler, but its thread is back inside KVM_RUN, bound to the CPU it
//! last ran on: only there can KVM wake it. Between KVM's wake-up and the
//! watcher's next sample it runs as the host kernel decides, beside the
//! CPU's dispatched vCPU: that window (at most `kvm_poll_ns`) is the price
//! of KVM's exit-free wake-ups, and what this dispatch measures against
//! the exact visibility of Pacer's own interrupt controller.

use crate::vcpu_state::{EngineVcpu, RunState, VcpuCtl};
use crate::Engine;
use kvm_bindings::{kvm_stats_desc, kvm_stats_header, KVMIO};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::MutexGuard;
use std::sync::Weak;
use std::thread::JoinHandle;
use std::time::Duration;
use vmm_sys_util::ioctl::ioctl;

vmm_sys_util::ioctl_io_nr!(KVM_GET_STATS_FD, KVMIO, 0xce);

/// The name of KVM's per-vCPU instant statistic that reads 1 while the
/// vCPU's thread sleeps in the kernel's halt (`kvm_vcpu_block`).
const BLOCKING: &str = "blocking";

/// The name of KVM's per-vCPU cumulative statistic of the time its
/// thread slept in halts (ns; added at the end of each halt).
const HALT_WAIT_NS: &str = "halt_wait_ns";

/// The name of KVM's per-vCPU cumulative count of wake-ups of a halted
/// vCPU, incremented by the waker (`kvm_vcpu_wake_up`), so it moves before
/// the woken thread runs (`blocking` is cleared by the thread itself).
const HALT_WAKEUP: &str = "halt_wakeup";

/// One vCPU's `blocking` statistic (and `halt_wait_ns` and `halt_wakeup`
/// where KVM has them), read through its KVM stats file.
#[derive(Debug)]
pub(crate) struct KvmBlocking {
    file: File,
    /// Where the statistic's value sits in the file.
    at: u64,
    /// Where `halt_wait_ns` sits (None: this KVM does not publish it).
    halt_wait_at: Option<u64>,
    /// Where `halt_wakeup` sits (None: this KVM does not publish it).
    halt_wakeup_at: Option<u64>,
}

impl KvmBlocking {
    /// Open the stats file of `vcpu` and find `blocking` in it.
    pub(crate) fn open(vcpu: &impl AsRawFd) -> io::Result<KvmBlocking> {
        // SAFETY: KVM_GET_STATS_FD takes no argument and returns a new file
        // descriptor (or -1) on the vCPU fd we hold.
        let fd = unsafe { ioctl(vcpu, KVM_GET_STATS_FD()) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a descriptor the kernel just gave us and nothing
        // else owns.
        let file = unsafe { File::from_raw_fd(fd) };
        Self::from_file(file)
    }

    /// Find `blocking` (required) and `halt_wait_ns` in a KVM stats file.
    fn from_file(file: File) -> io::Result<KvmBlocking> {
        let at = find_stat(&file, BLOCKING)?;
        let halt_wait_at = find_stat(&file, HALT_WAIT_NS).ok();
        let halt_wakeup_at = find_stat(&file, HALT_WAKEUP).ok();
        Ok(KvmBlocking {
            file,
            at,
            halt_wait_at,
            halt_wakeup_at,
        })
    }

    /// How many times KVM has woken the vCPU from a halt so far, where KVM
    /// publishes it.
    pub(crate) fn halt_wakeups(&self) -> Option<u64> {
        let mut v = [0u8; 8];
        self.file.read_exact_at(&mut v, self.halt_wakeup_at?).ok()?;
        Some(u64::from_ne_bytes(v))
    }

    /// The time the vCPU's thread has slept in KVM's halts so far (ns),
    /// where KVM publishes it. KVM adds a halt when it ends, so a halt a
    /// signal just ended (the thread is back from KVM_RUN) is counted.
    pub(crate) fn halt_wait_ns(&self) -> Option<u64> {
        let mut v = [0u8; 8];
        self.file.read_exact_at(&mut v, self.halt_wait_at?).ok()?;
        Some(u64::from_ne_bytes(v))
    }

    /// Whether the vCPU's thread sleeps in KVM's halt now.
    pub(crate) fn blocking(&self) -> io::Result<bool> {
        let mut v = [0u8; 8];
        self.file.read_exact_at(&mut v, self.at)?;
        Ok(u64::from_ne_bytes(v) != 0)
    }
}

/// The file offset of statistic `name`'s (first) value in a KVM stats
/// file: the header, then `num_desc` descriptors of `16 + name_size`
/// bytes each (the name NUL-padded), then the data block.
fn find_stat(file: &File, name: &str) -> io::Result<u64> {
    let invalid = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_string());
    let mut h = [0u8; std::mem::size_of::<kvm_stats_header>()];
    file.read_exact_at(&mut h, 0)?;
    let word = |b: &[u8], i: usize| u32::from_ne_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    let (name_size, num_desc, desc_offset, data_offset) =
        (word(&h, 4), word(&h, 8), word(&h, 16), word(&h, 20));
    let desc_size = std::mem::size_of::<kvm_stats_desc>() + name_size as usize;
    if name_size == 0 || num_desc > 4096 || desc_size > 4096 {
        return Err(invalid("implausible KVM stats header"));
    }
    let mut descs = vec![0u8; desc_size * num_desc as usize];
    file.read_exact_at(&mut descs, u64::from(desc_offset))?;
    for d in descs.chunks_exact(desc_size) {
        let raw = &d[std::mem::size_of::<kvm_stats_desc>()..];
        let len = raw.iter().position(|b| *b == 0).unwrap_or(raw.len());
        if &raw[..len] == name.as_bytes() {
            // `offset` (bytes 8..12): from the data block's start.
            return Ok(u64::from(data_offset) + u64::from(word(d, 8)));
        }
    }
    Err(invalid(&format!("KVM statistic {name:?} not found")))
}

/// The host kernel's time slice (EEVDF's custom slice, Linux 6.12 and
/// later; its smallest) the thread of a vCPU that halts asks for.
pub(crate) const SHORT_HOST_SLICE_NS: u64 = 100_000;

/// Ask the host kernel for a time slice for the calling thread
/// (`sched_attr.sched_runtime` of SCHED_OTHER; `None`: the default). A
/// thread KVM wakes preempts a running thread with a longer slice at once,
/// instead of waiting for that one to use up its own slice (EEVDF's
/// run-to-parity: ~3 ms here). Older kernels refuse the request; then only
/// the watcher moves a woken vCPU ahead.
pub(crate) fn ask_host_slice(slice_ns: Option<u64>) {
    let slice_ns = slice_ns.unwrap_or(0);
    // The first fields of the kernel's `struct sched_attr` (SCHED_ATTR_SIZE_VER0).
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
    let attr = SchedAttr {
        size: std::mem::size_of::<SchedAttr>() as u32,
        policy: libc::SCHED_OTHER as u32,
        flags: 0,
        nice: 0,
        priority: 0,
        runtime: slice_ns,
        deadline: 0,
        period: 0,
    };
    // SAFETY: sched_setattr on the calling thread (pid 0) with a valid,
    // correctly sized attribute block that outlives the call.
    let r = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0) };
    if r != 0 {
        log::debug!(
            "no custom time slice for this vCPU thread: {}",
            io::Error::last_os_error()
        );
    }
}

impl Engine {
    /// KVM woke `v`, halted inside KVM (its state under `ctl` is
    /// HaltedInKvm): Ready, then the scheduler's wake path.
    pub(crate) fn woken_in_kvm(&self, v: &EngineVcpu, ctl: MutexGuard<'_, VcpuCtl>) {
        self.ready_after_kvm(v, ctl);
        self.wake(v);
    }

    /// `woken_in_kvm`, for a vCPU that has been running since KVM woke it
    /// (the ranked agent saw it awake, or it exited): queued behind an
    /// owner it is interrupted mid-run, as by a preemption
    /// ([`Engine::wake_found_running`]).
    pub(crate) fn found_running_in_kvm(&self, v: &EngineVcpu, ctl: MutexGuard<'_, VcpuCtl>) {
        self.ready_after_kvm(v, ctl);
        self.wake_found_running(v);
    }

    fn ready_after_kvm(&self, v: &EngineVcpu, mut ctl: MutexGuard<'_, VcpuCtl>) {
        v.set_state(&mut ctl, RunState::Ready);
        drop(ctl);
        self.record(|| crate::trace::Event::Notify {
            vcpu: v.trace_ref(),
            cause: crate::trace::Cause::Kvm,
        });
    }
}

/// What the watcher has done (`kvm_halts` in the engine's counters).
#[derive(Debug, Default)]
pub(crate) struct WatchCounters {
    /// Samples taken (one per vCPU looked at).
    pub samples: AtomicU64,
    /// Dispatched vCPUs found halted and signalled.
    pub halts: AtomicU64,
    /// Halted vCPUs found woken by KVM and signalled.
    pub wakes: AtomicU64,
}

/// Start the watcher: every `period` it samples each dispatched or
/// KVM-halted vCPU of the engine (see the module documentation). It ends
/// with the engine.
pub(crate) fn spawn_watcher(
    engine: Weak<Engine>,
    period: Duration,
    rank: i32,
) -> io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("pacer/kvm-halts".into())
        .spawn(move || {
            // It stands in for KVM's wake-up of a halted vCPU, an
            // interrupt: a watcher that waits for a CPU behind the vCPUs it
            // watches sees a wake-up only when the host kernel gets round
            // to it (milliseconds next to a CPU-bound vCPU).
            crate::timers::run_like_an_interrupt("kvm-irqchip watcher", rank);
            crate::thread_hook::thread_started(crate::thread_hook::EngineThread::Timers);
            let mut next = period;
            loop {
                std::thread::sleep(next);
                let Some(e) = engine.upgrade() else { return };
                if e.is_shutting_down() {
                    return;
                }
                // With nothing halted in KVM to watch (CPU-bound vCPUs
                // only), each look is a thread switch on a CPU a vCPU
                // wants: look less often, up to QUIET_STRETCH periods.
                next = if sample(&e) {
                    (next * 2).min(period * QUIET_STRETCH)
                } else {
                    period
                };
            }
        })
}

/// How many periods the ranked agent's look may stretch to while no vCPU
/// is halted in KVM.
const QUIET_STRETCH: u32 = 8;

/// One round of the watcher; true if it found nothing to watch (the ranked
/// dispatch's agent with no vCPU halted in KVM and nothing done).
fn sample(e: &Engine) -> bool {
    let counters = e.kvm_watch_counters();
    if e.dispatch_kind().ranked() {
        let look = e.ranked_sample();
        counters.samples.fetch_add(look.samples, Ordering::Relaxed);
        counters.halts.fetch_add(look.halts, Ordering::Relaxed);
        counters.wakes.fetch_add(look.wakes, Ordering::Relaxed);
        return look.quiet();
    }
    for vm in e.live_vms() {
        for v in vm.vcpus() {
            let Some(stats) = v.kvm_blocking.get() else {
                continue;
            };
            // Acted upon when `blocking` reads this.
            let signal_if = match v.state() {
                RunState::Running { .. } => true,
                RunState::HaltedInKvm => false,
                _ => continue,
            };
            counters.samples.fetch_add(1, Ordering::Relaxed);
            match stats.blocking() {
                Ok(true) if signal_if => {
                    counters.halts.fetch_add(1, Ordering::Relaxed);
                    v.kick_own_thread();
                }
                Ok(false) if !signal_if => {
                    let ctl = v.ctl();
                    if ctl.state != RunState::HaltedInKvm {
                        continue;
                    }
                    counters.wakes.fetch_add(1, Ordering::Relaxed);
                    // Signalled under `ctl`: its thread, out of KVM_RUN,
                    // needs `ctl` to look, so it cannot miss the wake.
                    v.kick_own_thread();
                    e.woken_in_kvm(v, ctl);
                }
                Ok(_) => {}
                Err(err) => log::debug!("{}: KVM stats: {err}", v.name),
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stats file laid out as KVM lays it out: header, descriptors with
    /// 16-byte names, data.
    fn fake_stats(names: &[&str], values: &[u64]) -> File {
        let name_size = 16u32;
        let desc_size = 16 + name_size as usize;
        let desc_offset = 24 + 8; // header, then an id string
        let data_offset = desc_offset + desc_size * names.len();
        let mut b = Vec::new();
        for w in [
            0,
            name_size,
            names.len() as u32,
            24,
            desc_offset as u32,
            data_offset as u32,
        ] {
            b.extend_from_slice(&w.to_ne_bytes());
        }
        b.extend_from_slice(b"kvm-1/0\0");
        for (i, n) in names.iter().enumerate() {
            b.extend_from_slice(&1u32.to_ne_bytes()); // flags: instant
            b.extend_from_slice(&0i16.to_ne_bytes()); // exponent
            b.extend_from_slice(&1u16.to_ne_bytes()); // size
            b.extend_from_slice(&((i * 8) as u32).to_ne_bytes()); // offset
            b.extend_from_slice(&0u32.to_ne_bytes()); // bucket size
            let mut name = n.as_bytes().to_vec();
            name.resize(name_size as usize, 0);
            b.extend_from_slice(&name);
        }
        for v in values {
            b.extend_from_slice(&v.to_ne_bytes());
        }
        let f = vmm_sys_util::tempfile::TempFile::new().unwrap().into_file();
        f.write_all_at(&b, 0).unwrap();
        f
    }

    #[test]
    fn finds_blocking_among_the_descriptors_and_reads_its_value() {
        let f = fake_stats(
            &["halt_exits", "blocking", "halt_wait_ns", "halt_wakeup"],
            &[7, 1, 9, 3],
        );
        let b = KvmBlocking::from_file(f).unwrap();
        assert!(b.blocking().unwrap());
        assert_eq!(b.halt_wait_ns(), Some(9));
        assert_eq!(b.halt_wakeups(), Some(3));
        // A KVM without `halt_wait_ns`: halts are still seen, their time
        // is not.
        let b = KvmBlocking::from_file(fake_stats(&["halt_exits", "blocking"], &[7, 0])).unwrap();
        assert!(!b.blocking().unwrap());
        assert_eq!(b.halt_wait_ns(), None);
        assert_eq!(b.halt_wakeups(), None);
    }

    #[test]
    fn a_missing_statistic_or_a_garbled_header_is_an_error() {
        let f = fake_stats(&["halt_exits", "exits"], &[1, 2]);
        assert!(find_stat(&f, BLOCKING)
            .unwrap_err()
            .to_string()
            .contains("blocking"));
        let f = vmm_sys_util::tempfile::TempFile::new().unwrap().into_file();
        f.write_all_at(&[0xff; 24], 0).unwrap();
        assert!(find_stat(&f, BLOCKING).is_err());
    }
}
