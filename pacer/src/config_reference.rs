//! The reference of every key of a host config and of a bench matrix:
//! type, unit, default, range, meaning. `pacer config-reference` prints
//! it and `docs/config-reference.md` is that text.
//!
//! It cannot go stale: the tests below check the tables against the
//! parsers themselves. Every key a table lists is accepted with its
//! example; every key the parser accepts (the list its "unknown field"
//! error gives) is in the table; integer ranges are accepted at both ends
//! and refused one step beyond, naming the key; defaults and limits are
//! the code's own constants; the workload parameters, the matrix
//! workloads' parameters and the scheduler tunables are generated from
//! the tables the code uses (`guest_params::PARAMS`,
//! `WorkloadKind::params`, `vcpu_sched::Tunables::default()`); and the
//! document in the repository equals what this module prints.

use std::fmt::Write;
use vmm::config::guest_params::{ParamKind, PARAMS};
use vmm::config::{
    DEFAULT_HALT_POLL_US, DEFAULT_KVM_POLL_US, KVM_POLL_US, LOG_LIMIT_KIB, MAX_HALT_POLL_US,
    MAX_MEMORY_MIB, MAX_VCPUS, MIN_MEMORY_MIB, RECORDS_PER_S,
};

/// One key of a file.
#[derive(Debug, Clone, PartialEq)]
pub struct Key {
    /// Dotted path: `host.cpus`, `vm[].workload.duration_ms`.
    pub path: String,
    pub ty: String,
    /// Empty when the value has no unit.
    pub unit: String,
    pub default: String,
    /// Accepted values.
    pub range: String,
    pub meaning: String,
    /// A TOML value it accepts (for the tests).
    pub example: String,
    /// An integer range checked at both ends (for the tests).
    pub int_range: Option<(i64, i64)>,
}

#[allow(clippy::too_many_arguments)]
fn key(
    path: &str,
    ty: &str,
    unit: &str,
    default: impl Into<String>,
    range: impl Into<String>,
    meaning: &str,
    example: &str,
    int_range: Option<(i64, i64)>,
) -> Key {
    Key {
        path: path.into(),
        ty: ty.into(),
        unit: unit.into(),
        default: default.into(),
        range: range.into(),
        meaning: meaning.into(),
        example: example.into(),
        int_range,
    }
}

const NAME_RULE: &str = "1-64 characters of [A-Za-z0-9_-], unique";

/// The keys of a host config (`pacer run FILE`).
pub fn host_config() -> Vec<Key> {
    let mut k = vec![
        key("host.cpus", "CPU list string or array of integers", "", "every online CPU", "online CPUs", "Host CPUs Pacer may use, e.g. \"0-3,8\" or [0, 1].", "\"0\"", None),
        key("host.policy", "string", "", "\"haiku\"", "haiku | global-rr | pinned | eevdf | host", "Who schedules the vCPUs (host: the host kernel, with KVM's in-kernel irqchip). `--policy` overrides it.", "\"pinned\"", None),
        key("host.mode", "string", "", "\"low-latency\"", "low-latency | power-saving", "Haiku's mode (time slices, placement). `--mode` or `--policy P:MODE` override it.", "\"power-saving\"", None),
        key("host.smt_isolation", "boolean", "", "false", "true only under haiku", "SMT siblings only ever run vCPUs of one VM at a time.", "false", None),
        key("host.dispatch", "string", "", "\"ranked\" (\"threads\" with smt_isolation, with a VM of coschedule = \"turns\" and more vCPUs than CPUs in its core set, or where real-time priorities are not allowed)", "ranked | threads | workers | kvm-irqchip", "How the engine carries out the scheduler's decisions. ranked: KVM's in-kernel local APIC, and the host kernel switches the vCPU threads by the ranks (real-time priority for halted vCPUs, normal class for each CPU's owner, idle class behind it) and CPUs the engine gives them; threads: Pacer's own local APIC, a thread per vCPU handed each CPU; workers: a worker thread per CPU runs whichever vCPU it is handed; kvm-irqchip: threads with KVM's in-kernel local APIC, halts learnt from KVM's statistics.", "\"threads\"", None),
        key("host.kvm_poll_us", "integer", "us", DEFAULT_KVM_POLL_US.to_string(), format!("{}..={}", KVM_POLL_US.0, KVM_POLL_US.1), "Under dispatch kvm-irqchip or ranked: how often KVM's halt statistics of each vCPU are sampled (a vCPU KVM woke runs unscheduled at most this long).", "500", Some((KVM_POLL_US.0, KVM_POLL_US.1))),
        key("host.halt_poll_us", "integer", "us", DEFAULT_HALT_POLL_US.to_string(), format!("0..={MAX_HALT_POLL_US}"), "How long an idle CPU polls for a wake-up before it sleeps (0: off).", "100", Some((0, MAX_HALT_POLL_US))),
        key("host.log_limit_kib", "integer", "KiB", vmm::results::DEFAULT_LOG_LIMIT_KIB.to_string(), format!("{}..={}", LOG_LIMIT_KIB.0, LOG_LIMIT_KIB.1), "Most each VM's console log (and user log) and results log may hold; past it the guest's output is dropped, a marker line saying where and how much.", "1024", Some((LOG_LIMIT_KIB.0, LOG_LIMIT_KIB.1))),
        key("host.result_records_per_s", "integer", "1/s", vmm::results::DEFAULT_RECORDS_PER_S.to_string(), format!("{}..={}", RECORDS_PER_S.0, RECORDS_PER_S.1), "Guest markers and result records each VM may send per second (one second's worth at once); beyond it they are dropped and counted (a `dropped` line in its results log).", "1000", Some((RECORDS_PER_S.0, RECORDS_PER_S.1))),
        key("host.tunables", "table", "", "vcpu_sched's defaults (host.tunables.* below)", "keys below", "Any vcpu_sched tunable. Under the ranked dispatch a low_latency table the file leaves out runs as vcpu_sched's preemptive-wakes table (6 ms slices at the default priority, not 2 ms: a woken vCPU does not wait for a slice there), unless a VM whose config names coschedule = \"relaxed\" or \"turns\" is wider than its core set; a low_latency table the file names runs as given under every dispatch, even with the default's values. The run's config.resolved.toml shows the tables that ran.", "{ bursty_load = 375 }", None),
        key("host.log_dir", "path string", "", "\"pacer-logs\" beside the config file", "a directory Pacer can create and write", "Where each run writes its own directory; relative to the config file. `--log-dir` overrides it.", "\"logs\"", None),
        key("vm[].name", "string", "", "required", NAME_RULE, "The VM's name in summaries and file names.", "\"b\"", None),
        key("vm[].vcpus", "integer", "", "required", format!("1..={MAX_VCPUS}, and KVM's limit"), "vCPUs of the VM.", "2", Some((1, i64::from(MAX_VCPUS)))),
        key("vm[].memory_mib", "integer", "MiB", "required", format!("{MIN_MEMORY_MIB}..={MAX_MEMORY_MIB}, within the host's memory, enough for the kernel"), "Guest RAM.", "64", None),
        key("vm[].kernel", "path string", "", "required", "an existing file: ELF64 (bench guest, vmlinux), multiboot ELF32 or raw image, bzImage", "The kernel image; relative to the config file.", "", None),
        key("vm[].guest", "string", "", "from the kernel's format", "bench | multiboot | linux", "How the VM boots.", "\"bench\"", None),
        key("vm[].initrd", "path string", "", "none", "an existing file (bench, linux)", "An initial RAM disk loaded high.", "", None),
        key("vm[].initramfs", "path string", "", "none", "as initrd (give one or the other)", "The same key under the Linux word.", "", None),
        key("vm[].cmdline", "string", "", "\"\"", "what fits the boot protocol's limit", "The guest's command line (linux: after `console=ttyS0 reboot=k`; bench: before the workload's words).", "\"\"", None),
        key("vm[].modules", "array of paths or { path, cmdline }", "", "none", "multiboot only", "Multiboot modules, loaded after the image in order.", "", None),
        key("vm[].modules[].path", "path string", "", "required", "an existing file", "The module file; relative to the config file.", "", None),
        key("vm[].modules[].cmdline", "string", "", "\"\"", "", "The module's arguments.", "", None),
        key("vm[].cpuid", "table", "", "no overrides", "keys below", "CPU features switched off (false) or insisted on (true: the VM fails to start if KVM lacks them).", "{ x2apic = true }", None),
        key("vm[].cpuid.x2apic", "boolean", "", "KVM's", "", "Leaf 1 ECX bit 21.", "true", None),
        key("vm[].cpuid.tsc_deadline", "boolean", "", "KVM's", "", "Leaf 1 ECX bit 24 (the LAPIC timer's TSC-deadline mode).", "true", None),
        key("vm[].cpuid.cx16", "boolean", "", "KVM's", "", "Leaf 1 ECX bit 13 (CMPXCHG16B).", "true", None),
        key("vm[].cpus", "CPU list string or array of integers", "", "host.cpus", "within host.cpus", "The VM's core set: the host CPUs its vCPUs may run on.", "\"1\"", None),
        key("vm[].class", "string", "", "\"timeshare\"", "timeshare | realtime (not under host)", "Scheduling class.", "\"timeshare\"", None),
        key("vm[].priority", "integer", "", "10 (timeshare), 100 (realtime)", "timeshare 1..=99, realtime 100..=120; only haiku honours timeshare priorities", "The VM's priority; its vCPUs inherit it.", "10", None),
        key("vm[].weight", "integer", "", "100", "1..=10000; only haiku honours weights", "The VM's share among contending VMs (each vCPU's slices scale by it, as cgroups' cpu.weight).", "400", None),
        key("vm[].cap", "integer", "", "none", "1..=100 x vCPUs; only haiku honours caps", "At most this % of one CPU for the VM, split evenly over its vCPUs, enforced even on an idle host (a throttled vCPU waits for its budget, refilled per 10 ms period).", "30", None),
        key("vm[].coschedule", "string", "", "\"relaxed\" for a VM of 2 or more vCPUs, else \"off\"", "off | relaxed | turns; only haiku co-schedules (other policies ignore it)", "Co-scheduling of the VM's vCPUs. relaxed: siblings are placed on different cores where the VM fits its core set, a sibling parked while another runs is co-started next to it, a vCPU that yields or sends an IPI to a preempted sibling gives that sibling its CPU, a vCPU found spinning (a PAUSE loop) while a sibling that may hold its lock waits parked gives that sibling its CPU (the spin watch; these two under Pacer's own local APIC only), and past a skew bound (off by default) a vCPU ahead of a parked sibling gives it its turn; under the ranked dispatch a relaxed VM wider than its core set whose vCPUs do not halt (none seen halted for 20 ms) runs its queued siblings beside the sibling that owns a CPU, in the normal class, and the host kernel takes turns between them within the VM's slices; once one of its vCPUs is seen in a spin-wait loop its threads look for spins at a pace their looks set (from host.tunables.sibling_turn while they find spins to none while they do not), hand a shared CPU to the sibling beside them when found spinning, and a sibling that does not spin itself hands it back half a turn later (at 3:1 next to hogs a barrier VM 3.2x and a shootdown VM 3.9x the host kernel's figure, a spin lock VM 1.04x, where off did 0.28x and 0.25x), and while two of its vCPUs are seen spinning together (a lock, a barrier) its threads there take the host kernel's turns at a 30 ms slice, not the kernel's few ms, which mostly stopped a lock's holder (at 3:1 a spin lock VM 1.13x -> 1.45-1.53x the host kernel's acquisitions; a shootdown's initiator spins alone and keeps the short turns; threads, which a config must name for such a VM, costs a wide VM that does not spin, a request server, a quarter of its throughput); under the ranked dispatch a host with a VM that names relaxed or turns and is wider than its core set keeps low latency's 2 ms slices (not 6 ms: there a sibling is always parked and waits out a slice), read when the engine starts; one that fits its core set keeps the 6 ms slices (its 2:1 shootdowns' p99 0.17 ms against 3.6 ms, their p99.9 32 ms against 12). turns: relaxed, and in a VM of more vCPUs than CPUs in its core set each slice goes round the siblings in turns of host.tunables.sibling_turn (250 us), for VMs that wait on every sibling (a barrier, a TLB shootdown's IPIs: 5-8x their rounds at 3:1; a spin lock VM loses half); a config with such a VM and no dispatch runs threads; under a ranked dispatch the config names, each of its vCPUs sharing a CPU gives it to the sibling beside it every sibling_turn when found spinning (3:1: barrier 3.3x, shootdown 2.6x the host kernel's). off: each vCPU is scheduled on its own. Unset, a VM of two or more vCPUs is relaxed (at 2:1 next to hogs a barrier VM 1.3x, a shootdown VM 1.4x, a spin lock VM 1.16x its figure with off; at 3:1 the barrier and shootdown 4x; no other seeds row lost beyond its noise), one of a single vCPU off.", "\"turns\"", None),
        key("vm[].reservation", "integer", "", "0", "0..=100 x vCPUs, at most the cap; all VMs' reservations at most 100 x host CPUs; only haiku honours them", "At least this % of one CPU for the VM when it asks, split evenly over its vCPUs (they run above every timeshare level while their reservation lasts).", "50", None),
        key("vm[].latency_bound_us", "integer", "us", "none", "1..=1000000, with bound_budget; timeshare VMs without a reservation; only haiku honours it; admitted at load: the bounded VMs' budgets fit the host CPUs they may use, no reservation, realtime VM or priority 99 shares those CPUs, and each bounded vCPU's worst-case wait (kick 100 us + the other bounded vCPUs' bursts) / (1 - their budgets) is at most its bound (ARCHITECTURE.md, Latency bounds); the same admission judges `pacer ctl set VM latency_bound_us=.. bound_budget=..` on a running VM", "Each vCPU's wake-to-run bound: while it has budget its wakes go ahead of every timeshare vCPU and preempt one at once; a wake later than the bound is counted (bound_misses in the run's JSON).", "1000\nbound_budget = 10", None),
        key("vm[].bound_budget", "integer", "", "none", "1..=100 x vCPUs (at least 1 per mille per vCPU), with latency_bound_us", "The CPU time the bound holds for, in % of one CPU, split evenly over the VM's vCPUs (each vCPU's bucket holds one bound's worth); a wake without budget is ordinary timeshare.", "10\nlatency_bound_us = 1000", None),
        key("vm[].workload", "string or table", "", "none (the guest's own default)", "bench guest only; keys below", "The bench guest's workload: \"cpu duration_ms=300\" or { name = \"cpu\", duration_ms = 300 }.", "\"cpu\"", None),
        key("vm[].console", "string", "", "\"log\"", "log | stdout | both", "Where the serial console goes: <vm>.console.log in the run directory, stdout (prefixed [vm]) or both.", "\"log\"", None),
        key("vm[].timeout_s", "number", "s", "none", "> 0", "Stop the VM (status timeout) after this long; under Pacer's scheduler the message says what each vCPU was doing then.", "30", None),
    ];
    for p in PARAMS.iter().filter(|p| p.key != "workload") {
        let (ty, unit, range, example, int_range) = match p.kind {
            ParamKind::Int { min, max, unit } => (
                "integer",
                unit_short(unit),
                format!("{min}..={max}"),
                min.to_string(),
                i64::try_from(min).ok().zip(i64::try_from(max).ok()),
            ),
            ParamKind::Choice(names) => (
                "string",
                "",
                names.join(" | "),
                format!("\"{}\"", names[0]),
                None,
            ),
            ParamKind::PerVcpuWorkloads => (
                "string",
                "",
                "one of cpu, sleep, pingpong, burst, spinlock per vCPU, comma-separated".into(),
                String::new(),
                None,
            ),
        };
        let used = if p.used_by.is_empty() {
            "every workload".to_string()
        } else {
            p.used_by.join(", ")
        };
        k.push(key(
            &format!("vm[].workload.{}", p.key),
            ty,
            unit,
            "the guest's (guests/PROTOCOL.md)",
            range,
            &format!("Used by: {used}."),
            &example,
            int_range,
        ));
    }
    let tunables = serde_json::to_value(vcpu_sched::Tunables::default()).unwrap_or_default();
    let mut flat = Vec::new();
    flatten("host.tunables", &tunables, &mut flat);
    for (path, default) in flat {
        // The type is the one serde gives the default (the parser's own
        // type, `vcpu_sched::Tunables`), not a guess: `share_boost` is a
        // boolean, `quantum_multipliers` an array of integers.
        let ty = toml_type(&default);
        let example = default.to_string();
        k.push(key(
            &path,
            &ty,
            "",
            example.clone(),
            "see vcpu_sched/src/tunables.rs",
            if path.matches('.').count() > 2 {
                "A vcpu_sched tunable (times in ns): a mode's table is given whole, all four keys."
            } else {
                "A vcpu_sched tunable (times in ns, loads in 1/1000 of a CPU)."
            },
            &example,
            None,
        ));
    }
    k
}

/// "milliseconds" -> "ms".
fn unit_short(unit: &str) -> &'static str {
    match unit {
        "milliseconds" => "ms",
        "microseconds" => "us",
        "nanoseconds" => "ns",
        "" => "",
        _ => "see guests/PROTOCOL.md",
    }
}

fn flatten(prefix: &str, v: &serde_json::Value, out: &mut Vec<(String, serde_json::Value)>) {
    match v {
        serde_json::Value::Object(o) => {
            for (k, v) in o {
                flatten(&format!("{prefix}.{k}"), v, out);
            }
        }
        other => out.push((prefix.to_string(), other.clone())),
    }
}

/// The TOML type of a value as the reference names it.
fn toml_type(v: &serde_json::Value) -> String {
    use serde_json::Value;
    match v {
        Value::Bool(_) => "boolean".into(),
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer".into(),
        Value::Number(_) => "number".into(),
        Value::String(_) => "string".into(),
        Value::Array(items) => match items.first() {
            Some(first) => format!("array of {}s", toml_type(first)),
            None => "array".into(),
        },
        Value::Object(_) => "table".into(),
        Value::Null => "none".into(),
    }
}

/// The keys of a bench matrix (`pacer bench MATRIX`).
pub fn matrix() -> Vec<Key> {
    use crate::bench::workload::WorkloadKind;
    let mut k = vec![
        key(
            "matrix.name",
            "string",
            "",
            "required",
            NAME_RULE,
            "The matrix's name in reports.",
            "\"t\"",
            None,
        ),
        key(
            "matrix.description",
            "string",
            "",
            "\"\"",
            "",
            "A sentence for the report.",
            "\"x\"",
            None,
        ),
        key(
            "matrix.kernel",
            "path string",
            "",
            "required",
            "an existing file",
            "The bench guest image; relative to the matrix file.",
            "",
            None,
        ),
        key(
            "matrix.host_cpus",
            "CPU list string",
            "",
            "every online CPU",
            "online CPUs",
            "The CPUs every cell runs on.",
            "\"0\"",
            None,
        ),
        key(
            "matrix.repetitions",
            "integer",
            "",
            "1",
            "1..=10000",
            "Runs of each (layout, workload, policy).",
            "2",
            Some((1, 10_000)),
        ),
        key(
            "matrix.cell_timeout_s",
            "number",
            "s",
            "60",
            "> 0, at most 86400, longer than every bench workload's duration_ms",
            "A cell still running then is stopped and recorded as timeout.",
            "30",
            None,
        ),
        key(
            "matrix.baseline",
            "string or array of strings",
            "",
            "\"host\" (when it is a policy)",
            "labels of `policies`",
            "The policies the summary's ratios divide by.",
            "\"host\"",
            None,
        ),
        key(
            "matrix.policies",
            "array of strings or tables",
            "",
            "required",
            "\"POLICY[:MODE]\", \"qemu\", \"native\", or { label, policy, mode, dispatch, kvm_poll_us }",
            "The policy axis.",
            "[\"host\"]",
            None,
        ),
        key(
            "matrix.policies[].label",
            "string",
            "",
            "policy[:mode]",
            "unique",
            "What tables, files and plots call the column.",
            "",
            None,
        ),
        key(
            "matrix.policies[].policy",
            "string",
            "",
            "required",
            "haiku | global-rr | pinned | eevdf | host | qemu | native",
            "Who runs the cells.",
            "",
            None,
        ),
        key(
            "matrix.policies[].mode",
            "string",
            "",
            "low-latency",
            "low-latency | power-saving (not host, qemu, native)",
            "Haiku's mode.",
            "",
            None,
        ),
        key(
            "matrix.policies[].dispatch",
            "string",
            "",
            "matrix.dispatch",
            "ranked | threads | workers | kvm-irqchip (not host, qemu, native)",
            "The engine's dispatch mechanism.",
            "",
            None,
        ),
        key(
            "matrix.policies[].kvm_poll_us",
            "integer",
            "us",
            "host.kvm_poll_us's default",
            format!("{}..={} (only with dispatch kvm-irqchip or ranked)", KVM_POLL_US.0, KVM_POLL_US.1),
            "How often KVM's halt statistics are sampled in this column's cells.",
            "",
            Some((KVM_POLL_US.0, KVM_POLL_US.1)),
        ),
        key(
            "matrix.trace",
            "boolean",
            "",
            "false",
            "",
            "Record a scheduling trace of every cell a scheduled policy runs into DIR/traces/<cell>.trace (pacer trace).",
            "true",
            None,
        ),
        key(
            "matrix.dispatch",
            "string",
            "",
            "each cell's config's default (host.dispatch's)",
            "ranked | threads | workers | kvm-irqchip",
            "The dispatch of every Pacer policy without its own.",
            "\"threads\"",
            None,
        ),
        key(
            "matrix.memory_mib",
            "integer",
            "MiB",
            "32",
            format!("2..={}, enough for the kernel", 1u64 << 20),
            "Guest RAM of every VM without its own.",
            "16",
            None,
        ),
        key(
            "workload[].name",
            "string",
            "",
            "required",
            NAME_RULE,
            "What rows and files call it.",
            "\"w\"",
            None,
        ),
        key(
            "workload[].kind",
            "string",
            "",
            "required",
            "cpu | sleep | pingpong | burst | spinlock | barrier | shootdown | mixed | unixbench",
            "The workload kind; its parameters below.",
            "\"cpu\"",
            None,
        ),
        key(
            "workload[].args",
            "string",
            "",
            "\"\"",
            "key=value words",
            "More guest arguments, passed unchecked.",
            "\"debug=1\"",
            None,
        ),
        key(
            "layout[].name",
            "string",
            "",
            "required",
            NAME_RULE,
            "What rows and files call it.",
            "\"l\"",
            None,
        ),
        key(
            "layout[].workloads",
            "array of strings",
            "",
            "every workload",
            "names of [[workload]]",
            "The workloads this layout runs.",
            "[\"w\"]",
            None,
        ),
        key(
            "layout[].under_test",
            "string",
            "",
            "the VMs that run the cell's workload beside VMs with their own (hogs); else \"all\"",
            "a VM entry's name, or \"all\"",
            "The VM the layout is judged by (benches/README.md).",
            "\"a\"",
            None,
        ),
        key(
            "layout[].headline",
            "metric name, { metric, better }, or an array of them",
            "",
            "the workload kind's own figure",
            "better: higher | lower",
            "The metric(s) of the VM under test the layout is judged by.",
            "{ metric = \"cpu.units_per_s\", better = \"higher\" }",
            None,
        ),
        key(
            "layout[].vm",
            "array of tables",
            "",
            "required",
            "at least one",
            "The VMs of every cell of the layout.",
            "",
            None,
        ),
        key(
            "layout[].vm[].name",
            "string",
            "",
            "required",
            NAME_RULE,
            "The VM entry's name (count > 1: name0, name1, ...).",
            "\"a\"",
            None,
        ),
        key(
            "layout[].vm[].count",
            "integer",
            "",
            "1",
            "1..=64",
            "How many VMs this entry makes.",
            "2",
            Some((1, 64)),
        ),
        key(
            "layout[].vm[].vcpus",
            "integer",
            "",
            "required",
            format!("1..={MAX_VCPUS}"),
            "vCPUs of each VM.",
            "1",
            Some((1, i64::from(MAX_VCPUS))),
        ),
        key(
            "layout[].vm[].cpus",
            "CPU list string",
            "",
            "matrix.host_cpus",
            "within matrix.host_cpus",
            "The VM's core set.",
            "\"0\"",
            None,
        ),
        key(
            "layout[].vm[].class",
            "string",
            "",
            "\"timeshare\"",
            "timeshare | realtime",
            "Scheduling class.",
            "\"timeshare\"",
            None,
        ),
        key(
            "layout[].vm[].priority",
            "integer",
            "",
            "10 (timeshare), 100 (realtime)",
            "timeshare 1..=99, realtime 100..=120",
            "The VM's priority (policies that cannot honour it make the cell n/a).",
            "10",
            None,
        ),
        key(
            "layout[].vm[].weight",
            "integer",
            "",
            "100",
            "1..=10000",
            "As a config's `vm[].weight` (policies other than haiku make the cell n/a).",
            "400",
            None,
        ),
        key(
            "layout[].vm[].cap",
            "integer",
            "",
            "none",
            "1..=100 x vCPUs",
            "As a config's `vm[].cap` (policies other than haiku make the cell n/a).",
            "30",
            None,
        ),
        key(
            "layout[].vm[].reservation",
            "integer",
            "",
            "0",
            "0..=100 x vCPUs; a layout's at most 100 x host CPUs",
            "As a config's `vm[].reservation` (policies other than haiku make the cell n/a).",
            "50",
            None,
        ),
        key(
            "layout[].vm[].coschedule",
            "string",
            "",
            "\"off\"",
            "off | relaxed | turns",
            "As a config's `vm[].coschedule` (policies other than haiku ignore it).",
            "\"relaxed\"",
            None,
        ),
        key(
            "layout[].vm[].latency_bound_us",
            "integer",
            "us",
            "none",
            "1..=1000000, with bound_budget; a layout's bounds are admitted as a config's",
            "As a config's `vm[].latency_bound_us` (policies other than haiku make the cell n/a).",
            "1000, bound_budget = 10",
            None,
        ),
        key(
            "layout[].vm[].bound_budget",
            "integer",
            "",
            "none",
            "1..=100 x vCPUs, with latency_bound_us",
            "As a config's `vm[].bound_budget`.",
            "10, latency_bound_us = 1000",
            None,
        ),
        key(
            "layout[].vm[].memory_mib",
            "integer",
            "MiB",
            "matrix.memory_mib",
            format!("2..={}, enough for the kernel", 1u64 << 20),
            "Guest RAM.",
            "16",
            None,
        ),
        key(
            "layout[].vm[].workload",
            "string",
            "",
            "the cell's",
            "a [[workload]] name",
            "A workload of its own, run in every cell (the hog beside the VM under test).",
            "\"w\"",
            None,
        ),
    ];
    let mut seen: Vec<&str> = Vec::new();
    for kind in WorkloadKind::ALL {
        for p in kind.params() {
            if seen.contains(&p) {
                continue;
            }
            seen.push(p);
            let kinds: Vec<&str> = WorkloadKind::ALL
                .iter()
                .filter(|k| k.params().contains(&p))
                .map(|k| k.as_str())
                .collect();
            let from_guest = PARAMS.iter().find(|g| g.key == p);
            let (ty, unit, range) = match from_guest.map(|g| g.kind) {
                Some(ParamKind::Int { min, max, unit }) => {
                    ("integer", unit_short(unit), format!("{min}..={max}"))
                }
                Some(ParamKind::Choice(names)) => ("string", "", names.join(" | ")),
                Some(ParamKind::PerVcpuWorkloads) => (
                    "string",
                    "",
                    "one workload per vCPU, comma-separated".into(),
                ),
                None => ("see benches/README.md", "", "see benches/README.md".into()),
            };
            k.push(key(
                &format!("workload[].{p}"),
                ty,
                unit,
                "the guest's (guests/PROTOCOL.md) or the suite's",
                range,
                &format!("A parameter of: {}.", kinds.join(", ")),
                "",
                None,
            ));
        }
    }
    k
}

fn table(out: &mut String, keys: &[Key]) {
    out.push_str(
        "| key | type | unit | default | accepted | meaning |\n|---|---|---|---|---|---|\n",
    );
    for k in keys {
        let cell = |s: &str| s.replace('|', "\\|");
        let _ = writeln!(
            out,
            "| `{}` | {} | {} | {} | {} | {} |",
            k.path,
            cell(&k.ty),
            cell(&k.unit),
            cell(&k.default),
            cell(&k.range),
            cell(&k.meaning)
        );
    }
}

/// The whole reference, in Markdown (`docs/config-reference.md`).
pub fn markdown() -> String {
    let mut s = String::from(
        "# Config reference\n\n\
         Every key of a host config (`pacer run FILE`, `pacer validate FILE`) and of a\n\
         bench matrix (`pacer bench MATRIX`). Generated by `pacer config-reference`\n\
         from the tables the parsers are tested against (`pacer/src/config_reference.rs`);\n\
         do not edit by hand. `[]` marks an array of tables (`vm[]` is every `[[vm]]`).\n\
         Paths are relative to the file that names them.\n\n\
         ## Host config\n\n",
    );
    table(&mut s, &host_config());
    s.push_str("\n## Bench matrix\n\nSee benches/README.md for what a run does with it.\n\n");
    table(&mut s, &matrix());
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use vcpu_engine::host_cpus::HostCpuSet;
    use vmm::config::{Config, HostInfo};

    /// The keys a table lists directly under `prefix` (`host.`, `vm[].`).
    fn direct(keys: &[Key], prefix: &str) -> Vec<String> {
        let mut v: Vec<String> = keys
            .iter()
            .filter_map(|k| k.path.strip_prefix(prefix))
            .filter_map(|rest| rest.split(['.', '[']).next())
            .map(String::from)
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// The names an "unknown field" error lists as expected.
    fn expected_list(err: &str) -> Vec<String> {
        let rest = err
            .split("expected one of")
            .nth(1)
            .unwrap_or_else(|| panic!("no list of expected keys in: {err}"));
        let mut v: Vec<String> = rest
            .split(['"', '`'])
            .skip(1)
            .step_by(2)
            .map(String::from)
            .collect();
        v.sort();
        v
    }

    struct Fx {
        dir: std::path::PathBuf,
    }

    impl Fx {
        fn new(tag: &str) -> Fx {
            let dir = std::env::temp_dir().join(format!("pacer-ref-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::copy(guests::bench_guest_elf(), dir.join("guest.elf")).unwrap();
            Fx { dir }
        }

        fn host() -> HostInfo {
            HostInfo {
                online: HostCpuSet::parse_list("0-3").unwrap(),
                resources: Default::default(),
            }
        }

        /// A config with `host` lines in [host] and `vm` lines in [[vm]]
        /// (a line for a key the template has replaces it).
        fn config(&self, host: &str, vm: &str) -> Result<Config, String> {
            let mut vm_lines = vec![
                ("name", "\"a\""),
                ("vcpus", "1"),
                ("memory_mib", "32"),
                ("kernel", "\"guest.elf\""),
            ];
            let mut extra = String::new();
            for line in vm.lines().filter(|l| !l.is_empty()) {
                let k = line.split('=').next().unwrap().trim();
                match vm_lines.iter_mut().find(|(n, _)| *n == k) {
                    Some(slot) => slot.1 = line.split_once('=').unwrap().1.trim(),
                    None => extra += &format!("{line}\n"),
                }
            }
            let mut text = format!("[host]\n{host}\n[[vm]]\n");
            for (k, v) in vm_lines {
                text += &format!("{k} = {v}\n");
            }
            text += &extra;
            Config::parse(&text, &self.dir.join("pacer.toml"), &Self::host())
                .map_err(|e| e.to_string())
        }
    }

    impl Drop for Fx {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    /// `k`'s range `lo..=hi` is accepted at both ends and refused one step
    /// beyond, with the key named; `parse` tries one value.
    fn holds_at_both_ends(
        k: &Key,
        (lo, hi): (i64, i64),
        parse: impl Fn(i64) -> Result<(), String>,
    ) {
        for (v, ok) in [(lo, true), (hi, true), (lo - 1, false), (hi + 1, false)] {
            match (ok, parse(v)) {
                (true, Err(e)) => panic!("{} = {v} refused: {e}", k.path),
                (false, Ok(())) => panic!("{} = {v} accepted", k.path),
                (false, Err(e)) => assert!(e.contains(&k.path.replace("[]", "[0]")), "{e}"),
                (true, Ok(())) => {}
            }
        }
    }

    #[test]
    fn the_document_in_the_repository_is_what_this_module_prints() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/config-reference.md");
        let file = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            file == markdown(),
            "{} is stale: regenerate it with `cargo run -p pacer -- config-reference > docs/config-reference.md`",
            path.display()
        );
    }

    #[test]
    fn every_key_the_host_config_parser_takes_is_listed() {
        let fx = Fx::new("keys");
        let keys = host_config();
        let cases = [
            ("host.", "zzz = 1", ""),
            ("vm[].", "", "zzz = 1"),
            ("vm[].cpuid.", "", "cpuid = { zzz = true }"),
            ("host.tunables.", "tunables = { zzz = 1 }", ""),
        ];
        for (prefix, host, vm) in cases {
            let err = fx.config(host, vm).unwrap_err();
            assert_eq!(
                direct(&keys, prefix),
                expected_list(&err),
                "{prefix}: {err}"
            );
        }
    }

    #[test]
    fn every_listed_host_key_is_in_the_resolved_config() {
        let fx = Fx::new("view");
        let c = fx.config("", "").unwrap();
        let view = serde_json::to_value(vmm::config::view::ConfigView::of(&c)).unwrap();
        let keys = host_config();
        // Written as what they stand for: a workload as the words it put
        // on `cmdline`, `initramfs` as `initrd`.
        let elsewhere = ["workload", "initramfs"];
        for (prefix, table) in [
            ("host.", &view["host"]),
            ("host.tunables.", &view["host"]["tunables"]),
            ("vm[].", &view["vm"][0]),
            ("vm[].cpuid.", &view["vm"][0]["cpuid"]),
        ] {
            for k in direct(&keys, prefix) {
                if prefix == "vm[]." && elsewhere.contains(&k.as_str()) {
                    continue;
                }
                assert!(
                    table.get(&k).is_some(),
                    "{prefix}{k} is not in the resolved config: {table}"
                );
            }
        }
    }

    #[test]
    fn every_listed_host_key_is_taken_and_ranges_hold_at_both_ends() {
        let fx = Fx::new("examples");
        for k in host_config().iter().filter(|k| !k.example.is_empty()) {
            let (section, name) = k.path.rsplit_once('.').unwrap();
            let line = format!("{name} = {}", k.example);
            let (host, vm) = match section {
                "host" => (line, String::new()),
                "vm[]" => (String::new(), line),
                // Four vCPUs: some keys name a vCPU other than the first.
                "vm[].workload" => (
                    String::new(),
                    format!(
                        "vcpus = 4\nworkload = {{ name = \"cpu\", {name} = {} }}",
                        k.example
                    ),
                ),
                "vm[].cpuid" => (
                    String::new(),
                    format!("cpuid = {{ {name} = {} }}", k.example),
                ),
                // A mode's quantum table is given whole.
                "host.tunables" => (format!("[host.tunables]\n{line}"), String::new()),
                mode if mode.starts_with("host.tunables.") => {
                    (whole_table(mode, name, &k.example), String::new())
                }
                other => panic!("no test context for {other}"),
            };
            // Workload keys of other workloads: the guest refuses a key its
            // workload does not use, so take one that uses it.
            let vm = match vmm::config::guest_params::PARAMS
                .iter()
                .find(|p| p.key == name && !p.used_by.is_empty())
            {
                Some(p) if section == "vm[].workload" => {
                    vm.replace("\"cpu\"", &format!("\"{}\"", p.used_by[0]))
                }
                _ => vm,
            };
            if let Err(e) = fx.config(&host, &vm) {
                panic!("{}: {e}", k.path);
            }
            if let (Some(range), "host" | "vm[]") = (k.int_range, section) {
                holds_at_both_ends(k, range, |v| {
                    let line = format!("{name} = {v}");
                    if section == "host" {
                        fx.config(&line, "").map(|_| ())
                    } else {
                        fx.config("", &line).map(|_| ())
                    }
                });
            }
        }
    }

    /// `[section]` with every key of it at its default but `name = value`.
    fn whole_table(section: &str, name: &str, value: &str) -> String {
        let mut text = format!("[{section}]\n");
        for k in host_config() {
            if let Some(key) = k.path.strip_prefix(&format!("{section}.")) {
                let v = if key == name { value } else { &k.default };
                text += &format!("{key} = {v}\n");
            }
        }
        text
    }

    #[test]
    fn tunables_take_only_the_type_the_reference_gives() {
        let fx = Fx::new("tunable-types");
        let tunables: Vec<Key> = host_config()
            .into_iter()
            .filter(|k| k.path.starts_with("host.tunables."))
            .collect();
        assert!(tunables.len() > 10);
        let ty_of = |name: &str| {
            tunables
                .iter()
                .find(|k| k.path.ends_with(name))
                .map(|k| (k.ty.clone(), k.default.clone()))
        };
        assert_eq!(
            ty_of(".share_boost"),
            Some(("boolean".into(), "true".into()))
        );
        assert_eq!(
            ty_of("low_latency.quantum_multipliers"),
            Some(("array of integers".into(), "[2,5]".into()))
        );
        for k in &tunables {
            let (section, name) = k.path.rsplit_once('.').unwrap();
            // A value of another type than the one listed.
            let wrong = match k.ty.as_str() {
                "boolean" => "1",
                "integer" | "array of integers" => "\"x\"",
                other => panic!("{}: no wrong value for {other}", k.path),
            };
            let table = if section == "host.tunables" {
                format!("[{section}]\n{name} = {wrong}")
            } else {
                whole_table(section, name, wrong)
            };
            match fx.config(&table, "") {
                Ok(_) => panic!("{} = {wrong} accepted as {}", k.path, k.ty),
                Err(e) => assert!(e.contains(name), "{}: {e}", k.path),
            }
        }
    }

    #[test]
    fn defaults_are_the_codes() {
        let fx = Fx::new("defaults");
        let c = fx.config("", "").unwrap();
        let default_of = |path: &str| {
            host_config()
                .into_iter()
                .find(|k| k.path == path)
                .unwrap()
                .default
        };
        assert_eq!(
            default_of("host.halt_poll_us"),
            c.host.halt_poll_us.to_string()
        );
        assert_eq!(default_of("host.policy"), format!("\"{}\"", c.host.policy));
        assert_eq!(default_of("host.mode"), format!("\"{}\"", c.host.mode));
        assert_eq!(
            default_of("host.dispatch").split(' ').next().unwrap(),
            format!("\"{}\"", c.host.dispatch)
        );
        assert_eq!(
            default_of("vm[].priority").split(' ').next().unwrap(),
            c.vms[0].priority.to_string()
        );
        assert!(c.host.log_dir.ends_with("pacer-logs"));
    }

    const MATRIX: &str = "[matrix]\nname = \"t\"\nkernel = \"guest.elf\"\npolicies = [\"host\"]\n@HEAD@\n\n[[workload]]\nname = \"w\"\nkind = \"cpu\"\n\n[[layout]]\nname = \"l\"\n@LAYOUT@\nvm = [ { name = \"a\", vcpus = 1@VM@ } ]\n";

    fn parse_matrix(fx: &Fx, head: &str, layout: &str, vm: &str) -> Result<(), String> {
        let text = MATRIX
            .replace("@HEAD@", head)
            .replace("@LAYOUT@", layout)
            .replace("@VM@", vm);
        crate::bench::Matrix::parse(&text, &fx.dir.join("m.toml"), &Fx::host())
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn every_key_the_matrix_parser_takes_is_listed_and_taken() {
        let fx = Fx::new("matrix");
        let keys = matrix();
        let cases = [
            ("matrix.", "zzz = 1", "", ""),
            ("layout[].", "", "zzz = 1", ""),
            ("layout[].vm[].", "", "", ", zzz = 1"),
        ];
        for (prefix, head, layout, vm) in cases {
            let err = parse_matrix(&fx, head, layout, vm).unwrap_err();
            assert_eq!(
                direct(&keys, prefix),
                expected_list(&err),
                "{prefix}: {err}"
            );
        }
        for k in keys.iter().filter(|k| !k.example.is_empty()) {
            let (section, name) = k.path.rsplit_once('.').unwrap();
            let line = format!("{name} = {}", k.example);
            let r = match section {
                // The template names these already.
                "matrix" if ["name", "policies"].contains(&name) => continue,
                "matrix" => parse_matrix(&fx, &line, "", ""),
                "layout[]" if ["name", "vm"].contains(&name) => continue,
                "layout[]" => parse_matrix(&fx, "", &line, ""),
                "layout[].vm[]" if ["name", "vcpus"].contains(&name) => continue,
                "layout[].vm[]" => parse_matrix(&fx, "", "", &format!(", {line}")),
                "workload[]" => continue,
                other => panic!("no test context for {other}"),
            };
            if let Err(e) = r {
                panic!("{}: {e}", k.path);
            }
            if let (Some(range), "matrix" | "layout[].vm[]") = (k.int_range, section) {
                holds_at_both_ends(k, range, |v| {
                    if section == "matrix" {
                        parse_matrix(&fx, &format!("{name} = {v}"), "", "")
                    } else {
                        parse_matrix(&fx, "", "", &format!(", {name} = {v}"))
                    }
                });
            }
        }
    }
}
