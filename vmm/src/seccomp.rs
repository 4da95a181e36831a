//! Confinement: a seccomp filter per kind of thread.
//!
//! A guest controls what its vCPU threads do next (every exit runs device
//! code on them), so each thread of `pacer run`, once set up, may only make
//! the system calls its kind needs. The lists below come from reading the
//! code and from `strace -f` over every policy and dispatch; anything else
//! is *trapped*: the kernel sends SIGSYS, and the handler installed by
//! [`enable`] writes one line naming the thread and the system call to
//! stderr, then ends the process with exit status 1 (so the user learns
//! what happened, which the kernel's silent kill would not tell).
//!
//! | kind | threads | allowed beyond the common set |
//! |---|---|---|
//! | [`ThreadKind::Vcpu`] | `<vm>/vcpu<N>`, `pacer/cpu<N>` (workers) | `ioctl` with KVM_RUN, KVM_GET/SET_REGS, KVM_GET/SET_SREGS, KVM_INTERRUPT, KVM_NMI, KVM_SET_MSRS, KVM_GET_VCPU_EVENTS, KVM_IRQ_LINE, KVM_GET_MP_STATE only; `sched_setattr` and `pread64` (under `kvm-irqchip`: its own time slice, its vCPU's KVM statistics); `timer_create`/`timer_delete`; `ftruncate` (a results log cut back to its last whole line after a failed write); read-only `openat`, `read`, `statx`/`newfstatat`/`fstat`, `lseek` (under policy host a vCPU thread reads its own scheduling counters in /proc as it ends) |
//! | [`ThreadKind::Timers`] | `pacer/timers`, `pacer/kvm-halts` | `pread64` (the `kvm-irqchip` watcher reads KVM's per-vCPU statistics) |
//! | [`ThreadKind::Trace`] | `pacer/trace` (`run --trace`) | read-only `openat`, `read` (glibc's malloc, as for `Api`); it writes the trace file opened before it started |
//! | [`ThreadKind::Controller`] | `<vm>/ctl` after its vCPUs started | `openat` read-only, `read`, `statx`/`newfstatat`/`fstat`, `lseek` (the kernel's per-thread scheduling statistics); `ftruncate` (as for `Vcpu`) |
//! | [`ThreadKind::Service`] | `pacer/signals`, `pacer/status` | `rt_sigtimedwait`; `openat`, `statx`, and `fsync`, `rename`, `unlink` (the SIGUSR1 snapshot file, written whole) |
//! | [`ThreadKind::Api`] | `pacer/api` (the control API, `--api-socket`) | `poll`/`ppoll`, `accept4`, `read`/`recvfrom`, `sendto` without an address (writes to a connected socket), `getsockopt` for SO_PEERCRED only, read-only `openat` (glibc's malloc reads /proc/sys/vm/overcommit_memory when it first shrinks a thread's heap) (the peer's uid), `unlink`/`unlinkat` (its socket, at the end), `ftruncate` (a `control.jsonl` line cut back after a failed write); its listeners and its record file are made before it is confined |
//! | [`ThreadKind::Runner`] | the thread that called `runner::run` (the main thread), once every other thread started | `openat`, `mkdir`, `read`, `statx`/`newfstatat`/`fstat`, `lseek`, `fsync`, `rename`, `unlink` (the `--json` file, written whole: a temporary file renamed over it) |
//!
//! The common set: `futex`, `write`, `close`, memory (`mmap` and
//! `mprotect` never with PROT_EXEC, `munmap`, `madvise`, `brk`, `mremap`),
//! signals (`rt_sigreturn`, `rt_sigprocmask`, `sigaltstack`, `tgkill` to
//! this process only, `getpid`, `gettid`), time (`clock_gettime`,
//! `clock_nanosleep`, `nanosleep`), `sched_yield`, `sched_getaffinity`,
//! `sched_setaffinity` (the engine binds a vCPU's thread to its CPU from
//! whichever thread dispatches it), `timer_settime` (a wake on any thread
//! may bring the running vCPU's quantum timer forward), `getrandom`,
//! `fcntl(F_GETFD)`, `restart_syscall`, `exit`, `exit_group`.
//! No thread may start a process or a thread, open a socket, trace, mount,
//! change credentials, or map executable memory.
//!
//! A filter is installed by the thread itself ([`install`]), after its
//! setup and after it has started every thread it starts (a filter is
//! inherited by threads started later, and stacked filters intersect).
//! Filters are off until [`enable`] (the `pacer` binary enables them unless
//! `--no-seccomp` is given; the library alone never confines its caller).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

use kvm_bindings::{
    kvm_interrupt, kvm_irq_level, kvm_mp_state, kvm_msrs, kvm_regs, kvm_sregs, kvm_vcpu_events,
    KVMIO,
};
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen as Len, SeccompCmpOp as Op,
    SeccompCondition as Cond, SeccompFilter, SeccompRule, TargetArch,
};

vmm_sys_util::ioctl_io_nr!(KVM_RUN, KVMIO, 0x80);
vmm_sys_util::ioctl_ior_nr!(KVM_GET_REGS, KVMIO, 0x81, kvm_regs);
vmm_sys_util::ioctl_iow_nr!(KVM_SET_REGS, KVMIO, 0x82, kvm_regs);
vmm_sys_util::ioctl_ior_nr!(KVM_GET_SREGS, KVMIO, 0x83, kvm_sregs);
vmm_sys_util::ioctl_iow_nr!(KVM_SET_SREGS, KVMIO, 0x84, kvm_sregs);
vmm_sys_util::ioctl_iow_nr!(KVM_INTERRUPT, KVMIO, 0x86, kvm_interrupt);
vmm_sys_util::ioctl_io_nr!(KVM_NMI, KVMIO, 0x9a);
vmm_sys_util::ioctl_iow_nr!(KVM_SET_MSRS, KVMIO, 0x89, kvm_msrs);
vmm_sys_util::ioctl_ior_nr!(KVM_GET_VCPU_EVENTS, KVMIO, 0x9f, kvm_vcpu_events);
vmm_sys_util::ioctl_iow_nr!(KVM_IRQ_LINE, KVMIO, 0x61, kvm_irq_level);
vmm_sys_util::ioctl_ior_nr!(KVM_GET_MP_STATE, KVMIO, 0x98, kvm_mp_state);

/// The exit status of a process stopped by a filter.
pub const EXIT_FORBIDDEN_SYSCALL: i32 = 1;

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    #[error("cannot build the {kind:?} seccomp filter: {source}")]
    Build {
        kind: ThreadKind,
        /// Shared: every thread of a kind is told the same cached error.
        source: std::sync::Arc<seccompiler::BackendError>,
    },
    #[error("cannot install the {kind:?} seccomp filter: {source}")]
    Install {
        kind: ThreadKind,
        source: seccompiler::Error,
    },
    #[error("cannot install the SIGSYS handler: {0}")]
    Handler(std::io::Error),
}

/// The kinds of threads, each with its own filter (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ThreadKind {
    Vcpu,
    Timers,
    Controller,
    Service,
    Trace,
    Api,
    Runner,
}

impl ThreadKind {
    /// Every kind; [`ThreadKind::Runner`] last.
    pub const ALL: [ThreadKind; 7] = [
        ThreadKind::Vcpu,
        ThreadKind::Timers,
        ThreadKind::Controller,
        ThreadKind::Service,
        ThreadKind::Trace,
        ThreadKind::Api,
        ThreadKind::Runner,
    ];

    /// Every kind but [`ThreadKind::Runner`] (a thread that starts one
    /// run after another stays unconfined).
    pub fn all_but_runner() -> &'static [ThreadKind] {
        &Self::ALL[..Self::ALL.len() - 1]
    }

    fn bit(self) -> u8 {
        1 << self as u8
    }
}

/// The kinds whose threads install their filters (a bit per kind).
static ENABLED: AtomicU8 = AtomicU8::new(0);

/// Whether threads of `kind` install their filter.
pub fn enabled(kind: ThreadKind) -> bool {
    ENABLED.load(Ordering::Acquire) & kind.bit() != 0
}

type Rules = BTreeMap<i64, Vec<SeccompRule>>;

/// What building a filter's rules can fail with.
type BuildError = seccompiler::BackendError;

fn cond(arg: u8, op: Op, value: u64) -> Result<Cond, BuildError> {
    Cond::new(arg, Len::Qword, op, value)
}

fn rule(conds: Vec<Cond>) -> Result<SeccompRule, BuildError> {
    SeccompRule::new(conds)
}

fn allow(rules: &mut Rules, calls: &[libc::c_long]) {
    for &c in calls {
        rules.insert(c, Vec::new());
    }
}

/// Allowed when argument `arg` has none of the bits of `mask` set.
fn without_bits(arg: u8, mask: u64) -> Result<Vec<SeccompRule>, BuildError> {
    Ok(vec![rule(vec![cond(arg, Op::MaskedEq(mask), 0)?])?])
}

/// The calls every thread needs.
fn common() -> Result<Rules, BuildError> {
    let mut r = Rules::new();
    allow(
        &mut r,
        &[
            libc::SYS_futex,
            libc::SYS_write,
            libc::SYS_close,
            libc::SYS_munmap,
            libc::SYS_madvise,
            libc::SYS_brk,
            libc::SYS_mremap,
            libc::SYS_rt_sigreturn,
            libc::SYS_rt_sigprocmask,
            libc::SYS_sigaltstack,
            libc::SYS_getpid,
            libc::SYS_gettid,
            libc::SYS_clock_gettime,
            libc::SYS_clock_nanosleep,
            libc::SYS_nanosleep,
            libc::SYS_sched_yield,
            libc::SYS_sched_getaffinity,
            // The engine dispatches from whichever thread wakes a vCPU
            // (a timer, a device, a stop) and binds the vCPU's thread then.
            libc::SYS_sched_setaffinity,
            // A wake from any of those threads may cut the running vCPU's
            // quantum and re-arm that vCPU's timer (a timer of this process).
            libc::SYS_timer_settime,
            // `dispatch = "ranked"`: whichever thread decides ranks the
            // vCPU threads it concerns (their real-time priority), runs
            // its own decision above them (reading its class first, to
            // give it back), and reads the halted state of a vCPU it
            // preempts in KVM's statistics file of that vCPU.
            libc::SYS_sched_setattr,
            libc::SYS_sched_getattr,
            libc::SYS_pread64,
            // A ranked vCPU's quantum timer is deleted where its vCPU is
            // dropped (the VM's controller, at the VM's end).
            libc::SYS_timer_delete,
            libc::SYS_getrandom,
            libc::SYS_restart_syscall,
            libc::SYS_exit,
            libc::SYS_exit_group,
        ],
    );
    let exec = libc::PROT_EXEC as u64;
    r.insert(libc::SYS_mmap, without_bits(2, exec)?);
    r.insert(libc::SYS_mprotect, without_bits(2, exec)?);
    // Signals to this process's own threads only.
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as u64;
    r.insert(libc::SYS_tgkill, vec![rule(vec![cond(0, Op::Eq, pid)?])?]);
    r.insert(
        libc::SYS_fcntl,
        vec![rule(vec![cond(1, Op::Eq, libc::F_GETFD as u64)?])?],
    );
    Ok(r)
}

/// `openat` for reading only (no O_CREAT, O_WRONLY, O_RDWR or O_TRUNC).
fn read_only_openat(r: &mut Rules) -> Result<(), BuildError> {
    let write_flags = (libc::O_ACCMODE | libc::O_CREAT | libc::O_TRUNC) as u64;
    r.insert(libc::SYS_openat, without_bits(2, write_flags)?);
    Ok(())
}

/// Read-only file access (no O_CREAT, O_WRONLY or O_RDWR).
fn read_only_files(r: &mut Rules) -> Result<(), BuildError> {
    read_only_openat(r)?;
    allow(
        r,
        &[
            libc::SYS_read,
            libc::SYS_statx,
            libc::SYS_newfstatat,
            libc::SYS_fstat,
            libc::SYS_lseek,
        ],
    );
    Ok(())
}

/// What [`crate::whole_file`] needs beyond `openat` and `write`: flushing
/// the temporary file and its directory, renaming it over the target, and
/// removing it when the write failed; and the working directory, which
/// `tempfile` joins to a relative target's directory.
fn whole_file_calls(r: &mut Rules) {
    allow(
        r,
        &[
            libc::SYS_getcwd,
            libc::SYS_fsync,
            libc::SYS_fdatasync,
            libc::SYS_rename,
            libc::SYS_renameat,
            libc::SYS_renameat2,
            libc::SYS_unlink,
            libc::SYS_unlinkat,
        ],
    );
}

fn rules_for(kind: ThreadKind) -> Result<Rules, BuildError> {
    let mut r = common()?;
    match kind {
        ThreadKind::Vcpu => {
            let ioctls = [
                KVM_RUN(),
                KVM_GET_REGS(),
                KVM_SET_REGS(),
                KVM_GET_SREGS(),
                KVM_SET_SREGS(),
                KVM_INTERRUPT(),
                KVM_NMI(),
                // Pacer's own local APIC keeps KVM's IA32_APIC_BASE in
                // step with the guest's writes (CPUID.1:EDX.APIC follows it).
                KVM_SET_MSRS(),
                // Whether KVM still holds an NMI (a fixed interrupt waits).
                KVM_GET_VCPU_EVENTS(),
                // Under policy host a device line a vCPU raises (pc-testdev,
                // the serial port) is a pin of KVM's I/O APIC.
                KVM_IRQ_LINE(),
                // `dispatch = "kvm-irqchip"`: whether KVM's local APIC
                // holds the vCPU halted.
                KVM_GET_MP_STATE(),
            ];
            let rules = ioctls
                .iter()
                .map(|&req| rule(vec![Cond::new(1, Len::Dword, Op::Eq, req)?]))
                .collect::<Result<Vec<_>, _>>()?;
            r.insert(libc::SYS_ioctl, rules);
            // Under policy host a vCPU thread reads its own scheduling
            // counters (/proc/self/task/<tid>/sched*) as it ends.
            read_only_files(&mut r)?;
            allow(&mut r, &[libc::SYS_timer_create]);
            // Devices append the guest's results from vCPU threads; a
            // failed write cuts the log back to its last whole line.
            allow(&mut r, &[libc::SYS_ftruncate]);
        }
        // The watcher reads KVM's per-vCPU statistics files (common).
        ThreadKind::Timers => {}
        ThreadKind::Trace => {
            // Read-only: glibc's malloc reads /proc/sys/vm/overcommit_memory
            // the first time a thread's heap shrinks (the drain's buffers
            // grow and shrink with the event rate).
            read_only_openat(&mut r)?;
            allow(&mut r, &[libc::SYS_read]);
        }
        ThreadKind::Controller => {
            read_only_files(&mut r)?;
            // A results log cut back to its last whole line after a
            // failed write (`results::ResultsLog`).
            allow(&mut r, &[libc::SYS_ftruncate]);
        }
        ThreadKind::Service => {
            allow(
                &mut r,
                &[libc::SYS_rt_sigtimedwait, libc::SYS_openat, libc::SYS_statx],
            );
            // The snapshot is written whole (`whole_file`).
            whole_file_calls(&mut r);
        }
        ThreadKind::Api => {
            allow(
                &mut r,
                &[
                    libc::SYS_poll,
                    libc::SYS_ppoll,
                    libc::SYS_accept4,
                    libc::SYS_read,
                    libc::SYS_recvfrom,
                    // Its socket, removed as the run ends.
                    libc::SYS_unlink,
                    libc::SYS_unlinkat,
                    // A control.jsonl line the disk did not take whole is
                    // cut off (`audit`).
                    libc::SYS_ftruncate,
                ],
            );
            // Read-only: glibc's malloc reads /proc/sys/vm/overcommit_memory
            // the first time a thread's heap shrinks (the API's answers
            // come and go).
            read_only_openat(&mut r)?;
            // Answers on connected sockets only: no address to send to.
            r.insert(libc::SYS_sendto, vec![rule(vec![cond(4, Op::Eq, 0)?])?]);
            // The peer's credentials, nothing else of a socket's options.
            r.insert(
                libc::SYS_getsockopt,
                vec![rule(vec![
                    cond(1, Op::Eq, libc::SOL_SOCKET as u64)?,
                    cond(2, Op::Eq, libc::SO_PEERCRED as u64)?,
                ])?],
            );
        }
        ThreadKind::Runner => {
            read_only_files(&mut r)?;
            // The --json file may be created anywhere the user names,
            // written whole (`whole_file`).
            allow(&mut r, &[libc::SYS_openat, libc::SYS_mkdir]);
            whole_file_calls(&mut r);
        }
    }
    Ok(r)
}

/// The compiled filter of `kind`.
pub fn filter(kind: ThreadKind) -> Result<BpfProgram, SeccompError> {
    build(kind).map_err(|e| SeccompError::Build {
        kind,
        source: std::sync::Arc::new(e),
    })
}

fn build(kind: ThreadKind) -> Result<BpfProgram, BuildError> {
    let f = SeccompFilter::new(
        rules_for(kind)?,
        SeccompAction::Trap,
        SeccompAction::Allow,
        TargetArch::x86_64,
    )?;
    BpfProgram::try_from(f)
}

fn compiled(kind: ThreadKind) -> Result<&'static BpfProgram, SeccompError> {
    /// Every kind's filter, or the first kind whose filter failed and why.
    type Filters = Result<Vec<BpfProgram>, (ThreadKind, std::sync::Arc<BuildError>)>;
    static FILTERS: OnceLock<Filters> = OnceLock::new();
    let all = FILTERS.get_or_init(|| {
        ThreadKind::ALL
            .iter()
            .map(|&k| build(k).map_err(|e| (k, std::sync::Arc::new(e))))
            .collect()
    });
    match all {
        // In ThreadKind::ALL's order, which has every kind.
        Ok(list) => Ok(&list[ThreadKind::ALL
            .iter()
            .position(|k| *k == kind)
            .unwrap_or_default()]),
        Err((which, source)) => Err(SeccompError::Build {
            kind: *which,
            source: source.clone(),
        }),
    }
}

// ---------------------------------------------------------------------------
// The SIGSYS handler: one line, then exit.

/// Longest thread name kept for the message.
const NAME_MAX: usize = 48;

thread_local! {
    /// This thread's name and kind, for the SIGSYS message (const-initialised
    /// and destructor-free: readable from a signal handler).
    static WHO: std::cell::Cell<([u8; NAME_MAX], usize)> =
        const { std::cell::Cell::new(([0; NAME_MAX], 0)) };
}

/// Names of the system calls a confined thread is most likely to try.
const NAMES: &[(libc::c_long, &str)] = &[
    (libc::SYS_socket, "socket"),
    (libc::SYS_connect, "connect"),
    (libc::SYS_bind, "bind"),
    (libc::SYS_execve, "execve"),
    (libc::SYS_execveat, "execveat"),
    (libc::SYS_clone, "clone"),
    (libc::SYS_clone3, "clone3"),
    (libc::SYS_fork, "fork"),
    (libc::SYS_vfork, "vfork"),
    (libc::SYS_ptrace, "ptrace"),
    (libc::SYS_kill, "kill"),
    (libc::SYS_tgkill, "tgkill"),
    (libc::SYS_openat, "openat"),
    (libc::SYS_open, "open"),
    (libc::SYS_read, "read"),
    (libc::SYS_ioctl, "ioctl"),
    (libc::SYS_mmap, "mmap"),
    (libc::SYS_mprotect, "mprotect"),
    (libc::SYS_mkdir, "mkdir"),
    (libc::SYS_unlink, "unlink"),
    (libc::SYS_rename, "rename"),
    (libc::SYS_getcwd, "getcwd"),
    (libc::SYS_statx, "statx"),
    (libc::SYS_newfstatat, "newfstatat"),
    (libc::SYS_fcntl, "fcntl"),
    (libc::SYS_prctl, "prctl"),
    (libc::SYS_sched_setaffinity, "sched_setaffinity"),
    (libc::SYS_timer_create, "timer_create"),
    (libc::SYS_rt_sigaction, "rt_sigaction"),
    (libc::SYS_rt_sigtimedwait, "rt_sigtimedwait"),
    (libc::SYS_mount, "mount"),
    (libc::SYS_setuid, "setuid"),
    (libc::SYS_eventfd2, "eventfd2"),
    (libc::SYS_poll, "poll"),
    (libc::SYS_writev, "writev"),
    (libc::SYS_pread64, "pread64"),
    (libc::SYS_readlink, "readlink"),
    (libc::SYS_accept4, "accept4"),
    (libc::SYS_getsockopt, "getsockopt"),
    (libc::SYS_recvfrom, "recvfrom"),
    (libc::SYS_sendto, "sendto"),
    (libc::SYS_ppoll, "ppoll"),
    (libc::SYS_unlink, "unlink"),
    (libc::SYS_unlinkat, "unlinkat"),
];

/// Append `s` to `buf` at `*n` (truncating).
fn put(buf: &mut [u8], n: &mut usize, s: &[u8]) {
    for &b in s {
        if *n < buf.len() {
            buf[*n] = b;
            *n += 1;
        }
    }
}

fn put_num(buf: &mut [u8], n: &mut usize, mut v: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    put(buf, n, &digits[i..]);
}

extern "C" fn on_sigsys(_sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // Async-signal-safe only: a stack buffer, write(2), _exit(2).
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers; for
    // SIGSYS from seccomp, `si_syscall` is the int at offset 24 (the
    // `_sigsys` member of the union, after the 16-byte header and the
    // 8-byte `_call_addr`).
    let nr = unsafe { *(info as *const u8).add(24).cast::<i32>() } as libc::c_long;
    let (name, len) = WHO.with(|w| w.get());
    let mut buf = [0u8; 256];
    let mut n = 0;
    put(&mut buf, &mut n, b"pacer: thread ");
    put(&mut buf, &mut n, &name[..len.min(NAME_MAX)]);
    put(&mut buf, &mut n, b" made a forbidden system call, ");
    match NAMES.iter().find(|(k, _)| *k == nr) {
        Some((_, s)) => put(&mut buf, &mut n, s.as_bytes()),
        None => put(&mut buf, &mut n, b"number"),
    }
    put(&mut buf, &mut n, b" (");
    put_num(&mut buf, &mut n, nr as u64);
    put(
        &mut buf,
        &mut n,
        b"); stopping (seccomp filter; --no-seccomp disables the filters)\n",
    );
    // SAFETY: write and _exit are async-signal-safe and allowed by every
    // filter; `buf[..n]` is initialised.
    unsafe {
        libc::write(2, buf.as_ptr().cast(), n);
        libc::_exit(EXIT_FORBIDDEN_SYSCALL);
    }
}

/// Turn the filters of `kinds` on for threads that start from now on:
/// build every filter (so an error shows before anything runs) and install
/// the SIGSYS handler. (`pacer run --compare` leaves the runner out: its
/// thread starts one run after another.)
pub fn enable(kinds: &[ThreadKind]) -> Result<(), SeccompError> {
    for kind in ThreadKind::ALL {
        compiled(kind)?;
    }
    // SAFETY: a sigaction with a valid SA_SIGINFO handler that only uses
    // async-signal-safe calls.
    let r = unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigsys as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGSYS, &sa, std::ptr::null_mut())
    };
    if r != 0 {
        return Err(SeccompError::Handler(std::io::Error::last_os_error()));
    }
    let bits = kinds.iter().fold(0, |b, k| b | k.bit());
    ENABLED.store(bits, Ordering::Release);
    // The engine's own threads (vCPUs, timers, the trace's drain) start
    // in `vcpu_engine`: it calls this hook as each one starts.
    vcpu_engine::thread_hook::set_thread_start_hook(Some(engine_thread_started));
    Ok(())
}

/// Confine the calling thread to `kind`'s system calls (a no-op unless
/// [`enable`]d).
pub fn install(kind: ThreadKind) -> Result<(), SeccompError> {
    if !enabled(kind) {
        return Ok(());
    }
    apply(kind)
}

/// Install `kind`'s filter on the calling thread, enabled or not.
fn apply(kind: ThreadKind) -> Result<(), SeccompError> {
    let prog = compiled(kind)?;
    let mut name = [0u8; NAME_MAX];
    let current = std::thread::current();
    let label = current.name().unwrap_or("main").as_bytes();
    let len = label.len().min(NAME_MAX);
    name[..len].copy_from_slice(&label[..len]);
    WHO.with(|w| w.set((name, len)));
    seccompiler::apply_filter(prog).map_err(|source| SeccompError::Install { kind, source })
}

/// The filter of a thread `vcpu_engine` starts.
fn engine_thread_started(kind: vcpu_engine::thread_hook::EngineThread) {
    use vcpu_engine::thread_hook::EngineThread;
    install_or_warn(match kind {
        EngineThread::Vcpu => ThreadKind::Vcpu,
        EngineThread::Timers => ThreadKind::Timers,
        EngineThread::Trace => ThreadKind::Trace,
    });
}

/// [`install`], logging a failure instead of returning it (a thread start
/// has nowhere to send the error; the run goes on unconfined).
pub fn install_or_warn(kind: ThreadKind) {
    if let Err(e) = install(kind) {
        log::warn!("{e}; this thread runs without its filter");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_filter_builds() {
        for kind in ThreadKind::ALL {
            let f = filter(kind).unwrap();
            assert!(!f.is_empty(), "{kind:?}");
        }
        // The KVM request numbers as the kernel headers define them.
        assert_eq!(KVM_RUN(), 0xae80);
        assert_eq!(KVM_NMI(), 0xae9a);
        assert_eq!(KVM_INTERRUPT(), 0x4004_ae86);
        assert_eq!(KVM_GET_SREGS(), 0x8138_ae83);
        assert_eq!(KVM_SET_MSRS(), 0x4008_ae89);
        assert_eq!(KVM_GET_VCPU_EVENTS(), 0x8040_ae9f);
        assert_eq!(KVM_IRQ_LINE(), 0x4008_ae61);
    }

    #[test]
    fn a_confined_thread_can_still_do_its_work() {
        // A filter never leaves its thread. (That a forbidden call is
        // stopped is shown by the `seccomp` integration test, in a child
        // process: the trap ends the process.)
        std::thread::spawn(|| {
            apply(ThreadKind::Timers).unwrap();
            let (tx, rx) = std::sync::mpsc::channel();
            tx.send(1).unwrap();
            assert_eq!(rx.recv().unwrap(), 1);
            let v: Vec<u8> = vec![7; 4 << 20];
            assert_eq!(v[12345], 7);
            std::thread::sleep(std::time::Duration::from_millis(1));
        })
        .join()
        .unwrap();
    }
}
