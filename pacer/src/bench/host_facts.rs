//! The facts of the host a cell ran on, recorded with every cell so that
//! cells of a matrix run on several hosts (shards, `pacer bench merge`)
//! can be told apart and compared: the host's name, CPU model, topology
//! as Pacer sees it (`pacer topology`: packages, LLCs, cores, CPUs, SMT),
//! kernel release, which KVM serves `/dev/kvm`, and how busy the host
//! was: the load average when the cell started, the share of the host's
//! CPU time during the cell taken by anything but this process and its
//! children (`/proc/stat`, `/proc/self/stat`), and the CPU frequency at
//! its end where sysfs cpufreq is readable (many VMs have none).
//!
//! Two hosts are the same *machine kind* when everything but the name and
//! the load agrees: a merge pools the cells of one kind (identical nodes
//! of a cluster) and shows different kinds side by side.

use serde::{Deserialize, Serialize};

/// The host's topology in counts (`vcpu_sched::Topology::from_sysfs`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopologyFacts {
    pub sockets: u32,
    pub llcs: u32,
    pub cores: u32,
    pub cpus: u32,
    /// Hardware threads per core (the most any core has): 1 without SMT.
    pub threads_per_core: u32,
}

/// What a cell's record says about its host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostFacts {
    /// The host's name (`uname -n`).
    pub name: String,
    /// `model name` of the first CPU in /proc/cpuinfo; empty if unknown.
    pub cpu_model: String,
    /// Null when sysfs gave no topology.
    pub topology: Option<TopologyFacts>,
    /// The kernel release (`uname -r`).
    pub kernel: String,
    /// The KVM module loaded: `kvm_intel`, `kvm_amd`, `kvm_pvm` (KVM
    /// without hardware virtualization), `kvm` (another), or `none`.
    pub kvm: String,
    /// The 1-minute load average when the cell started; null if unknown.
    pub load_1m: Option<f64>,
    /// Of the host's CPU time during the cell (all CPUs), the share busy
    /// with anything but Pacer and its children: 0 on a quiet host, near 1
    /// when others held every CPU. Null: unreadable, or no cell ran.
    #[serde(default)]
    pub others_cpu_share: Option<f64>,
    /// The online CPUs' mean current frequency at the cell's end (sysfs
    /// `cpufreq/scaling_cur_freq`); null: unreadable.
    #[serde(default)]
    pub cpu_freq_khz: Option<u64>,
}

impl HostFacts {
    /// The facts of this host now.
    pub fn detect() -> HostFacts {
        HostFacts {
            name: hostname(),
            cpu_model: cpu_model(),
            topology: vcpu_sched::Topology::from_sysfs()
                .ok()
                .map(|t| topology_facts(&t)),
            kernel: read_trimmed("/proc/sys/kernel/osrelease"),
            kvm: kvm_kind(std::path::Path::new("/sys/module")),
            load_1m: load_1m(),
            others_cpu_share: None,
            cpu_freq_khz: None,
        }
    }

    /// The same facts with this moment's load (a cell's start).
    pub fn with_current_load(&self) -> HostFacts {
        HostFacts {
            load_1m: load_1m(),
            others_cpu_share: None,
            cpu_freq_khz: None,
            ..self.clone()
        }
    }

    /// "load 1.20, others 35 % of CPU time, 2.40 GHz" (each "unreadable"
    /// where it is).
    pub fn describe_load(&self) -> String {
        let load = self
            .load_1m
            .map(|l| format!("load {l:.2}"))
            .unwrap_or_else(|| "load unreadable".into());
        let others = self
            .others_cpu_share
            .map(|s| format!("others {:.0} % of CPU time", s * 100.0))
            .unwrap_or_else(|| "others' CPU time unreadable".into());
        let freq = self
            .cpu_freq_khz
            .map(|k| format!("{:.2} GHz", k as f64 / 1e6))
            .unwrap_or_else(|| "CPU frequency unreadable".into());
        format!("{load}, {others}, {freq}")
    }

    /// What makes hosts comparable: everything but the name and the load.
    pub fn machine_kind(&self) -> String {
        format!(
            "{}; {}; Linux {}; {}",
            if self.cpu_model.is_empty() {
                "unknown CPU"
            } else {
                &self.cpu_model
            },
            self.topology_summary(),
            self.kernel,
            self.kvm
        )
    }

    /// `1 socket, 1 LLC, 2 cores, 2 CPUs, no SMT`.
    pub fn topology_summary(&self) -> String {
        let Some(t) = &self.topology else {
            return "topology unknown".into();
        };
        let n = |v: u32, one: &str, many: &str| format!("{v} {}", if v == 1 { one } else { many });
        format!(
            "{}, {}, {}, {}, {}",
            n(t.sockets, "socket", "sockets"),
            n(t.llcs, "LLC", "LLCs"),
            n(t.cores, "core", "cores"),
            n(t.cpus, "CPU", "CPUs"),
            if t.threads_per_core > 1 {
                format!("SMT{}", t.threads_per_core)
            } else {
                "no SMT".into()
            }
        )
    }
}

fn topology_facts(t: &vcpu_sched::Topology) -> TopologyFacts {
    TopologyFacts {
        sockets: t.packages.len() as u32,
        llcs: t.llcs.len() as u32,
        cores: t.cores.len() as u32,
        cpus: t.cpus.len() as u32,
        threads_per_core: t.cores.iter().map(|c| c.cpus.len()).max().unwrap_or(0) as u32,
    }
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn hostname() -> String {
    let name = read_trimmed("/proc/sys/kernel/hostname");
    if name.is_empty() {
        "unknown-host".into()
    } else {
        name
    }
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_default()
}

/// Which KVM is loaded, from the modules under `sys_module` (hardware
/// first: a host never has two).
pub fn kvm_kind(sys_module: &std::path::Path) -> String {
    ["kvm_intel", "kvm_amd", "kvm_pvm", "kvm"]
        .into_iter()
        .find(|m| sys_module.join(m).exists())
        .unwrap_or("none")
        .to_string()
}

fn load_1m() -> Option<f64> {
    read_trimmed("/proc/loadavg")
        .split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .filter(|v: &f64| v.is_finite())
}

/// A 1-minute load above this many runnable tasks per CPU: a busy host.
pub const BUSY_LOAD_PER_CPU: f64 = 1.0;
/// Others taking more than this share of the CPU time during a cell: a
/// busy host.
pub const BUSY_OTHERS_SHARE: f64 = 0.25;

/// What a verdict over cells run on these hosts must add when any of them
/// was busy (load over [`BUSY_LOAD_PER_CPU`] per CPU, or others over
/// [`BUSY_OTHERS_SHARE`] of the CPU time): the worst figures seen, so the
/// reader can weigh a "best" or a "not significant" measured among
/// someone else's work. None when every host was quiet or nothing is known.
pub fn busy_note<'a>(hosts: impl IntoIterator<Item = &'a HostFacts>) -> Option<String> {
    let mut worst_load: Option<(f64, u32)> = None;
    let mut worst_others: Option<f64> = None;
    let mut busy = false;
    for h in hosts {
        if let (Some(load), Some(cpus)) = (h.load_1m, h.topology.as_ref().map(|t| t.cpus)) {
            if cpus > 0 {
                busy |= load / f64::from(cpus) > BUSY_LOAD_PER_CPU;
                if worst_load.is_none_or(|(l, c)| load / f64::from(cpus) > l / f64::from(c)) {
                    worst_load = Some((load, cpus));
                }
            }
        }
        if let Some(share) = h.others_cpu_share {
            busy |= share > BUSY_OTHERS_SHARE;
            worst_others = Some(worst_others.map_or(share, |w: f64| w.max(share)));
        }
    }
    if !busy {
        return None;
    }
    let mut parts = Vec::new();
    if let Some((load, cpus)) = worst_load {
        parts.push(format!("1-minute load up to {load:.2} on {cpus} CPUs"));
    }
    if let Some(share) = worst_others {
        parts.push(format!("others up to {:.0} % of CPU time", share * 100.0));
    }
    Some(format!(
        "measured on a busy host ({}): repeat on a quiet host before trusting it",
        parts.join(", ")
    ))
}

/// CPU time counters at a cell's start ([`CellWindow::finish`] at its
/// end fills in the load over the cell).
#[derive(Debug, Clone, Copy)]
pub struct CellWindow {
    /// (busy, total) clock ticks of all CPUs.
    host: Option<(u64, u64)>,
    /// Clock ticks of this process and its reaped children.
    ours: Option<u64>,
}

impl CellWindow {
    /// Read the counters before a cell runs.
    pub fn start() -> CellWindow {
        CellWindow {
            host: host_ticks(),
            ours: our_ticks(),
        }
    }

    /// Record the others' share of the CPU time since [`Self::start`] and
    /// the CPU frequency now in `facts`.
    pub fn finish(&self, facts: &mut HostFacts) {
        facts.others_cpu_share =
            match (self.host, host_ticks(), self.ours, our_ticks()) {
                (Some((b0, t0)), Some((b1, t1)), Some(o0), Some(o1)) if t1 > t0 => Some(
                    others_share(b1.saturating_sub(b0), t1 - t0, o1.saturating_sub(o0)),
                ),
                _ => None,
            };
        facts.cpu_freq_khz = cpu_freq_khz();
    }
}

/// Busy ticks not ours over all ticks, within 0..=1.
fn others_share(busy: u64, total: u64, ours: u64) -> f64 {
    (busy.saturating_sub(ours) as f64 / total as f64).clamp(0.0, 1.0)
}

/// (busy, total) from `/proc/stat`'s `cpu` line: busy is all but idle and
/// iowait.
fn host_ticks() -> Option<(u64, u64)> {
    parse_proc_stat(&std::fs::read_to_string("/proc/stat").ok()?)
}

fn parse_proc_stat(text: &str) -> Option<(u64, u64)> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    // user nice system idle iowait irq softirq steal (guest time is
    // already within user and nice).
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3)? + v.get(4).unwrap_or(&0);
    total.checked_sub(idle).map(|busy| (busy, total))
}

/// utime + stime + cutime + cstime of `/proc/self/stat`.
fn our_ticks() -> Option<u64> {
    parse_self_stat(&std::fs::read_to_string("/proc/self/stat").ok()?)
}

fn parse_self_stat(text: &str) -> Option<u64> {
    // The command name may hold spaces and parentheses: fields start after
    // the last ')'. Then state is field 3, utime field 14.
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let at = |n: usize| f.get(n - 3)?.parse::<i64>().ok();
    let sum = at(14)? + at(15)? + at(16)? + at(17)?;
    u64::try_from(sum).ok()
}

/// The mean `scaling_cur_freq` of the CPUs that have one.
fn cpu_freq_khz() -> Option<u64> {
    let dir = std::fs::read_dir("/sys/devices/system/cpu").ok()?;
    let freqs: Vec<u64> = dir
        .flatten()
        .filter(|e| {
            let n = e.file_name();
            let n = n.to_string_lossy();
            n.len() > 3 && n.starts_with("cpu") && n[3..].chars().all(|c| c.is_ascii_digit())
        })
        .filter_map(|e| {
            std::fs::read_to_string(e.path().join("cpufreq/scaling_cur_freq"))
                .ok()?
                .trim()
                .parse()
                .ok()
        })
        .collect();
    (!freqs.is_empty()).then(|| freqs.iter().sum::<u64>() / freqs.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_files_parse() {
        let stat = "cpu  100 5 50 800 20 3 2 10 0 0\ncpu0 50 2 25 400 10 1 1 5 0 0\n";
        // busy = 100+5+50+3+2+10 = 170, total = 990.
        assert_eq!(parse_proc_stat(stat), Some((170, 990)));
        assert_eq!(parse_proc_stat("intr 1 2"), None);
        let me = "4242 (pacer (x) y) S 1 2 3 4 5 6 7 8 9 10 111 222 33 44 20 0 1 0";
        assert_eq!(parse_self_stat(me), Some(111 + 222 + 33 + 44));
    }

    #[test]
    fn others_share_is_busy_time_not_ours() {
        assert_eq!(others_share(100, 200, 100), 0.0);
        assert_eq!(others_share(200, 200, 50), 0.75);
        // Our children's time reaped late can exceed the host's delta.
        assert_eq!(others_share(10, 200, 50), 0.0);
    }

    #[test]
    fn a_cell_window_on_this_host_fills_in_the_load() {
        let w = CellWindow::start();
        // Some CPU time of our own between the two readings.
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let mut f = HostFacts::detect();
        w.finish(&mut f);
        if let Some(s) = f.others_cpu_share {
            assert!((0.0..=1.0).contains(&s), "{f:?}");
        }
        let text = f.describe_load();
        assert!(text.starts_with("load "), "{text}");
        assert!(
            text.contains("GHz") || text.contains("CPU frequency unreadable"),
            "{text}"
        );
        f.load_1m = None;
        f.others_cpu_share = None;
        f.cpu_freq_khz = None;
        assert_eq!(
            f.describe_load(),
            "load unreadable, others' CPU time unreadable, CPU frequency unreadable"
        );
    }

    #[test]
    fn this_hosts_facts_and_its_kind() {
        let f = HostFacts::detect();
        assert!(!f.name.is_empty());
        assert!(!f.kernel.is_empty());
        let kind = f.machine_kind();
        assert!(kind.contains(&f.kernel) && kind.contains(&f.kvm), "{kind}");
        // The load is not part of the kind, nor the name.
        let mut other = f.with_current_load();
        other.load_1m = Some(99.0);
        other.others_cpu_share = Some(0.9);
        other.cpu_freq_khz = Some(1_000_000);
        other.name = "elsewhere".into();
        assert_eq!(other.machine_kind(), kind);
        other.kvm = "kvm_intel".into();
        assert_ne!(other.machine_kind(), kind);
    }

    #[test]
    fn a_busy_host_is_named_with_its_worst_figures() {
        let mut quiet = HostFacts::detect();
        quiet.topology = Some(TopologyFacts {
            sockets: 1,
            llcs: 1,
            cores: 4,
            cpus: 4,
            threads_per_core: 1,
        });
        quiet.load_1m = Some(3.9);
        quiet.others_cpu_share = Some(0.25);
        assert_eq!(busy_note([&quiet]), None);
        // Nothing known: nothing said.
        let mut unknown = quiet.clone();
        unknown.load_1m = None;
        unknown.others_cpu_share = None;
        assert_eq!(busy_note([&unknown]), None);
        // Load over one per CPU.
        let mut loaded = quiet.clone();
        loaded.load_1m = Some(8.5);
        assert_eq!(
            busy_note([&quiet, &loaded]).as_deref(),
            Some("measured on a busy host (1-minute load up to 8.50 on 4 CPUs, others up to 25 % of CPU time): repeat on a quiet host before trusting it")
        );
        // Others' CPU time alone.
        let mut crowded = quiet.clone();
        crowded.others_cpu_share = Some(0.6);
        let note = busy_note([&quiet, &crowded]).unwrap();
        assert!(
            note.contains("load up to 3.90 on 4 CPUs") && note.contains("others up to 60 %"),
            "{note}"
        );
    }

    #[test]
    fn kvm_kind_prefers_the_hardware_module() {
        let dir = std::env::temp_dir().join(format!("pacer-kvm-kind-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("kvm")).unwrap();
        assert_eq!(kvm_kind(&dir), "kvm");
        std::fs::create_dir_all(dir.join("kvm_pvm")).unwrap();
        assert_eq!(kvm_kind(&dir), "kvm_pvm");
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(kvm_kind(&dir), "none");
    }

    #[test]
    fn topology_summary_names_smt() {
        let mut f = HostFacts::detect();
        f.topology = Some(TopologyFacts {
            sockets: 2,
            llcs: 4,
            cores: 44,
            cpus: 88,
            threads_per_core: 2,
        });
        assert_eq!(
            f.topology_summary(),
            "2 sockets, 4 LLCs, 44 cores, 88 CPUs, SMT2"
        );
        f.topology = None;
        assert_eq!(f.topology_summary(), "topology unknown");
    }
}
