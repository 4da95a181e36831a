//! The config's checks, end to end on small files.

use super::*;
use crate::boot::{self, GuestKind};
use crate::config::host_resources::HostResources;
use std::path::PathBuf;
use std::time::Duration;
use vcpu_engine::host_cpus::HostCpuSet;
use vcpu_engine::DispatchKind;
use vcpu_sched::{Mode, SchedClass};

struct Fixture {
    dir: PathBuf,
}

impl Fixture {
    fn new(tag: &str) -> Fixture {
        let dir = std::env::temp_dir().join(format!(
            "pacer-config-{tag}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        // One 1 MiB segment at 1 MiB: needs 2 MiB of RAM.
        let elf = crate::test_images::elf_with_loads(&[(0x10_0000, 0x10_0000)]);
        std::fs::write(dir.join("kernel.elf"), elf).unwrap();
        std::fs::write(dir.join("not-elf.bin"), b"MZ not an elf file....").unwrap();
        let mut mb = boot::multiboot::tests::header(0);
        mb.extend([0xf4u8; 16]);
        let mb = boot::multiboot::tests::elf32(0x40_0000, &mb, 0);
        std::fs::write(dir.join("mb.flat"), mb).unwrap();
        // It occupies memory up to 4 MiB as it starts.
        let bz = boot::linux::tests::bzimage(0x020F, 0x7f, 0x1000);
        std::fs::write(dir.join("bzImage"), bz).unwrap();
        let vmlinux = crate::test_images::vmlinux(0x40_0000);
        std::fs::write(dir.join("vmlinux"), vmlinux).unwrap();
        std::fs::write(dir.join("env"), b"TEST_DEVICE=0\n").unwrap();
        Fixture { dir }
    }
    fn parse(&self, text: &str) -> Result<Config, ConfigError> {
        self.parse_with(text, &Overrides::default())
    }
    fn parse_with(&self, text: &str, o: &Overrides) -> Result<Config, ConfigError> {
        self.parse_as(text, &self.dir.join("pacer.toml"), o)
    }
    /// As if the text were the file `path`.
    fn parse_as(
        &self,
        text: &str,
        path: &std::path::Path,
        o: &Overrides,
    ) -> Result<Config, ConfigError> {
        let host = HostInfo {
            online: HostCpuSet::parse_list("0-3").unwrap(),
            resources: HostResources::default(),
        };
        Config::parse_overridden(text, path, &host, o)
    }
    fn errors(&self, text: &str) -> String {
        match self.parse(text) {
            Ok(_) => panic!("config unexpectedly valid:\n{text}"),
            Err(e) => e.to_string(),
        }
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

const GOOD: &str = r#"
[host]
cpus = "0-1"
policy = "haiku"
mode = "power-saving"
log_dir = "logs"

[[vm]]
name = "a"
vcpus = 2
memory_mib = 64
kernel = "kernel.elf"
cpus = [0, 1]
priority = 20
workload = { name = "cpu", duration_ms = 500, report_ms = 100 }
console = "both"
timeout_s = 2.5

[[vm]]
name = "b-2"
vcpus = 1
memory_mib = 2
kernel = "kernel.elf"
cmdline = "debug=1"
workload = "cpu report_ms=50"
"#;

#[test]
fn good_config() {
    let fx = Fixture::new("good");
    let c = fx.parse(GOOD).unwrap();
    assert_eq!(c.host.cpus.to_list(), "0-1");
    assert_eq!(c.host.policy.as_str(), "haiku");
    assert_eq!(c.host.mode, Mode::PowerSaving);
    assert_eq!(c.host.dispatch, DispatchKind::default());
    assert!(!c.host.smt_isolation);
    assert_eq!(c.host.log_dir, fx.dir.join("logs"));
    assert_eq!(c.vms.len(), 2);
    let a = &c.vms[0];
    assert_eq!((a.vcpus, a.memory_mib, a.priority), (2, 64, 20));
    assert_eq!(a.kernel, fx.dir.join("kernel.elf"));
    assert_eq!(a.cmdline, "workload=cpu duration_ms=500 report_ms=100");
    assert_eq!(a.console, Console::Both);
    assert_eq!(a.timeout, Some(Duration::from_millis(2500)));
    let b = &c.vms[1];
    assert_eq!(b.cpus.to_list(), "0-1");
    assert_eq!(b.priority, 10);
    assert_eq!(b.class, SchedClass::Timeshare);
    assert_eq!(b.cmdline, "debug=1 workload=cpu report_ms=50");
    assert_eq!(b.console, Console::Log);
    assert_eq!(b.timeout, None);
}

#[test]
fn defaults_without_host_table() {
    let fx = Fixture::new("defaults");
    let c = fx
        .parse("[[vm]]\nname=\"x\"\nvcpus=1\nmemory_mib=16\nkernel=\"kernel.elf\"\n")
        .unwrap();
    assert_eq!(c.host.cpus.to_list(), "0-3");
    assert_eq!(c.host.log_dir, fx.dir.join("pacer-logs"));
    assert_eq!(c.vms[0].cpus.to_list(), "0-3");
}

#[test]
fn unknown_field_names_field_and_line() {
    let fx = Fixture::new("unknown");
    let text = GOOD.replace("priority = 20", "priority = 20\nfrobnicate = 1");
    let e = fx.errors(&text);
    assert!(e.contains("frobnicate"), "{e}");
    // `frobnicate` is on line 15 of the modified text.
    assert!(e.contains("pacer.toml:15:1:"), "{e}");
    let e = fx.errors("[host]\nspeed = 3\n");
    assert!(e.contains("speed") && e.contains(":2:1:"), "{e}");
}

#[test]
fn core_set_outside_host() {
    let fx = Fixture::new("outside");
    let e = fx.errors(&GOOD.replace("cpus = [0, 1]", "cpus = \"1-2\""));
    assert!(e.contains("vm[0].cpus"), "{e}");
    assert!(e.contains("pacer.toml:13:8:"), "{e}");
    assert!(e.contains("outside the host CPU set 0-1"), "{e}");
    // [host] cpus beyond the online CPUs.
    let e = fx.errors(&GOOD.replace("cpus = \"0-1\"", "cpus = \"0-7\""));
    assert!(e.contains("host.cpus") && e.contains("not online"), "{e}");
    assert!(e.contains(":3:8:"), "{e}");
}

#[test]
fn zero_vcpus() {
    let fx = Fixture::new("zero");
    let e = fx.errors(&GOOD.replace("vcpus = 2", "vcpus = 0"));
    assert!(e.contains("vm[0].vcpus") && e.contains(":10:9:"), "{e}");
    let e = fx.errors(&GOOD.replace("vcpus = 2", "vcpus = 255"));
    assert!(e.contains("vm[0].vcpus"), "{e}");
}

#[test]
fn missing_kernel_file() {
    let fx = Fixture::new("kernel");
    let e = fx.errors(&GOOD.replace(
        "kernel = \"kernel.elf\"\ncmdline",
        "kernel = \"nope.elf\"\ncmdline",
    ));
    assert!(e.contains("vm[1].kernel") && e.contains("nope.elf"), "{e}");
    assert!(e.contains(":23:10:"), "{e}");
    // Not an ELF64 x86-64 file.
    let e = fx.errors(&GOOD.replace(
        "kernel = \"kernel.elf\"\ncmdline",
        "kernel = \"not-elf.bin\"\ncmdline",
    ));
    assert!(
        e.contains("vm[1].kernel") && e.contains("not a kernel Pacer can boot"),
        "{e}"
    );
    // A missing `kernel` key altogether.
    let e = fx.errors("[[vm]]\nname=\"x\"\nvcpus=1\nmemory_mib=16\n");
    assert!(e.contains("vm[0].kernel: missing"), "{e}");
}

#[test]
fn an_unbuilt_guest_image_names_the_script_that_builds_it() {
    let fx = Fixture::new("image-missing");
    // The bench guest's default place, not built yet.
    let e = fx.errors(&GOOD.replace(
        "kernel = \"kernel.elf\"\ncmdline",
        "kernel = \"../guests/out/bench-guest.elf\"\ncmdline",
    ));
    assert!(
        e.contains("vm[1].kernel: expected a readable file, found ")
            && e.contains("guests/out/bench-guest.elf: No such file or directory")
            && e.contains("(the bench guest is not built yet: run `bash guests/build.sh`)"),
        "{e}"
    );
    // The Linux image's place names its own script.
    let e = fx.errors(&GOOD.replace(
        "kernel = \"kernel.elf\"\ncmdline",
        "kernel = \"guests/out/linux/vmlinux\"\ncmdline",
    ));
    assert!(e.contains("run `bash guests/linux/build.sh`"), "{e}");
    // Anywhere else, a missing file is only missing.
    let e = fx.errors(&GOOD.replace(
        "kernel = \"kernel.elf\"\ncmdline",
        "kernel = \"out/bench-guest.elf\"\ncmdline",
    ));
    assert!(
        e.contains("No such file") && !e.contains("not built yet"),
        "{e}"
    );
}

const MB: &str = "[[vm]]\nname = \"kut\"\nvcpus = 2\nmemory_mib = 16\nkernel = \"mb.flat\"\n";

#[test]
fn multiboot_guest_from_the_kernel_format() {
    let fx = Fixture::new("mb");
    let text = format!(
        "{MB}cmdline = \"cpuid  x\"\nmodules = [\"env\", {{ path = \"env\", cmdline = \"a=1\" }}]\ncpuid = {{ x2apic = false }}\n"
    );
    let c = fx.parse(&text).unwrap();
    let v = &c.vms[0];
    assert_eq!(v.guest, GuestKind::Multiboot);
    // The user's command line, unchanged: no workload or VMM keys.
    assert_eq!(v.cmdline, "cpuid  x");
    assert_eq!(v.modules.len(), 2);
    assert_eq!(v.modules[0].path, fx.dir.join("env"));
    assert_eq!(v.modules[1].cmdline, "a=1");
    assert_eq!(v.cpuid.x2apic, Some(false));
    assert_eq!(v.cpuid.tsc_deadline, None);
    // The bench guest's reserved keys are the user's business here.
    assert!(fx.parse(&format!("{MB}cmdline = \"vcpus=3\"\n")).is_ok());
    // The bench guest defaults to "bench".
    let c = fx.parse(GOOD).unwrap();
    assert_eq!(c.vms[0].guest, GuestKind::Bench);
    assert!(c.vms[0].modules.is_empty());
}

#[test]
fn guest_kind_mismatches_name_the_field() {
    let fx = Fixture::new("kinds");
    let e = fx.errors(&format!("{MB}workload = \"cpu\"\n"));
    assert!(
        e.contains("vm[0].workload") && e.contains("only the bench guest"),
        "{e}"
    );
    assert!(e.contains(":6:12:"), "{e}");
    let e = fx.errors(&format!("{MB}guest = \"bench\"\n"));
    assert!(e.contains("vm[0].guest") && e.contains("ELF64"), "{e}");
    let e = fx.errors(&GOOD.replace("console = \"both\"", "guest = \"multiboot\""));
    assert!(
        e.contains("vm[0].guest") && e.contains("no multiboot header"),
        "{e}"
    );
    let e = fx.errors(&GOOD.replace("console = \"both\"", "modules = [\"env\"]"));
    assert!(
        e.contains("vm[0].modules[0]") && e.contains("only multiboot"),
        "{e}"
    );
    let e = fx.errors(&format!("{MB}initrd = \"env\"\n"));
    assert!(e.contains("vm[0].initrd") && e.contains("modules"), "{e}");
    let e = fx.errors(&format!("{MB}initramfs = \"env\"\n"));
    assert!(e.contains("vm[0].initramfs"), "{e}");
    let e = fx.errors(&format!("{MB}modules = [\"nope\"]\n"));
    assert!(e.contains("vm[0].modules[0]") && e.contains("nope"), "{e}");
    let e = fx.errors(&format!("{MB}modules = [{{ path = \"env\", size = 3 }}]\n"));
    assert!(
        e.contains("vm[0].modules[0]") && e.contains("a module is a path"),
        "{e}"
    );
    let e = fx.errors(&format!("{MB}modules = [\"env\", 7]\n"));
    assert!(
        e.contains("vm[0].modules[1]") && e.contains(":6:19:"),
        "{e}"
    );
    let e = fx.errors(&format!("{MB}cpuid = {{ x2apic = 1 }}\n"));
    assert!(
        e.contains(":6:20:")
            && e.contains("vm[0].cpuid.x2apic")
            && e.contains("expected true or false"),
        "{e}"
    );
    let e = fx.errors(&format!("{MB}cpuid = {{ avx = false }}\n"));
    assert!(e.contains("avx"), "{e}");
}

const LINUX: &str = "[[vm]]\nname = \"deb\"\nvcpus = 2\nmemory_mib = 512\nkernel = \"bzImage\"\n";

#[test]
fn linux_guests() {
    let fx = Fixture::new("linux");
    // A bzImage is a Linux guest; its cmdline is the user's alone (the
    // platform's words are added at boot); initrd is its initramfs.
    let c = fx
        .parse(&format!(
            "{LINUX}initrd = \"env\"\ncmdline = \"quiet vcpus=3\"\n"
        ))
        .unwrap();
    let v = &c.vms[0];
    assert_eq!(v.guest, GuestKind::Linux);
    assert_eq!(v.cmdline, "quiet vcpus=3");
    assert_eq!(v.initrd, Some(fx.dir.join("env")));
    // So is an ELF64 vmlinux (it has "Linux" notes) ...
    let c = fx.parse(&LINUX.replace("bzImage", "vmlinux")).unwrap();
    assert_eq!(c.vms[0].guest, GuestKind::Linux);
    // Its segments (16 MiB + 4 MiB) must fit.
    let e = fx.errors(
        &LINUX
            .replace("bzImage", "vmlinux")
            .replace("memory_mib = 512", "memory_mib = 16"),
    );
    assert!(
        e.contains("vm[0].memory_mib: expected at least 20 MiB for the kernel (it occupies memory up to 0x1400000 as it starts), found 16"),
        "{e}"
    );
    // ... which cannot boot as the bench guest.
    let e = fx.errors(&format!(
        "{}guest = \"bench\"\n",
        LINUX.replace("bzImage", "vmlinux")
    ));
    assert!(e.contains("vm[0].guest") && e.contains("vmlinux"), "{e}");
    // The bench guest's ELF is no Linux kernel.
    let e = fx.errors(&format!(
        "{}guest = \"linux\"\n",
        LINUX.replace("bzImage", "kernel.elf")
    ));
    assert!(
        e.contains("vm[0].guest") && e.contains("not a vmlinux"),
        "{e}"
    );
    // No workloads.
    let e = fx.errors(&format!("{LINUX}workload = \"cpu\"\n"));
    assert!(
        e.contains("vm[0].workload") && e.contains("only the bench guest"),
        "{e}"
    );
    // `initramfs` is the same key as `initrd`; not both.
    let c = fx.parse(&format!("{LINUX}initramfs = \"env\"\n")).unwrap();
    assert_eq!(c.vms[0].initrd, Some(fx.dir.join("env")));
    let e = fx.errors(&format!("{LINUX}initrd = \"env\"\ninitramfs = \"env\"\n"));
    assert!(
        e.contains(":7:13: vm[0].initramfs: expected one of `initrd` and `initramfs`"),
        "{e}"
    );
    // It must be a regular file that exists, named by its key.
    let e = fx.errors(&format!("{LINUX}initramfs = \"nope\"\n"));
    assert!(
        e.contains(":6:13: vm[0].initramfs: expected a readable file"),
        "{e}"
    );
    let e = fx.errors(&format!("{LINUX}initramfs = \".\"\n"));
    assert!(
        e.contains("vm[0].initramfs: expected a regular file"),
        "{e}"
    );
    // The kernel must be one Pacer boots: a bzImage with the 64-bit
    // entry.
    std::fs::write(
        fx.dir.join("old-bz"),
        boot::linux::tests::bzimage(0x020B, 0x7f, 0x1000),
    )
    .unwrap();
    let e = fx.errors(&LINUX.replace("bzImage", "old-bz"));
    assert!(
        e.contains(":5:10: vm[0].kernel:") && e.contains("no 64-bit entry"),
        "{e}"
    );
    // The kernel as it starts (4 MiB here), and the initramfs above
    // it, must fit.
    assert!(fx
        .parse(&LINUX.replace("memory_mib = 512", "memory_mib = 4"))
        .is_ok());
    let e = fx.errors(&LINUX.replace("memory_mib = 512", "memory_mib = 3"));
    assert!(
        e.contains("vm[0].memory_mib: expected at least 4 MiB for the kernel (it occupies memory up to 0x400000 as it starts), found 3"),
        "{e}"
    );
    std::fs::write(fx.dir.join("big"), vec![0u8; 3 << 20]).unwrap();
    let small = LINUX.replace("memory_mib = 512", "memory_mib = 6");
    let e = fx.errors(&format!("{small}initramfs = \"big\"\n"));
    assert!(
        e.contains("vm[0].memory_mib: expected at least 7 MiB")
            && e.contains("the initramfs (3145728 bytes), found 6"),
        "{e}"
    );
    assert!(fx
        .parse(&format!(
            "{}initrd = \"big\"\n",
            small.replace("= 6", "= 7")
        ))
        .is_ok());
}

#[test]
fn modules_must_fit_in_memory() {
    let fx = Fixture::new("mbsize");
    std::fs::write(fx.dir.join("big"), vec![0u8; 3 << 20]).unwrap();
    let e = fx.errors(&format!(
        "{}modules = [\"big\"]\n",
        MB.replace("memory_mib = 16", "memory_mib = 2")
    ));
    assert!(
        e.contains("vm[0].memory_mib") && e.contains("cannot hold"),
        "{e}"
    );
}

#[test]
fn duplicate_vm_names() {
    let fx = Fixture::new("dup");
    let e = fx.errors(&GOOD.replace("name = \"b-2\"", "name = \"a\""));
    assert!(e.contains("vm[1].name") && e.contains("duplicate"), "{e}");
    assert!(e.contains(":20:8:"), "{e}");
    let e = fx.errors(&GOOD.replace("name = \"b-2\"", "name = \"b 2\""));
    assert!(e.contains("vm[1].name"), "{e}");
}

#[test]
fn bad_policy() {
    let fx = Fixture::new("policy");
    let e = fx.errors(&GOOD.replace("policy = \"haiku\"", "policy = \"fifo\""));
    assert!(e.contains("fifo") && e.contains(":4:10:"), "{e}");
    // One spelling: the snake_case names of old are refused.
    let e = fx.errors(&GOOD.replace("policy = \"haiku\"", "policy = \"global_rr\""));
    assert!(e.contains("global-rr"), "{e}");
    let e = fx.errors(&GOOD.replace("mode = \"power-saving\"", "mode = \"power_saving\""));
    assert!(e.contains("power_saving"), "{e}");
}

#[test]
fn policy_refuses_what_it_cannot_honour() {
    let fx = Fixture::new("honour");
    // vm[0] has priority 20: only haiku honours timeshare priorities.
    let e = fx.errors(&GOOD.replace("policy = \"haiku\"", "policy = \"global-rr\""));
    assert!(
        e.contains("vm[0].priority") && e.contains("ignores timeshare priorities"),
        "{e}"
    );
    assert!(e.contains(":14:12:") && e.contains("(host.policy)"), "{e}");
    // The same refusal when --policy chose it.
    let o = Overrides {
        policy: Some("host".parse().unwrap()),
        ..Overrides::default()
    };
    let e = match fx.parse_with(GOOD, &o) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("host cannot honour priority 20"),
    };
    assert!(
        e.contains("vm[0].priority") && e.contains("(--policy)"),
        "{e}"
    );
    let no_prio = GOOD.replace("priority = 20\n", "");
    assert_eq!(
        fx.parse_with(&no_prio, &o).unwrap().host.policy.as_str(),
        "host"
    );
    // Realtime: a class of its own range; host refuses it.
    let rt = no_prio.replace("cpus = [0, 1]", "cpus = [0, 1]\nclass = \"realtime\"");
    let c = fx.parse(&rt).unwrap();
    assert_eq!(
        (c.vms[0].class, c.vms[0].priority),
        (SchedClass::Realtime, 100)
    );
    let e = fx.errors(&rt.replace(
        "class = \"realtime\"",
        "class = \"realtime\"\npriority = 20",
    ));
    assert!(e.contains("between 100 and 120"), "{e}");
    let e = match fx.parse_with(&rt, &o) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("host cannot honour realtime"),
    };
    assert!(e.contains("vm[0].class") && e.contains("realtime"), "{e}");
    // SMT isolation: haiku only.
    let smt = no_prio.replace(
        "log_dir = \"logs\"",
        "log_dir = \"logs\"\nsmt_isolation = true",
    );
    assert!(fx.parse(&smt).unwrap().host.smt_isolation);
    let e = fx.errors(&smt.replace("policy = \"haiku\"", "policy = \"pinned\""));
    assert!(
        e.contains("host.smt_isolation") && e.contains("pinned"),
        "{e}"
    );
    // eevdf (every timeshare vCPU at nice 0): priorities and SMT
    // isolation refused in the words of the other comparison policies,
    // the realtime class honoured.
    let eevdf = |t: &str| t.replace("policy = \"haiku\"", "policy = \"eevdf\"");
    let e = fx.errors(&eevdf(GOOD));
    assert!(
        e.contains("vm[0].priority")
            && e.contains("policy \"eevdf\" orders vCPUs by class only")
            && e.contains("(host.policy)"),
        "{e}"
    );
    let e = fx.errors(&eevdf(&smt));
    assert!(
        e.contains("host.smt_isolation") && e.contains("eevdf"),
        "{e}"
    );
    let c = fx.parse(&eevdf(&rt)).unwrap();
    assert_eq!(c.host.policy.as_str(), "eevdf");
    assert_eq!(c.vms[0].class, SchedClass::Realtime);
}

#[test]
fn dispatch_and_tunables() {
    let fx = Fixture::new("tunables");
    let text = GOOD.replace(
        "log_dir = \"logs\"",
        "log_dir = \"logs\"\ndispatch = \"workers\"\n\n[host.tunables]\nbursty_load = 300",
    );
    let c = fx.parse(&text).unwrap();
    assert_eq!(c.host.dispatch, DispatchKind::Workers);
    assert_eq!(c.host.tunables.bursty_load, 300);
    let e = fx.errors(&text.replace("bursty_load", "burst_load"));
    assert!(e.contains("burst_load"), "{e}");
}

#[test]
fn every_error_reported() {
    let fx = Fixture::new("many");
    let text = GOOD
        .replace("memory_mib = 64", "memory_mib = 1")
        .replace("priority = 20", "priority = 100")
        .replace("timeout_s = 2.5", "timeout_s = 0");
    let e = fx.errors(&text);
    for f in ["vm[0].memory_mib", "vm[0].priority", "vm[0].timeout_s"] {
        assert!(e.contains(f), "{f} missing in {e}");
    }
    let e = fx.errors(&GOOD.replace("log_dir = \"logs\"", "log_dir = \"kernel.elf\""));
    assert!(e.contains("host.log_dir") && e.contains(":6:11:"), "{e}");
    let e = fx.errors(&GOOD.replace("cmdline = \"debug=1\"", "cmdline = \"vcpus=3\""));
    assert!(e.contains("vm[1].cmdline"), "{e}");
}

proptest::proptest! {
    /// Any text, and the good config with any one line replaced, gives
    /// a config or diagnostics with valid positions, never a panic.
    #[test]
    fn never_panics(text in "\\PC{0,200}", line in 0usize..30, repl in "\\PC{0,40}") {
        let fx = Fixture::new("prop");
        let _ = fx.parse(&text);
        let mut lines: Vec<&str> = GOOD.lines().collect();
        if line < lines.len() {
            lines[line] = &repl;
        }
        let mutated = lines.join("\n");
        if let Err(ConfigError::Invalid { diagnostics, .. }) = fx.parse(&mutated) {
            for d in diagnostics {
                proptest::prop_assert!(d.line >= 1 && d.line <= mutated.lines().count() + 1);
            }
        }
    }
}

#[test]
fn line_col_counts() {
    assert_eq!(line_col("ab\ncd", 0), (1, 1));
    assert_eq!(line_col("ab\ncd", 4), (2, 2));
    assert_eq!(line_col("ab\n", 3), (2, 1));
}

#[test]
fn command_line_overrides_enter_before_the_config_is_validated() {
    let fx = Fixture::new("overrides");
    let dir = fx.dir.join("cli-logs");
    let o = Overrides {
        mode: Some(Mode::LowLatency),
        dispatch: Some(DispatchKind::Workers),
        log_dir: Some(dir.clone()),
        ..Overrides::default()
    };
    let c = fx.parse_with(GOOD, &o).unwrap();
    assert_eq!(
        (c.host.mode, c.host.dispatch, c.host.log_dir),
        (Mode::LowLatency, DispatchKind::Workers, dir)
    );
    // A mode under a policy without modes: refused, naming the file.
    let o = Overrides {
        policy: Some("host".parse().unwrap()),
        mode: Some(Mode::PowerSaving),
        ..Overrides::default()
    };
    let no_prio = GOOD.replace("priority = 20\n", "");
    let e = fx.parse_with(&no_prio, &o).unwrap_err();
    assert!(matches!(e, ConfigError::ModeWithoutModes { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("--mode power-saving: policy \"host\" has no mode"),
        "{e}"
    );
    // The file's own errors come first: one kind of answer at a time.
    let e = fx
        .parse_with(&no_prio.replace("vcpus = 2", "vcpus = 0"), &o)
        .unwrap_err();
    assert!(matches!(e, ConfigError::Invalid { .. }), "{e}");
    // A --log-dir under a file.
    let under_file = fx.dir.join("kernel.elf/logs");
    let o = Overrides {
        log_dir: Some(under_file.clone()),
        ..Overrides::default()
    };
    let e = fx.parse_with(GOOD, &o).unwrap_err();
    let start = format!(
        "--log-dir {}: expected a directory Pacer can create and write, but ",
        under_file.display()
    );
    assert!(e.to_string().starts_with(&start), "{e}");
}

#[test]
fn coschedule_defaults_to_relaxed_for_an_smp_vm_and_a_bad_value_names_its_place() {
    let fx = Fixture::new("coschedule");
    let c = fx.parse(GOOD).unwrap();
    // 2 vCPUs on CPUs 0-1: relaxed; 1 vCPU: off.
    assert_eq!(c.vms[0].coschedule, vcpu_sched::Coschedule::Relaxed);
    assert_eq!(c.vms[1].coschedule, vcpu_sched::Coschedule::Off);
    // Wider than its CPUs: relaxed too, and the dispatch stays ranked
    // (its queued siblings share the CPUs it owns there), with the 6 ms
    // slices: only a VM that names co-scheduling keeps the 2 ms table.
    let c = fx.parse(&GOOD.replace("vcpus = 2", "vcpus = 3")).unwrap();
    assert_eq!(c.vms[0].coschedule, vcpu_sched::Coschedule::Relaxed);
    assert!(!c.vms[0].coschedule_named);
    assert!(!c.coscheduled_wide());
    assert_eq!(c.host.dispatch, vcpu_engine::DispatchKind::Ranked);
    let c = fx
        .parse(&GOOD.replace("vcpus = 2", "vcpus = 3\ncoschedule = \"relaxed\""))
        .unwrap();
    assert!(c.vms[0].coschedule_named && c.coscheduled_wide());
    // Said: kept.
    let c = fx
        .parse(&GOOD.replace("priority = 20", "priority = 20\ncoschedule = \"off\""))
        .unwrap();
    assert_eq!(c.vms[0].coschedule, vcpu_sched::Coschedule::Off);
    let c = fx
        .parse(&GOOD.replace("priority = 20", "priority = 20\ncoschedule = \"relaxed\""))
        .unwrap();
    assert_eq!(c.vms[0].coschedule, vcpu_sched::Coschedule::Relaxed);
    assert_eq!(c.vms[0].spec().coschedule, vcpu_sched::Coschedule::Relaxed);
    let e = fx.errors(&GOOD.replace("priority = 20", "priority = 20\ncoschedule = \"gang\""));
    // `coschedule` is on line 15 of the modified text, its value at col 14.
    assert!(e.contains("pacer.toml:15:14:"), "{e}");
    assert!(
        e.contains("vm[0].coschedule: expected \"off\", \"relaxed\" or \"turns\", found \"gang\""),
        "{e}"
    );
}
/// A host of CPUs 0-1 under `policy` and one `[[vm]]` per entry of
/// `vms` (extra keys each), 1 vCPU unless the keys say otherwise.
fn bounded_config(policy: &str, vms: &[&str]) -> String {
    let mut s = format!("[host]\ncpus = \"0-1\"\npolicy = \"{policy}\"\n");
    for (i, keys) in vms.iter().enumerate() {
        let vcpus = if keys.contains("vcpus") {
            ""
        } else {
            "vcpus = 1\n"
        };
        s += &format!(
            "\n[[vm]]\nname = \"v{i}\"\n{vcpus}memory_mib = 64\nkernel = \"kernel.elf\"\n{keys}\n"
        );
    }
    s
}

const BOUNDED: &str = "latency_bound_us = 1000\nbound_budget = 10";

#[test]
fn latency_bounds_admitted_reach_every_vcpu() {
    let fx = Fixture::new("bounds-ok");
    let two = "vcpus = 2\nlatency_bound_us = 1000\nbound_budget = 10";
    let c = fx
        .parse(&bounded_config(
            "haiku",
            &[BOUNDED, BOUNDED, two, "", "priority = 40"],
        ))
        .unwrap();
    let b = |i: usize| c.vms[i].shares.latency_bound;
    let one = vcpu_sched::bound::LatencyBound {
        bound: 1_000_000,
        budget_permille: 100,
    };
    assert_eq!((b(0), b(1)), (Some(one), Some(one)));
    // Split evenly over the VM's two vCPUs.
    assert_eq!(
        b(2),
        Some(vcpu_sched::bound::LatencyBound {
            budget_permille: 50,
            ..one
        })
    );
    assert_eq!((b(3), b(4)), (None, None));
    // The engine takes it with the other shares.
    assert_eq!(c.vms[0].spec().shares.latency_bound, Some(one));
}

#[test]
fn latency_bound_keys_are_checked_with_their_place() {
    let fx = Fixture::new("bounds-keys");
    let e = fx.errors(&bounded_config("haiku", &["latency_bound_us = 1000"]));
    assert!(e.contains(":10:20: vm[0].latency_bound_us: expected `latency_bound_us` and `bound_budget` together, found only `latency_bound_us`"), "{e}");
    let e = fx.errors(&bounded_config("haiku", &["bound_budget = 10"]));
    assert!(
        e.contains("vm[0].bound_budget: expected `latency_bound_us` and `bound_budget` together"),
        "{e}"
    );
    for (keys, want) in [
        (
            "latency_bound_us = 0\nbound_budget = 10",
            "vm[0].latency_bound_us: expected a latency bound from 1 to 1000000 us, found 0",
        ),
        (
            "latency_bound_us = 1000001\nbound_budget = 10",
            "found 1000001",
        ),
        (
            "latency_bound_us = 1000\nbound_budget = 0",
            "vm[0].bound_budget: expected a bound budget from 1 to 100 %",
        ),
        ("latency_bound_us = 1000\nbound_budget = 101", "found 101"),
        (
            "latency_bound_us = 1000\nbound_budget = 10\nclass = \"realtime\"",
            "vm[0].latency_bound_us: expected a latency bound on a timeshare VM",
        ),
        (
            "latency_bound_us = 1000\nbound_budget = 10\nreservation = 20",
            "expected a reservation or a latency bound, found both",
        ),
    ] {
        let e = fx.errors(&bounded_config("haiku", &[keys]));
        assert!(e.contains(want), "{keys}: {e}");
    }
    for policy in ["global-rr", "pinned", "eevdf", "host"] {
        let e = fx.errors(&bounded_config(policy, &[BOUNDED]));
        assert!(
            e.contains(&format!(
                "vm[0].latency_bound_us: policy {policy} cannot promise a latency bound"
            )),
            "{policy}: {e}"
        );
    }
}

#[test]
fn latency_bounds_that_cannot_all_be_met_are_refused_with_the_arithmetic() {
    let fx = Fixture::new("bounds-admit");
    // Four bounds of 300 us at 20 %: (100 + 3 x 60) / (1 - 0.6) = 700 us.
    let tight = "latency_bound_us = 300\nbound_budget = 20";
    let e = fx.errors(&bounded_config("haiku", &[tight, tight, tight, tight, ""]));
    assert!(
        e.contains("vm[0].latency_bound_us: expected VM \"v0\"'s latency bound to cover the worst-case wait of its wakes, found 300 us < (kick 100 us + the other bounded vCPUs' bursts 180 us) / (1 - their budgets 60 %) = 700 us; the other bounded vCPUs: 3 of VMs \"v1\", \"v2\", \"v3\""),
        "{e}"
    );
    // Half the budget: (100 + 3 x 30) / (1 - 0.3) = 272 us, admitted.
    let roomy = "latency_bound_us = 300\nbound_budget = 10";
    fx.parse(&bounded_config("haiku", &[roomy, roomy, roomy, roomy]))
        .unwrap();
    // Budgets past the CPUs they may use.
    let big = "latency_bound_us = 1000000\nbound_budget = 80";
    let e = fx.errors(&bounded_config("haiku", &[big, big, big]));
    assert!(
        e.contains("expected the bounded VMs (\"v0\", \"v1\", \"v2\") to ask budgets within the 2 host CPU(s) they may use (0-1), found 240 % of one CPU in all, more than 200 %"),
        "{e}"
    );
    // Pinned to one CPU, the same two bounds no longer fit.
    let half = "latency_bound_us = 1000000\nbound_budget = 60\ncpus = \"1\"";
    let e = fx.errors(&bounded_config("haiku", &[half, half]));
    assert!(
        e.contains("within the 1 host CPU(s) they may use (1)"),
        "{e}"
    );
}

#[test]
fn the_bounded_level_is_the_bounded_vms_alone_on_their_cpus() {
    let fx = Fixture::new("bounds-level");
    for (other, what) in [
        ("reservation = 20", "a reservation"),
        ("class = \"realtime\"", "the realtime class"),
        ("priority = 99", "timeshare priority 99"),
    ] {
        let e = fx.errors(&bounded_config("haiku", &[BOUNDED, other]));
        assert!(
            e.contains(&format!("vm[0].latency_bound_us: expected the bounded VMs (\"v0\") to have host CPUs 0-1 to themselves at the bounded level, found VM \"v1\" there with {what}")),
            "{other}: {e}"
        );
    }
    // On other CPUs it is no rival.
    fx.parse(&bounded_config(
        "haiku",
        &[
            &format!("{BOUNDED}\ncpus = \"0\""),
            "reservation = 20\ncpus = \"1\"",
        ],
    ))
    .unwrap();
}

/// Every key of the file set away from its default, on each dispatch (the
/// bounded VM alone on CPU 1, the realtime and reserved ones on CPU 0).
fn everything_set(dispatch: &str) -> String {
    let smt = if dispatch == "threads" {
        "smt_isolation = true\n"
    } else {
        ""
    };
    format!(
        r#"
[host]
cpus = "0-1"
policy = "haiku"
mode = "power-saving"
{dispatch}
{smt}halt_poll_us = 50
kvm_poll_us = 800
log_limit_kib = 1024
result_records_per_s = 500
log_dir = "logs"

[host.tunables]
bursty_load = 300
power_saving = {{ base_quantum = 3000000, minimal_quantum = 600000, quantum_multipliers = [4, 9], maximum_latency = 30000000 }}

[[vm]]
name = "bounded"
vcpus = 3
memory_mib = 64
kernel = "kernel.elf"
guest = "bench"
initrd = "env"
cmdline = "debug=1"
workload = {{ name = "cpu", duration_ms = 500 }}
cpuid = {{ x2apic = false, cx16 = true }}
cpus = "1"
priority = 30
weight = 250
cap = 250
coschedule = "off"
latency_bound_us = 2000
bound_budget = 20
console = "both"
timeout_s = 2.5

[[vm]]
name = "rt"
vcpus = 1
memory_mib = 32
kernel = "kernel.elf"
cpus = "0"
class = "realtime"
priority = 110
console = "stdout"

[[vm]]
name = "reserved"
vcpus = 2
memory_mib = 16
kernel = "mb.flat"
cmdline = "cpuid  x"
modules = ["env", {{ path = "env", cmdline = "a=1" }}]
cpus = "0"
weight = 5
cap = 50
reservation = 30
cpuid = {{ tsc_deadline = false }}

[[vm]]
name = "deb"
vcpus = 2
memory_mib = 512
kernel = "bzImage"
initramfs = "env"
cmdline = "quiet"
"#
    )
}

#[test]
fn the_view_reads_back_as_the_config_the_run_used() {
    let fx = Fixture::new("view-round-trip");
    for dispatch in [
        "",
        "dispatch = \"threads\"",
        "dispatch = \"kvm-irqchip\"",
        "dispatch = \"workers\"",
    ] {
        let c = fx.parse(&everything_set(dispatch)).unwrap();
        let view = view::ConfigView::of(&c);
        // In the file's own units: the VM's percent, not each vCPU's per mille.
        let v = &view.vm[0];
        assert_eq!(
            (v.weight, v.cap, v.reservation, v.coschedule),
            (250, Some(250), 0, vcpu_sched::Coschedule::Off),
            "{dispatch}"
        );
        assert_eq!((v.latency_bound_us, v.bound_budget), (Some(2000), Some(20)));
        assert_eq!((view.vm[2].cap, view.vm[2].reservation), (Some(50), 30));
        // Read from the run directory, as `config.resolved.toml` is: no
        // path in it may depend on where the file was.
        let text = view.to_toml().unwrap();
        let again = fx
            .parse_as(
                &text,
                &fx.dir.join("logs/run-1/config.resolved.toml"),
                &Overrides::default(),
            )
            .unwrap_or_else(|e| panic!("{e}\n{text}"));
        let mut used = c.clone();
        used.path = again.path.clone();
        // The file names the dispatch that ran.
        used.host.dispatch_explicit = true;
        // The tables the scheduler ran with, written out: named, so
        // kept as they are whatever the dispatch.
        used.host.tunables = vcpu_engine::effective_tunables(
            c.host.dispatch,
            &c.host.tunables,
            c.keeps_low_latency(),
        );
        used.host.low_latency_named = true;
        // Every VM's co-scheduling, written out (the tables above say
        // what the default's left to them).
        for v in &mut used.vms {
            v.coschedule_named = true;
        }
        if !c.host.dispatch.in_kernel_lapic() {
            // Nothing samples KVM's statistics: left out, the default.
            used.host.kvm_poll_us = DEFAULT_KVM_POLL_US;
        }
        assert_eq!(again, used, "{dispatch}:\n{text}");
        // And the run it describes is the same one again.
        assert_eq!(view::ConfigView::of(&again).to_toml().unwrap(), text);
    }
    // A path relative to where pacer ran is written as it read it.
    let mut c = fx.parse(GOOD).unwrap();
    c.vms[0].kernel = PathBuf::from("kernel.elf");
    let kernel = &view::ConfigView::of(&c).vm[0].kernel;
    assert_eq!(*kernel, std::env::current_dir().unwrap().join("kernel.elf"));
}

#[test]
fn the_view_shows_the_tunables_the_scheduler_ran_with() {
    use vcpu_sched::tunables::QuantumTable;
    let fx = Fixture::new("view-tunables");
    // VM a (2 vCPUs on 2 CPUs) not co-scheduled: see the last case.
    let solo = GOOD.replace("priority = 20", "priority = 20\ncoschedule = \"off\"");
    let with = |host: &str| {
        let c = fx
            .parse(&solo.replace("log_dir = \"logs\"", &format!("log_dir = \"logs\"\n{host}")))
            .unwrap();
        view::ConfigView::of(&c).host
    };
    // Ranked (the default): the woken vCPU preempts, so the slices are
    // PREEMPTIVE_WAKES', whatever the file left at its default.
    let ranked = with("");
    assert_eq!(ranked.dispatch.as_deref(), Some("ranked"));
    assert_eq!(ranked.tunables.low_latency, QuantumTable::PREEMPTIVE_WAKES);
    assert_eq!(ranked.tunables.power_saving, QuantumTable::POWER_SAVING);
    // Threads waits for slices to end: the table configured.
    let threads = with("dispatch = \"threads\"");
    assert_eq!(threads.tunables.low_latency, QuantumTable::LOW_LATENCY);
    // A table of the file's own is what ranked runs with too.
    let own = "[host.tunables]\nlow_latency = { base_quantum = 3000000, minimal_quantum = 100000, quantum_multipliers = [2, 5], maximum_latency = 5000000 }";
    let ranked_own = with(own);
    assert_eq!(ranked_own.tunables.low_latency.base_quantum, 3_000_000);
    // So is the default's table when the file names it: what a file says
    // is what runs, not what its values happen to equal.
    let t = QuantumTable::LOW_LATENCY;
    let named = format!(
        "[host.tunables]\nlow_latency = {{ base_quantum = {}, minimal_quantum = {}, quantum_multipliers = {:?}, maximum_latency = {} }}",
        t.base_quantum, t.minimal_quantum, t.quantum_multipliers, t.maximum_latency
    );
    let ranked_named = with(&named);
    assert_eq!(ranked_named.dispatch.as_deref(), Some("ranked"));
    assert_eq!(ranked_named.tunables.low_latency, QuantumTable::LOW_LATENCY);
    // Another tunable named leaves the table to the dispatch.
    let other = with("[host.tunables]\nbursty_load = 300");
    assert_eq!(other.tunables.bursty_load, 300);
    assert_eq!(other.tunables.low_latency, QuantumTable::PREEMPTIVE_WAKES);
    // The fallback from ranked (`Config::fall_back_from_ranked`) is in the
    // config before the view is made: the view follows it.
    let mut c = fx.parse(&solo).unwrap();
    c.host.dispatch = DispatchKind::Threads;
    let fell_back = view::ConfigView::of(&c).host;
    assert_eq!(fell_back.dispatch.as_deref(), Some("threads"));
    assert_eq!(fell_back.tunables.low_latency, QuantumTable::LOW_LATENCY);
    assert_eq!(fell_back.kvm_poll_us, None);
    // A co-scheduled VM that fits its CPUs (VM a, relaxed by default)
    // runs its siblings together: the longer slices stay.
    let c = fx.parse(GOOD).unwrap();
    assert_eq!(c.vms[0].coschedule, vcpu_sched::Coschedule::Relaxed);
    assert!(!c.coscheduled_wide());
    let fits = view::ConfigView::of(&c).host;
    assert_eq!(fits.dispatch.as_deref(), Some("ranked"));
    assert_eq!(fits.tunables.low_latency, QuantumTable::PREEMPTIVE_WAKES);
    // One wider than its CPUs always has a sibling parked, which waits
    // out an owner's slice under ranked: low latency's slices stay.
    let wide = GOOD
        .replace("vcpus = 2\n", "vcpus = 3\ncoschedule = \"relaxed\"\n")
        .replace(
            "log_dir = \"logs\"",
            "log_dir = \"logs\"\ndispatch = \"ranked\"",
        );
    let c = fx.parse(&wide).unwrap();
    assert!(c.coscheduled_wide());
    let wide = view::ConfigView::of(&c).host;
    assert_eq!(wide.dispatch.as_deref(), Some("ranked"));
    assert_eq!(wide.tunables.low_latency, QuantumTable::LOW_LATENCY);
}

#[test]
fn the_summary_names_every_scheduling_key_that_differs_from_its_default() {
    let fx = Fixture::new("summary-sched-keys");
    let c = fx.parse(&everything_set("")).unwrap();
    let text = c.to_string();
    let line = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(&format!("vm {name}:")))
            .unwrap_or_else(|| panic!("no line for {name}:\n{text}"))
            .to_string()
    };
    let first = line(&c.vms[0].name);
    assert!(
        first.contains(
            "weight 250, cap 250 %, latency bound 2000 us (budget 20 %), coschedule off,"
        ),
        "{first}"
    );
    let third = line(&c.vms[2].name);
    assert!(
        third.contains("weight 5, cap 50 %, reservation 30 %,"),
        "{third}"
    );
    // A VM that leaves them at their defaults says nothing of them (VM
    // a's default co-scheduling is relaxed, b-2's off)...
    let plain = fx.parse(GOOD).unwrap().to_string();
    for key in [
        "weight",
        "cap ",
        "reservation",
        "latency bound",
        "coschedule",
    ] {
        assert!(!plain.contains(key), "{key}: {plain}");
    }
    // ... and one that sets another value says so.
    let off = fx
        .parse(&GOOD.replace("priority = 20", "priority = 20\ncoschedule = \"off\""))
        .unwrap()
        .to_string();
    assert!(
        off.contains("timeshare priority 20, coschedule off,"),
        "{off}"
    );
}

/// Sibling turns want the `threads` dispatch: a config that names no
/// dispatch and has a VM with `coschedule = "turns"` wider than its core
/// set runs `threads`; one that fits, a `relaxed` VM (wide or not: a wide
/// one shares its CPUs under `ranked`) or turns switched off
/// (`tunables.sibling_turn = 0`) keep `ranked`, and a dispatch the file
/// names is kept.
#[test]
fn a_vm_that_takes_sibling_turns_defaults_to_threads() {
    let fx = Fixture::new("sibling-turns");
    let host = |turn: &str, dispatch: &str| {
        format!("[host]\ncpus = \"0-1\"\npolicy = \"haiku\"\n{dispatch}\n[host.tunables]\nsibling_turn = {turn}\n")
    };
    let vm = |vcpus: u32, cosched: &str| {
        format!("\n[[vm]]\nname = \"v\"\nvcpus = {vcpus}\nmemory_mib = 64\nkernel = \"kernel.elf\"\ncoschedule = \"{cosched}\"\n")
    };
    let dispatch = |text: String| fx.parse(&text).unwrap().host.dispatch;
    assert_eq!(
        dispatch(host("250000", "") + &vm(3, "turns")),
        DispatchKind::Threads,
        "turns, wider than its CPUs"
    );
    for (text, why) in [
        (host("0", "") + &vm(3, "turns"), "turns switched off"),
        (
            host("250000", "") + &vm(3, "relaxed"),
            "relaxed, wider than its CPUs",
        ),
        (
            host("250000", "") + &vm(2, "turns"),
            "turns, fits its two CPUs",
        ),
        (
            host("250000", "") + &vm(2, "relaxed"),
            "relaxed, fits its two CPUs",
        ),
        (host("250000", "") + &vm(3, "off"), "not co-scheduled"),
    ] {
        assert_eq!(dispatch(text), DispatchKind::Ranked, "{why}");
    }
    assert_eq!(
        dispatch(host("250000", "dispatch = \"ranked\"") + &vm(3, "turns")),
        DispatchKind::Ranked,
        "named in the file"
    );
}
