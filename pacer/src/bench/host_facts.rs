//! The facts of the host a cell ran on, recorded with every cell so that
//! cells of a matrix run on several hosts (shards, `pacer bench merge`)
//! can be told apart and compared: the host's name, CPU model, topology
//! as Pacer sees it (`pacer topology`: packages, LLCs, cores, CPUs, SMT),
//! kernel release, which KVM serves `/dev/kvm`, and the load when the cell
//! started.
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
        }
    }

    /// The same facts with this moment's load (a cell's start).
    pub fn with_current_load(&self) -> HostFacts {
        HostFacts {
            load_1m: load_1m(),
            ..self.clone()
        }
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

#[cfg(test)]
mod tests {
    use super::*;

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
        other.name = "elsewhere".into();
        assert_eq!(other.machine_kind(), kind);
        other.kvm = "kvm_intel".into();
        assert_ne!(other.machine_kind(), kind);
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
