//! The per-thread seccomp filters (skipped without /dev/kvm).
//!
//! A forbidden system call made on a vCPU thread while it handles a guest
//! exit is stopped: the test runs itself again as a child process (the trap
//! ends the process) whose guest writes a port, and the handler on the
//! vCPU thread calls socket(2); an allowed call in the same place goes
//! through. The control API's thread may answer on its sockets and read
//! its peers' uids, and nothing more (a child process again, no /dev/kvm
//! needed). And every policy, dispatch and workload runs confined under
//! the `pacer` binary, whose filters are on by default.

mod common;

use common::pacer;

use common::{kvm_or_skip, tiny_elf, vm_table, TempDir};
use std::process::Command;
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use vcpu_engine::vcpu::{VcpuExitHandler, VcpuExitReason, VcpuHandle, VcpuRunner};
use vm_memory::{Address, GuestMemoryBackend, GuestMemoryRegion};
use vmm::vm::open_kvm;
use vmm::{boot, memory};

/// The environment variable that makes the ignored test below the child.
const CHILD: &str = "PACER_SECCOMP_CHILD";
/// The port the guest writes.
const PROBE_PORT: u16 = 0x80;

/// Makes one system call on the vCPU thread when the guest writes the
/// probe port: socket(2) (forbidden) or write(2) (allowed).
struct Probe {
    call: String,
    done: Mutex<Option<Sender<i64>>>,
}

impl VcpuExitHandler for Probe {
    fn pio_in(&self, _vcpu: u32, _port: u16, data: &mut [u8]) {
        data.fill(0xff);
    }
    fn pio_out(&self, _vcpu: u32, port: u16, _data: &[u8]) {
        if port != PROBE_PORT {
            return;
        }
        // SAFETY: plain system calls with valid arguments.
        let r = unsafe {
            match self.call.as_str() {
                "socket" => libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) as i64,
                _ => libc::write(2, b"probe\n".as_ptr().cast(), 6) as i64,
            }
        };
        if let Some(tx) = self.done.lock().unwrap().take() {
            let _ = tx.send(r);
        }
    }
    fn mmio_read(&self, _vcpu: u32, _addr: u64, data: &mut [u8]) {
        data.fill(0xff);
    }
    fn mmio_write(&self, _vcpu: u32, _addr: u64, _data: &[u8]) {}
    fn stopping(&self) -> bool {
        false
    }
    fn vcpu_failed(&self, _vcpu: u32, _reason: &VcpuExitReason) {}
}

/// The child: a one-vCPU VM whose guest writes the probe port, with the
/// filters enabled. Runs only when the parent sets [`CHILD`].
#[test]
#[ignore = "run by forbidden_system_calls_on_a_vcpu_thread_are_stopped in a child process"]
fn child_makes_a_system_call_on_a_vcpu_thread() {
    let Ok(call) = std::env::var(CHILD) else {
        return;
    };
    let dir = TempDir::new(&format!("seccomp-child-{call}"));
    // mov al, 0x42; out 0x80, al; hlt; jmp hlt
    let kernel = dir.0.join("probe.elf");
    std::fs::write(
        &kernel,
        tiny_elf(&[0xb0, 0x42, 0xe6, 0x80, 0xf4, 0xeb, 0xfd]),
    )
    .unwrap();
    let kvm = open_kvm().unwrap();
    let vm = kvm.create_vm().unwrap();
    let mem = memory::create_guest_memory(4).unwrap();
    for (slot, r) in mem.iter().enumerate() {
        let region = kvm_bindings::kvm_userspace_memory_region {
            slot: slot as u32,
            flags: 0,
            guest_phys_addr: r.start_addr().raw_value(),
            memory_size: r.len(),
            userspace_addr: r.as_ptr() as u64,
        };
        // SAFETY: `mem` outlives the VM in this function; slots do not overlap.
        unsafe { vm.set_user_memory_region(region) }.unwrap();
    }
    let vcpu = vm.create_vcpu(0).unwrap();
    vcpu.set_cpuid2(
        &kvm.get_supported_cpuid(kvm_bindings::KVM_MAX_CPUID_ENTRIES)
            .unwrap(),
    )
    .unwrap();
    let k = boot::elf::load_kernel(&mem, &kernel, None).unwrap();
    let cl = boot::elf::build_cmdline("", 1, 1).unwrap();
    boot::elf::write_boot_structures(&mem, &cl, &k).unwrap();
    vcpu.set_regs(&boot::regs::long_mode_regs(k.entry, 0))
        .unwrap();
    let mut sregs = vcpu.get_sregs().unwrap();
    boot::regs::long_mode_sregs(&mut sregs);
    vcpu.set_sregs(&sregs).unwrap();

    vmm::seccomp::enable(&vmm::seccomp::ThreadKind::ALL).unwrap();
    let (tx, rx) = channel();
    let probe = Arc::new(Probe {
        call,
        done: Mutex::new(Some(tx)),
    });
    let runner = VcpuRunner::new(0, vcpu, probe);
    let mut handle = VcpuHandle::spawn("child", runner, None).unwrap();
    handle.start().unwrap();
    let r = rx.recv_timeout(Duration::from_secs(30)).unwrap();
    println!("SYSCALL RETURNED {r}");
    handle.request_exit();
    handle.join();
}

fn child(call: &str) -> (Option<i32>, String, String) {
    child_test("child_makes_a_system_call_on_a_vcpu_thread", CHILD, call)
}

/// Run the ignored test `test` of this binary as a child process, with
/// `env` set to `call`: its exit code, stdout and stderr.
fn child_test(test: &str, env: &str, call: &str) -> (Option<i32>, String, String) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            test,
            "--nocapture",
            "--test-threads=1",
        ])
        .env(env, call)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn forbidden_system_calls_on_a_vcpu_thread_are_stopped() {
    if !kvm_or_skip("forbidden_system_calls_on_a_vcpu_thread_are_stopped") {
        return;
    }
    let (code, out, err) = child("socket");
    assert_eq!(
        code,
        Some(vmm::seccomp::EXIT_FORBIDDEN_SYSCALL),
        "{out}{err}"
    );
    assert!(
        err.contains("pacer: thread child/vcpu0 made a forbidden system call, socket (41)"),
        "{err}"
    );
    assert!(!out.contains("SYSCALL RETURNED"), "{out}");
    // The same place, an allowed call: it returns and the vCPU carries on.
    let (code, out, err) = child("write");
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("SYSCALL RETURNED 6"), "{out}{err}");
    assert!(!err.contains("forbidden"), "{err}");
}

#[test]
fn every_policy_dispatch_and_workload_runs_confined() {
    if !kvm_or_skip("every_policy_dispatch_and_workload_runs_confined") {
        return;
    }
    let dir = TempDir::new("seccomp-matrix");
    let vms =
        |vcpus: u32, w: &str| vm_table("v", w).replace("vcpus = 1", &format!("vcpus = {vcpus}"));
    let workloads: &[(u32, &str, i32)] = &[
        (
            2,
            "mixed mixed=sleep,spinlock interval_us=500 duration_ms=200",
            0,
        ),
        (2, "pingpong duration_ms=200", 0),
        (1, "burst duration_ms=200", 0),
        (1, "triple_fault", 1),
        (1, "panic", 1),
    ];
    for (policy, dispatch) in [
        ("host", "threads"),
        ("haiku", "threads"),
        ("haiku", "workers"),
        ("global-rr", "workers"),
    ] {
        for (vcpus, w, want) in workloads {
            let cfg = dir.config(&format!(
                "[host]\ncpus = \"0-1\"\npolicy = \"{policy}\"\ndispatch = \"{dispatch}\"\nlog_dir = \"logs\"\n\n{}",
                vms(*vcpus, w)
            ));
            let json = dir.0.join("r.json");
            let (code, out, err) = pacer(&[
                "run",
                cfg.to_str().unwrap(),
                "--status",
                "--json",
                json.to_str().unwrap(),
            ]);
            let what = format!("{policy}/{dispatch} {w}");
            assert!(!err.contains("forbidden system call"), "{what}: {err}");
            assert_eq!(code, *want, "{what}: {out}{err}");
            assert!(json.exists(), "{what}");
        }
    }
    // Several runs from one thread (--compare): confined as well.
    let cfg = dir.config(&format!(
        "[host]\nlog_dir = \"logs\"\n\n{}",
        vms(2, "pingpong duration_ms=100")
    ));
    let json = dir.0.join("compare.json");
    let (code, out, err) = pacer(&[
        "run",
        cfg.to_str().unwrap(),
        "--compare",
        "haiku,host",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(!err.contains("forbidden system call"), "{err}");
    assert_eq!(code, 0, "{out}{err}");
    assert!(json.exists());
    // A waker queued behind a hog on one CPU: its wakes come from the
    // guest-timer thread and cut the hog's quantum, re-arming the hog's
    // timer from there (both dispatch mechanisms).
    for dispatch in ["threads", "workers"] {
        let cfg = dir.config(&format!(
            "[host]\ncpus = \"0\"\npolicy = \"haiku\"\ndispatch = \"{dispatch}\"\nlog_dir = \"logs\"\n\n{}{}",
            vm_table("waker", "burst duration_ms=300"),
            vm_table("hog", "cpu duration_ms=300") + "priority = 5\n"
        ));
        let (code, out, err) = pacer(&["run", cfg.to_str().unwrap()]);
        assert!(!err.contains("forbidden system call"), "{dispatch}: {err}");
        assert_eq!(code, 0, "{dispatch}: {out}{err}");
    }
    // A timeout, confined too.
    let cfg = dir.config(&format!(
        "[host]\npolicy = \"haiku\"\nlog_dir = \"logs\"\n\n{}",
        vm_table("idle", "idle").replace("timeout_s = 60", "timeout_s = 0.5")
    ));
    let (code, out, err) = pacer(&["run", cfg.to_str().unwrap()]);
    assert!(!err.contains("forbidden system call"), "{err}");
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("[idle] FAILED: timeout"), "{out}");
}

#[test]
fn a_guest_write_of_ia32_apic_base_runs_confined_under_pacers_own_apic() {
    if !kvm_or_skip("a_guest_write_of_ia32_apic_base_runs_confined_under_pacers_own_apic") {
        return;
    }
    // The vCPU thread hands the value on to KVM (KVM_SET_MSRS) as well
    // as to Pacer's local APIC.
    let dir = TempDir::new("seccomp-apic-base");
    let kernel = dir.0.join("apicbase.elf");
    std::fs::write(
        &kernel,
        tiny_elf(&[
            0xb9, 0x1b, 0x00, 0x00, 0x00, // mov ecx, 0x1b (IA32_APIC_BASE)
            0x0f, 0x32, // rdmsr
            0x0f, 0x30, // wrmsr (the same value)
            0x31, 0xc0, // xor eax, eax
            0x66, 0xba, 0x08, 0x0e, // mov dx, 0xE08
            0xef, // out dx, eax
            0xf4, // hlt
        ]),
    )
    .unwrap();
    let cfg = dir.config(&format!(
        "[host]\npolicy = \"haiku\"\nlog_dir = \"logs\"\n\n[[vm]]\nname = \"apicbase\"\nvcpus = 1\n\
         memory_mib = 4\nkernel = \"{}\"\ntimeout_s = 30\n",
        kernel.display()
    ));
    let (code, out, err) = pacer(&["run", cfg.to_str().unwrap(), "--exit-status-from-guest"]);
    assert!(!err.contains("forbidden system call"), "{err}");
    assert_eq!(code, 0, "{out}{err}");
}

#[test]
fn a_traced_run_is_confined_too() {
    if !kvm_or_skip("a_traced_run_is_confined_too") {
        return;
    }
    // The drain thread (pacer/trace) writes the file it was given under
    // its own filter; vCPU, timer and waker threads record into rings.
    let dir = TempDir::new("seccomp-trace");
    let vm = vm_table("pp", "pingpong duration_ms=200").replace("vcpus = 1", "vcpus = 2");
    for dispatch in ["threads", "workers"] {
        let cfg = dir.config(&format!(
            "[host]\ncpus = \"0-1\"\npolicy = \"haiku\"\ndispatch = \"{dispatch}\"\nlog_dir = \"logs\"\n\n{vm}"
        ));
        let trace = dir.0.join(format!("{dispatch}.trace"));
        let (code, out, err) = pacer(&[
            "run",
            cfg.to_str().unwrap(),
            "--trace",
            trace.to_str().unwrap(),
        ]);
        assert!(!err.contains("forbidden system call"), "{dispatch}: {err}");
        if code != 0 {
            // A ping-pong that stalls (a lost wake-up, seen once in a full
            // run and not since): the trace's events say where.
            let (_, dump, _) = pacer(&["trace", "dump", trace.to_str().unwrap()]);
            panic!("{dispatch}: exit {code}\n{out}{err}\ntrace:\n{dump}");
        }
        assert!(err.contains("scheduling trace:"), "{err}");
        let t = pacer::trace::TraceFile::read(&trace).unwrap();
        assert!(t.complete && !t.events.is_empty(), "{dispatch}");
    }
}

/// The run's document written to a path relative to the working directory
/// (as `ci/demo.sh` writes `target/demo/*.json`) after the VMs ran, under
/// the main thread's filter: the whole-file write resolves the relative
/// directory against the working directory (getcwd).
#[test]
fn a_relative_json_path_is_written_under_the_filter() {
    if !kvm_or_skip("a_relative_json_path_is_written_under_the_filter") {
        return;
    }
    let dir = TempDir::new("seccomp-json");
    let cfg = dir.config(&format!(
        "[host]\ncpus = \"0\"\npolicy = \"haiku\"\ndispatch = \"threads\"\nlog_dir = \"logs\"\n\n{}",
        vm_table("a", "cpu duration_ms=100")
    ));
    std::fs::create_dir_all(dir.0.join("out")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_pacer"))
        .current_dir(&dir.0)
        .args(["run", cfg.to_str().unwrap(), "--json", "out/run.json"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("forbidden system call"), "{err}");
    assert_eq!(out.status.code(), Some(0), "{err}");
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.0.join("out/run.json")).unwrap()).unwrap();
    assert_eq!(
        doc["runs"][0]["vms"].as_array().map(Vec::len),
        Some(1),
        "{doc}"
    );
}

/// The environment variable that makes the ignored API test the child.
const API_CHILD: &str = "PACER_SECCOMP_API_CHILD";

/// The child: a thread confined as the control API's makes one call,
/// named by [`API_CHILD`]. Runs only when the parent sets it.
#[test]
#[ignore = "run by the_api_thread_may_serve_its_socket_and_nothing_more in a child process"]
fn child_makes_a_system_call_on_the_api_thread() {
    let Ok(call) = std::env::var(API_CHILD) else {
        return;
    };
    // Made before the filter, as the API's listeners are.
    let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
    vmm::seccomp::enable(&vmm::seccomp::ThreadKind::ALL).unwrap();
    let r = std::thread::Builder::new()
        .name("pacer/api".into())
        .spawn(move || {
            vmm::seccomp::install(vmm::seccomp::ThreadKind::Api).unwrap();
            use std::os::fd::AsRawFd;
            let fd = a.as_raw_fd();
            let mut buf = [0u8; 64];
            let mut len = buf.len() as libc::socklen_t;
            // SAFETY: plain system calls with valid arguments.
            unsafe {
                match call.as_str() {
                    "peercred" => libc::getsockopt(
                        fd,
                        libc::SOL_SOCKET,
                        libc::SO_PEERCRED,
                        buf.as_mut_ptr().cast(),
                        &mut len,
                    ) as i64,
                    "sotype" => libc::getsockopt(
                        fd,
                        libc::SOL_SOCKET,
                        libc::SO_TYPE,
                        buf.as_mut_ptr().cast(),
                        &mut len,
                    ) as i64,
                    "send" => libc::send(fd, b"x".as_ptr().cast(), 1, libc::MSG_NOSIGNAL) as i64,
                    // Grow this thread's malloc heap and give it back: glibc
                    // reads /proc/sys/vm/overcommit_memory the first time
                    // it shrinks a thread's heap.
                    "heap" => {
                        let blocks: Vec<Vec<u8>> =
                            (0..100_000).map(|i| vec![i as u8; 512]).collect();
                        let n = blocks.len() as i64;
                        drop(blocks);
                        n
                    }
                    "socket" => libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0) as i64,
                    "create" => libc::open(
                        c"/tmp/pacer-seccomp-api-probe".as_ptr(),
                        libc::O_WRONLY | libc::O_CREAT,
                        0o600,
                    ) as i64,
                    "connect" => {
                        let addr: libc::sockaddr_un = std::mem::zeroed();
                        libc::connect(
                            fd,
                            (&addr as *const libc::sockaddr_un).cast(),
                            std::mem::size_of::<libc::sockaddr_un>() as u32,
                        ) as i64
                    }
                    other => panic!("unknown call {other}"),
                }
            }
        })
        .unwrap()
        .join()
        .unwrap();
    println!("SYSCALL RETURNED {r}");
}

#[test]
fn the_api_thread_may_serve_its_socket_and_nothing_more() {
    let run = |call: &str| {
        child_test(
            "child_makes_a_system_call_on_the_api_thread",
            API_CHILD,
            call,
        )
    };
    for allowed in ["peercred", "send", "heap"] {
        let (code, out, err) = run(allowed);
        assert_eq!(code, Some(0), "{allowed}: {out}{err}");
        assert!(out.contains("SYSCALL RETURNED"), "{allowed}: {out}{err}");
    }
    for (forbidden, name) in [
        ("sotype", "getsockopt"),
        ("socket", "socket"),
        ("create", "openat"),
        ("connect", "connect"),
    ] {
        let (code, out, err) = run(forbidden);
        assert_eq!(
            code,
            Some(vmm::seccomp::EXIT_FORBIDDEN_SYSCALL),
            "{forbidden}: {out}{err}"
        );
        assert!(
            err.contains(&format!(
                "pacer: thread pacer/api made a forbidden system call, {name}"
            )),
            "{forbidden}: {err}"
        );
        assert!(!out.contains("SYSCALL RETURNED"), "{out}");
    }
}
