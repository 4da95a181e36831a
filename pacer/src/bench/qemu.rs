//! The QEMU peer: the same guest images under `qemu-system-x86_64` with
//! KVM, as an extra `qemu` column. QEMU boots an ELF through `-kernel`
//! only when it carries a PVH entry (the Xen ELF note
//! XEN_ELFNOTE_PHYS32_ENTRY, type 18, in a PT_NOTE segment); a bzImage
//! always. An image QEMU cannot boot makes the column `n/a` with the
//! reason ([`qemu_boots`]).
//!
//! Each VM of a cell is one QEMU process (`-smp` = its vCPUs, pinned to its
//! core set, its serial console to a file). The bench guest prints one
//! `pacer-result vcpu=N workload=...` line per vCPU on the console
//! (guests/PROTOCOL.md): that VM is done when every vCPU has reported
//! (QEMU knows nothing of Pacer's exit port, so it is stopped then). A
//! Linux VM runs the UnixBench-style suite and is done at its `UB done`
//! line (it powers off by itself too; `unixbench.rs` reads its lines).
//! Either is also done when QEMU exits, or at the cell's time limit
//! (stopped: `timeout`).

use super::cells::VmBoot;
use super::metrics::{self, Sample};
use super::procs::{self, Look, Proc, ProcOutcome};
use super::unixbench::SuiteSpec;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use vcpu_engine::host_cpus::HostCpuSet;
use vmm::boot::linux::PLATFORM_CMDLINE;
use vmm::boot::notes;

/// The QEMU binary the peer runs.
pub const QEMU_BINARY: &str = "qemu-system-x86_64";

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum QemuError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Elf { path: PathBuf, message: String },
    #[error("cannot start {QEMU_BINARY}: {0}")]
    Spawn(std::io::Error),
    #[error("{0}")]
    Io(std::io::Error),
    #[error("stopped by a signal")]
    Stopped,
}

/// The PVH entry point of an ELF64 image, if it has one (the note reader
/// is the boot path's, `boot::notes`; a file whose headers point past its
/// end has no notes).
pub fn pvh_entry(image: &[u8]) -> Result<Option<u64>, String> {
    if image.get(0..4) != Some(b"\x7fELF") || image.get(4) != Some(&2) {
        return Err("not an ELF64 file".into());
    }
    Ok(notes::scan_bytes(image).pvh_entry)
}

/// Where `qemu-system-x86_64` is, from `PATH`.
pub fn find_qemu() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(QEMU_BINARY))
        .find(|p| p.is_file())
}

/// CPU models tried in order: the host's, then a portable model with what
/// the bench guest needs (x2APIC, TSC deadline) for KVMs where QEMU cannot
/// set up `host` (this project's software KVM refuses an MSR it sets).
pub const CPU_MODELS: [&str; 2] = ["host", "qemu64,+x2apic,+tsc-deadline"];

/// A usable QEMU on this host.
#[derive(Debug, Clone)]
pub struct QemuPeer {
    pub binary: PathBuf,
    /// `qemu-system-x86_64 --version`'s first line, and the CPU model.
    pub version: String,
    /// `-cpu` (one of [`CPU_MODELS`]).
    pub cpu: String,
    /// Passed on the bench guest's command line as Pacer does
    /// (KVM_GET_TSC_KHZ).
    pub tsc_khz: Option<u32>,
}

/// Whether QEMU's `-kernel` boots `image`: a bzImage (setup header
/// "HdrS"), or an ELF with a PVH entry.
pub fn qemu_boots(image: &Path) -> Result<(), String> {
    let bytes = std::fs::read(image).map_err(|e| format!("{}: {e}", image.display()))?;
    if bytes.get(0x202..0x206) == Some(b"HdrS") {
        return Ok(());
    }
    match pvh_entry(&bytes).map_err(|e| format!("{}: {e}", image.display()))? {
        Some(_) => Ok(()),
        None => Err(format!("no PVH entry in {}", image.display())),
    }
}

/// One VM of a cell under QEMU.
#[derive(Debug, Clone)]
pub struct QemuVm {
    pub name: String,
    pub group: String,
    pub vcpus: u32,
    pub memory_mib: u64,
    pub cpus: HostCpuSet,
    pub boot: VmBoot,
}

impl QemuVm {
    /// The guest has said all it will say.
    fn finished(&self, console: &str) -> bool {
        match &self.boot {
            VmBoot::Bench { .. } => {
                let (_, reported) = metrics::console_samples(console, "", "");
                reported.len() >= self.vcpus as usize || guest_refused(console)
            }
            VmBoot::Linux { .. } => SuiteSpec::finished(console),
        }
    }

    /// Its samples from the console, or what is missing.
    fn samples(&self, console: &str) -> Result<Vec<Sample>, String> {
        match &self.boot {
            VmBoot::Bench { .. } => {
                let (samples, reported) =
                    metrics::console_samples(console, &self.name, &self.group);
                if reported.len() >= self.vcpus as usize {
                    Ok(samples)
                } else {
                    Err(format!(
                        "{} of {} vCPUs reported",
                        reported.len(),
                        self.vcpus
                    ))
                }
            }
            VmBoot::Linux { suite, .. } => {
                suite.samples(console, &self.name, &self.group, self.vcpus)
            }
        }
    }
}

/// The host's TSC frequency as KVM reports it to a vCPU.
fn kvm_tsc_khz() -> Option<u32> {
    let kvm = kvm_ioctls::Kvm::new().ok()?;
    let vm = kvm.create_vm().ok()?;
    let vcpu = vm.create_vcpu(0).ok()?;
    vcpu.get_tsc_khz().ok()
}

impl QemuPeer {
    /// The peer, or why the `qemu` column is `n/a`.
    pub fn detect() -> Result<QemuPeer, String> {
        let binary = find_qemu().ok_or_else(|| {
            format!("{QEMU_BINARY} is not installed (Debian: apt-get install qemu-system-x86)")
        })?;
        if !Path::new("/dev/kvm").exists() {
            return Err("no /dev/kvm".into());
        }
        let version = Command::new(&binary)
            .arg("--version")
            .output()
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .next()
                    .unwrap_or("")
                    .to_string()
            })
            .map_err(|e| format!("{}: {e}", binary.display()))?;
        let mut refused = Vec::new();
        let cpu = CPU_MODELS
            .iter()
            .find(|m| match probe_cpu(&binary, m) {
                Ok(()) => true,
                Err(why) => {
                    refused.push(format!("-cpu {m}: {why}"));
                    false
                }
            })
            .ok_or_else(|| format!("QEMU cannot start a KVM vCPU here ({})", refused.join("; ")))?;
        let version = if refused.is_empty() {
            format!("{version}, -cpu {cpu}")
        } else {
            format!("{version}, -cpu {cpu} ({})", refused.join("; "))
        };
        Ok(QemuPeer {
            binary,
            version,
            cpu: cpu.to_string(),
            tsc_khz: kvm_tsc_khz(),
        })
    }

    /// QEMU's arguments for one VM.
    pub fn args(&self, vm: &QemuVm, console: &Path) -> Vec<String> {
        let (kernel, initrd, append) = match &vm.boot {
            VmBoot::Bench { kernel, args } => {
                let mut append = format!("{args} vcpus={}", vm.vcpus);
                if let Some(khz) = self.tsc_khz {
                    append += &format!(" tsc_khz={khz}");
                }
                (kernel, None, append)
            }
            VmBoot::Linux { suite, cmdline } => (
                &suite.kernel,
                suite.initramfs.as_ref(),
                format!("{PLATFORM_CMDLINE} {cmdline}"),
            ),
        };
        let mut args: Vec<String> = [
            "-accel",
            "kvm",
            "-cpu",
            &self.cpu,
            "-machine",
            "q35",
            "-nodefaults",
            "-no-reboot",
            "-display",
            "none",
            "-monitor",
            "none",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend([
            "-smp".into(),
            vm.vcpus.to_string(),
            "-m".into(),
            vm.memory_mib.to_string(),
            "-kernel".into(),
            kernel.display().to_string(),
        ]);
        if let Some(initrd) = initrd {
            args.extend(["-initrd".into(), initrd.display().to_string()]);
        }
        args.extend([
            "-append".into(),
            append,
            "-serial".into(),
            format!("file:{}", console.display()),
        ]);
        args
    }

    /// Run the VMs of one cell at once; consoles (`NAME.console.log`) and
    /// QEMU's own messages (`NAME.qemu.log`) go to `dir`.
    pub fn run_vms(
        &self,
        vms: &[QemuVm],
        dir: &Path,
        limit: Duration,
        should_stop: &dyn Fn() -> bool,
    ) -> Result<Vec<ProcOutcome>, QemuError> {
        std::fs::create_dir_all(dir).map_err(QemuError::Io)?;
        let start = Instant::now();
        let mut procs = Vec::new();
        for vm in vms {
            let console = dir.join(format!("{}.console.log", vm.name));
            let log = dir.join(format!("{}.qemu.log", vm.name));
            let mut cmd = Command::new(&self.binary);
            cmd.args(self.args(vm, &console));
            // Dropping what started already stops it.
            let p = Proc::spawn(&vm.name, &mut cmd, &vm.cpus, console, log, false)
                .map_err(QemuError::Spawn)?;
            procs.push(p);
        }
        let look = |i: usize, console: &str, qemu_says: &str| {
            if vms[i].finished(console) {
                Look::Done
            } else if let Some(why) = guest_stopped_by_kvm(qemu_says) {
                // QEMU pauses a guest KVM could not run and waits: the cell
                // would sit out its whole time limit.
                Look::Stuck(format!("QEMU stopped the guest: {why}"))
            } else {
                Look::Running
            }
        };
        let timed_out = procs::watch(&mut procs, start, limit, should_stop, &look)
            .map_err(|_| QemuError::Stopped)?;
        let samples = |i: usize, console: &str| vms[i].samples(console);
        Ok(procs::outcomes(
            &procs,
            timed_out,
            limit,
            &samples,
            &guest_refused,
        ))
    }
}

/// Start QEMU with this CPU model, paused (`-S`): an error setting up the
/// vCPU shows within a fraction of a second; one still running after
/// [`PROBE_WAIT`] is taken as working.
fn probe_cpu(binary: &Path, model: &str) -> Result<(), String> {
    let mut child = Command::new(binary)
        .args([
            "-accel",
            "kvm",
            "-cpu",
            model,
            "-machine",
            "q35",
            "-nodefaults",
        ])
        .args(["-display", "none", "-monitor", "none", "-S", "-m", "16"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    let start = Instant::now();
    while start.elapsed() < PROBE_WAIT {
        if let Ok(Some(status)) = child.try_wait() {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                use std::io::Read;
                let _ = e.read_to_string(&mut err);
            }
            let first = err.lines().next().unwrap_or("").trim().to_string();
            return Err(format!("exited ({status}) {first}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    Ok(())
}

/// How long a paused QEMU must survive to count as working.
const PROBE_WAIT: Duration = Duration::from_millis(1500);

/// QEMU's message when KVM could not run the guest (it then pauses the VM
/// instead of exiting): `KVM internal error. Suberror: 1` and the like.
fn guest_stopped_by_kvm(qemu_log: &str) -> Option<String> {
    let mut lines = qemu_log.lines().map(str::trim);
    let mut why = vec![lines
        .find(|l| l.starts_with("KVM internal error"))?
        .to_string()];
    // What follows: "extra data[N]" lines, a reason, then the register dump.
    for line in lines {
        if let Some(rip) = line.split_whitespace().find(|w| w.starts_with("RIP=")) {
            why.push(format!("at RIP {}", &rip[4..]));
            break;
        }
        if !line.starts_with("extra data") && !line.contains('=') && !line.is_empty() {
            why.push(line.to_string());
        }
    }
    Some(why.join(", "))
}

/// The guest's console says it does not know the workload.
fn guest_refused(console: &str) -> bool {
    console.contains("unknown workload")
}

#[cfg(test)]
mod tests {
    use super::*;
    use vmm::test_images::{elf64_with_notes as elf_with_notes, note};

    #[test]
    fn a_guest_kvm_could_not_run_is_noticed() {
        // What QEMU 7.2 printed for Linux's first CMPXCHG16B on this
        // machine's software KVM (shortened).
        let log = "qemu-system-x86_64: warning: host doesn't support requested feature\n\
                   KVM internal error. Suberror: 1\n\
                   extra data[0]: 0x0000000000000001\n\
                   extra data[1]: 0x74204dc70f48f00f\n\
                   emulation failure\n\
                   RAX=ffff888004840040 RBX=0000000000000000\n\
                   RIP=ffffffff8132ae50 RFL=00000246 [---Z-P-] CPL=0 II=0 A20=1 SMM=0 HLT=0\n";
        assert_eq!(
            guest_stopped_by_kvm(log).as_deref(),
            Some("KVM internal error. Suberror: 1, emulation failure, at RIP ffffffff8132ae50")
        );
        assert_eq!(
            guest_stopped_by_kvm("qemu-system-x86_64: warning: x\n"),
            None
        );
    }

    #[test]
    fn finds_the_pvh_note() {
        let mut notes = note(b"GNU", 3, &[1, 2, 3, 4, 5, 6, 7, 8]);
        notes.extend(note(b"Xen", 18, &0x10_0040u32.to_le_bytes()));
        assert_eq!(pvh_entry(&elf_with_notes(&notes)), Ok(Some(0x10_0040)));
        // Another Xen note type, or no notes: no PVH entry.
        let other = note(b"Xen", 17, &0x1234u32.to_le_bytes());
        assert_eq!(pvh_entry(&elf_with_notes(&other)), Ok(None));
        assert_eq!(pvh_entry(&elf_with_notes(&[])), Ok(None));
        assert!(pvh_entry(b"MZ....").is_err());
        // A header pointing past the end: no notes, not a panic.
        let mut bad = elf_with_notes(&notes);
        bad.truncate(100);
        assert_eq!(pvh_entry(&bad), Ok(None));
    }

    #[test]
    fn qemu_boots_the_bench_guest_and_bzimages_not_bare_elfs() {
        assert_eq!(qemu_boots(guests::bench_guest_elf()), Ok(()));
        let dir = std::env::temp_dir().join(format!("pacer-qemu-boots-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let bare = dir.join("bare.elf");
        std::fs::write(&bare, elf_with_notes(&[])).unwrap();
        let e = qemu_boots(&bare).unwrap_err();
        assert!(
            e.starts_with("no PVH entry in") && e.contains("bare.elf"),
            "{e}"
        );
        let mut bz = vec![0u8; 0x400];
        bz[0x202..0x206].copy_from_slice(b"HdrS");
        let bz_path = dir.join("bzImage");
        std::fs::write(&bz_path, bz).unwrap();
        assert_eq!(qemu_boots(&bz_path), Ok(()));
        assert!(qemu_boots(&dir.join("missing")).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
        if let Ok(p) = QemuPeer::detect() {
            assert!(p.version.contains("QEMU"), "{p:?}");
        }
    }

    fn vm(boot: VmBoot) -> QemuVm {
        QemuVm {
            name: "a".into(),
            group: "a".into(),
            vcpus: 2,
            memory_mib: 32,
            cpus: HostCpuSet::default(),
            boot,
        }
    }

    #[test]
    fn command_line() {
        let peer = QemuPeer {
            binary: "qemu".into(),
            version: String::new(),
            cpu: "host".into(),
            tsc_khz: Some(2000),
        };
        let bench = vm(VmBoot::Bench {
            kernel: "/g.elf".into(),
            args: "workload=cpu duration_ms=5".into(),
        });
        let a = peer.args(&bench, Path::new("/d/a.log"));
        let s = a.join(" ");
        assert!(s.contains("-accel kvm -cpu host"), "{s}");
        assert!(s.contains("-smp 2 -m 32 -kernel /g.elf -append"), "{s}");
        assert!(a.contains(&"workload=cpu duration_ms=5 vcpus=2 tsc_khz=2000".to_string()));
        assert!(s.ends_with("-serial file:/d/a.log"), "{s}");

        let params = [
            ("kernel", "/l/vmlinux"),
            ("initramfs", "/l/initramfs.cpio.gz"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let suite = SuiteSpec::from_params(&params).unwrap();
        let cmdline = suite.guest_cmdline(2);
        let a = peer.args(&vm(VmBoot::Linux { suite, cmdline }), Path::new("/d/l.log"));
        let s = a.join(" ");
        assert!(
            s.contains("-kernel /l/vmlinux -initrd /l/initramfs.cpio.gz -append"),
            "{s}"
        );
        assert!(
            a.contains(&"console=ttyS0 reboot=k ub.copies=1,2 ub.end=poweroff".to_string()),
            "{s}"
        );
    }
}
