//! Host CPU topology: package -> last-level cache -> core -> logical CPU.
//!
//! Built from sysfs or from a synthetic spec (tests, simulation). Every id is
//! a dense index into the vectors of [`Topology`].
//!
//! Synthetic spec syntax: `PxCxT` (packages x cores per package x threads
//! per core, one LLC per package) or `PxLxCxT` (packages x LLCs per package
//! x cores per LLC x threads per core). Examples: `1x2x1` (this machine),
//! `2x22x2`, `1x16x8`, `1x8x8x2` (8 LLCs of 8 cores x 2 threads), `4x64x4`.

use crate::{CpuId, CpuSet, SchedError};
use serde::{Deserialize, Serialize};

/// Dense index of a core.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct CoreId(pub u32);
/// Dense index of a last-level cache domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct LlcId(pub u32);
/// Dense index of a package (socket).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PackageId(pub u32);

/// How far apart two logical CPUs are, in the cache-locality order used for
/// placement and for migration statistics (nearest first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Distance {
    /// The same logical CPU.
    SameCpu,
    /// Another SMT thread of the same core.
    SmtSibling,
    /// Another core sharing the last-level cache.
    SameLlc,
    /// Another LLC of the same package.
    SamePackage,
    /// Another package.
    Remote,
}

/// One logical CPU (an SMT thread).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuInfo {
    /// Dense id (index in [`Topology::cpus`]).
    pub id: CpuId,
    /// The OS's CPU number (sysfs `cpuN`); equal to `id` for synthetic specs.
    pub os_id: u32,
    /// The core it belongs to.
    pub core: CoreId,
    /// The last-level cache domain it belongs to.
    pub llc: LlcId,
    /// The package it belongs to.
    pub package: PackageId,
    /// Position among the SMT siblings of its core (0-based).
    pub smt_index: u32,
}

/// One physical core and its SMT threads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CoreInfo {
    /// Dense id (index in [`Topology::cores`]).
    pub id: CoreId,
    /// Its logical CPUs in SMT-index order (consecutive ids).
    pub cpus: Vec<CpuId>,
    /// The LLC it belongs to.
    pub llc: LlcId,
    /// The package it belongs to.
    pub package: PackageId,
}

/// One last-level cache domain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LlcInfo {
    /// Dense id (index in [`Topology::llcs`]).
    pub id: LlcId,
    /// The cores sharing this cache.
    pub cores: Vec<CoreId>,
    /// The logical CPUs sharing this cache.
    pub cpus: Vec<CpuId>,
    /// The package it belongs to.
    pub package: PackageId,
}

/// One package (socket).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PackageInfo {
    /// Dense id (index in [`Topology::packages`]).
    pub id: PackageId,
    /// Its LLC domains.
    pub llcs: Vec<LlcId>,
    /// Its cores.
    pub cores: Vec<CoreId>,
    /// Its logical CPUs.
    pub cpus: Vec<CpuId>,
}

/// The whole topology. Invariants (guaranteed by the constructors, checked
/// by [`Topology::validate`] and by every policy at `new`): every CPU
/// belongs to exactly one core, every core to one LLC, every LLC to one
/// package, and each unit's lists hold exactly its members in id order (no
/// empty unit); ids are dense and equal to their vector index; SMT
/// siblings have consecutive ids.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Topology {
    /// Logical CPUs, indexed by [`CpuId`]; SMT siblings have consecutive ids.
    pub cpus: Vec<CpuInfo>,
    /// Cores, indexed by [`CoreId`].
    pub cores: Vec<CoreInfo>,
    /// LLC domains, indexed by [`LlcId`].
    pub llcs: Vec<LlcInfo>,
    /// Packages, indexed by [`PackageId`].
    pub packages: Vec<PackageInfo>,
}

/// Upper bound on the number of logical CPUs of a topology (the same limit
/// as [`crate::cpuset::MAX_CPU_ID`] + 1).
pub const MAX_CPUS: usize = crate::cpuset::MAX_CPU_ID as usize + 1;

const SPEC_SYNTAX: &str = "expected PxCxT (packages x cores per package x threads per core, \
     one LLC per package) or PxLxCxT (packages x LLCs per package x cores per LLC x threads \
     per core), each field a positive integer, e.g. 1x2x1, 2x22x2 or 1x8x8x2";

/// One CPU before dense numbering: its OS number and opaque keys naming its
/// package, LLC and core. Keys only need to be equal for CPUs that share the
/// unit; [`assemble`] derives the dense ids.
#[derive(Debug, Clone, Copy)]
struct RawCpu {
    os_id: u32,
    package: u64,
    llc: u64,
    core: u64,
}

/// Build a topology from raw CPUs. Dense ids follow the hierarchy: packages
/// are ordered by their lowest OS CPU number, LLCs inside a package and cores
/// inside an LLC likewise, and the CPUs of a core (SMT siblings) get
/// consecutive ids in OS-number order. LLCs are keyed by (package, llc) and
/// cores by (package, llc, core), so the hierarchy is consistent by
/// construction.
fn assemble(raw: &[RawCpu]) -> Result<Topology, SchedError> {
    use std::collections::{BTreeMap, HashMap, HashSet};

    if raw.is_empty() {
        return Err(SchedError::Topology("no CPUs".into()));
    }
    if raw.len() > MAX_CPUS {
        return Err(SchedError::Topology(format!(
            "{} CPUs is more than the supported maximum of {MAX_CPUS}",
            raw.len()
        )));
    }
    let mut seen = HashSet::with_capacity(raw.len());
    for c in raw {
        if !seen.insert(c.os_id) {
            return Err(SchedError::Topology(format!(
                "CPU {} appears twice",
                c.os_id
            )));
        }
    }

    type LlcKey = (u64, u64);
    type CoreKey = (u64, u64, u64);
    let mut pkg_min: HashMap<u64, u32> = HashMap::new();
    let mut llc_min: HashMap<LlcKey, u32> = HashMap::new();
    let mut core_min: HashMap<CoreKey, u32> = HashMap::new();
    for c in raw {
        let lk = (c.package, c.llc);
        let ck = (c.package, c.llc, c.core);
        for (slot, os) in [
            (pkg_min.entry(c.package).or_insert(u32::MAX), c.os_id),
            (llc_min.entry(lk).or_insert(u32::MAX), c.os_id),
            (core_min.entry(ck).or_insert(u32::MAX), c.os_id),
        ] {
            *slot = (*slot).min(os);
        }
    }
    let mut pkgs: Vec<(u32, u64)> = pkg_min.iter().map(|(k, m)| (*m, *k)).collect();
    pkgs.sort_unstable();
    let pkg_rank: HashMap<u64, u32> = pkgs
        .iter()
        .enumerate()
        .map(|(i, (_, k))| (*k, i as u32))
        .collect();

    let mut llcs: Vec<((u32, u32), LlcKey)> = llc_min
        .iter()
        .map(|(k, m)| ((pkg_rank[&k.0], *m), *k))
        .collect();
    llcs.sort_unstable();
    let llc_rank: HashMap<LlcKey, u32> = llcs
        .iter()
        .enumerate()
        .map(|(i, (_, k))| (*k, i as u32))
        .collect();

    let mut cores: Vec<((u32, u32), CoreKey)> = core_min
        .iter()
        .map(|(k, m)| ((llc_rank[&(k.0, k.1)], *m), *k))
        .collect();
    cores.sort_unstable();
    let core_rank: HashMap<CoreKey, u32> = cores
        .iter()
        .enumerate()
        .map(|(i, (_, k))| (*k, i as u32))
        .collect();

    // CPUs ordered by (core, os id): siblings are consecutive.
    let mut order: BTreeMap<(u32, u32), RawCpu> = BTreeMap::new();
    for c in raw {
        order.insert((core_rank[&(c.package, c.llc, c.core)], c.os_id), *c);
    }

    let mut topo = Topology {
        cpus: Vec::with_capacity(raw.len()),
        cores: (0..cores.len() as u32)
            .map(|i| CoreInfo {
                id: CoreId(i),
                cpus: Vec::new(),
                llc: LlcId(0),
                package: PackageId(0),
            })
            .collect(),
        llcs: (0..llcs.len() as u32)
            .map(|i| LlcInfo {
                id: LlcId(i),
                cores: Vec::new(),
                cpus: Vec::new(),
                package: PackageId(0),
            })
            .collect(),
        packages: (0..pkgs.len() as u32)
            .map(|i| PackageInfo {
                id: PackageId(i),
                llcs: Vec::new(),
                cores: Vec::new(),
                cpus: Vec::new(),
            })
            .collect(),
    };
    for (i, ((core, _), c)) in order.iter().enumerate() {
        let id = CpuId(i as u32);
        let core_id = CoreId(*core);
        let llc_id = LlcId(llc_rank[&(c.package, c.llc)]);
        let pkg_id = PackageId(pkg_rank[&c.package]);
        let core_info = &mut topo.cores[core_id.0 as usize];
        let smt_index = core_info.cpus.len() as u32;
        if smt_index == 0 {
            core_info.llc = llc_id;
            core_info.package = pkg_id;
            topo.llcs[llc_id.0 as usize].cores.push(core_id);
            topo.packages[pkg_id.0 as usize].cores.push(core_id);
        }
        core_info.cpus.push(id);
        let llc_info = &mut topo.llcs[llc_id.0 as usize];
        if llc_info.cpus.is_empty() {
            llc_info.package = pkg_id;
            topo.packages[pkg_id.0 as usize].llcs.push(llc_id);
        }
        llc_info.cpus.push(id);
        topo.packages[pkg_id.0 as usize].cpus.push(id);
        topo.cpus.push(CpuInfo {
            id,
            os_id: c.os_id,
            core: core_id,
            llc: llc_id,
            package: pkg_id,
            smt_index,
        });
    }
    Ok(topo)
}

/// Reads one sysfs attribute, trimmed.
fn read_attr(path: &std::path::Path) -> Result<String, SchedError> {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .map_err(|e| SchedError::Topology(format!("cannot read {}: {e}", path.display())))
}

/// Reads an attribute holding a CPU list ("0-3,8").
fn read_list(path: &std::path::Path) -> Result<CpuSet, SchedError> {
    let text = read_attr(path)?;
    CpuSet::parse_list(&text).map_err(|e| SchedError::Topology(format!("{}: {e}", path.display())))
}

/// The LLC of one CPU: the `shared_cpu_list` of its highest-level cache, or
/// `None` if the CPU reports no cache.
fn sysfs_llc(cpu_dir: &std::path::Path) -> Result<Option<CpuSet>, SchedError> {
    let cache_dir = cpu_dir.join("cache");
    let Ok(entries) = std::fs::read_dir(&cache_dir) else {
        return Ok(None);
    };
    let mut best: Option<(u32, CpuSet)> = None;
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().starts_with("index") {
            continue;
        }
        let dir = entry.path();
        let level_path = dir.join("level");
        if !level_path.exists() {
            continue;
        }
        let level: u32 = read_attr(&level_path)?.parse().map_err(|_| {
            SchedError::Topology(format!("{}: not a cache level", level_path.display()))
        })?;
        if best.as_ref().is_some_and(|(l, _)| *l >= level) {
            continue;
        }
        let shared = read_list(&dir.join("shared_cpu_list"))?;
        best = Some((level, shared));
    }
    Ok(best.map(|(_, s)| s))
}

impl Topology {
    /// Parse a synthetic spec (see the module docs). CPU ids are numbered so
    /// that the SMT siblings of a core are consecutive: core `k` has CPUs
    /// `k*T ..= k*T + T - 1`, and `os_id == id`.
    ///
    /// Errors with [`SchedError::Topology`] on a malformed spec, a zero
    /// field, or more than [`MAX_CPUS`] CPUs.
    pub fn from_spec(spec: &str) -> Result<Topology, SchedError> {
        let bad = |what: String| {
            SchedError::Topology(format!("bad topology spec {spec:?}: {what}; {SPEC_SYNTAX}"))
        };
        let fields: Vec<&str> = spec.trim().split(['x', 'X']).map(str::trim).collect();
        if fields.len() != 3 && fields.len() != 4 {
            return Err(bad(format!("{} field(s) instead of 3 or 4", fields.len())));
        }
        let mut nums = Vec::with_capacity(4);
        for f in &fields {
            let n: u64 = f
                .parse()
                .map_err(|_| bad(format!("{f:?} is not a positive integer")))?;
            if n == 0 {
                return Err(bad("a field is zero".into()));
            }
            nums.push(n);
        }
        let (p, l, c, t) = match nums[..] {
            [p, c, t] => (p, 1, c, t),
            [p, l, c, t] => (p, l, c, t),
            _ => unreachable!("field count checked above"),
        };
        let total = [p, l, c, t].iter().try_fold(1u64, |acc, n| {
            acc.checked_mul(*n).filter(|v| *v <= MAX_CPUS as u64)
        });
        let Some(total) = total else {
            return Err(bad(format!("more than {MAX_CPUS} CPUs")));
        };
        let mut raw = Vec::with_capacity(total as usize);
        for os in 0..total {
            let core = os / t;
            let llc = core / c;
            let package = llc / l;
            raw.push(RawCpu {
                os_id: os as u32,
                package,
                llc,
                core,
            });
        }
        assemble(&raw)
    }

    /// Discover the host topology from /sys/devices/system/cpu.
    pub fn from_sysfs() -> Result<Topology, SchedError> {
        Self::from_sysfs_root(std::path::Path::new("/sys/devices/system/cpu"))
    }

    /// Discover from a sysfs-like tree rooted at `root` (tests use fake trees).
    ///
    /// Reads, for every online CPU (the `online` list at `root` if present,
    /// otherwise every `cpuN` directory whose own `online` file, if any, is
    /// not `0`): `topology/physical_package_id`, `topology/core_id`,
    /// `topology/thread_siblings_list` (cores are the sibling sets; falls back
    /// to `core_cpus_list`, then to the package + core id pair) and the
    /// `shared_cpu_list` of the highest-level `cache/index*` as the LLC (one
    /// LLC per package when no cache is reported). Ids are re-indexed densely
    /// as described for the spec form; `os_id` keeps the OS number.
    pub fn from_sysfs_root(root: &std::path::Path) -> Result<Topology, SchedError> {
        let online_path = root.join("online");
        let online: Vec<u32> = if online_path.exists() {
            read_list(&online_path)?.iter().map(|c| c.0).collect()
        } else {
            let entries = std::fs::read_dir(root).map_err(|e| {
                SchedError::Topology(format!("cannot list {}: {e}", root.display()))
            })?;
            let mut ids = Vec::new();
            for entry in entries.flatten() {
                let name = entry.file_name();
                let name = name.to_string_lossy();
                let Some(num) = name.strip_prefix("cpu").and_then(|n| n.parse::<u32>().ok()) else {
                    continue;
                };
                let own_online = entry.path().join("online");
                if own_online.exists() && read_attr(&own_online)? == "0" {
                    continue;
                }
                ids.push(num);
            }
            ids.sort_unstable();
            ids
        };
        if online.is_empty() {
            return Err(SchedError::Topology(format!(
                "no online CPU under {}",
                root.display()
            )));
        }
        if online.len() > MAX_CPUS {
            return Err(SchedError::Topology(format!(
                "{} online CPUs is more than the supported maximum of {MAX_CPUS}",
                online.len()
            )));
        }
        let mut raw = Vec::with_capacity(online.len());
        for os in online {
            let dir = root.join(format!("cpu{os}"));
            let topo_dir = dir.join("topology");
            let pkg_path = topo_dir.join("physical_package_id");
            let package_raw: i64 = read_attr(&pkg_path)?.parse().map_err(|_| {
                SchedError::Topology(format!("{}: not a number", pkg_path.display()))
            })?;
            // Some platforms report -1 for "unknown": treat all of those as one package.
            let package = package_raw as u64;
            let core_path = topo_dir.join("core_id");
            let core_id: i64 = read_attr(&core_path)?.parse().map_err(|_| {
                SchedError::Topology(format!("{}: not a number", core_path.display()))
            })?;
            let siblings_path = ["thread_siblings_list", "core_cpus_list"]
                .iter()
                .map(|n| topo_dir.join(n))
                .find(|p| p.exists());
            let core = match siblings_path {
                Some(p) => {
                    let sibs = read_list(&p)?;
                    if !sibs.contains(CpuId(os)) {
                        return Err(SchedError::Topology(format!(
                            "{} does not contain CPU {os} itself",
                            p.display()
                        )));
                    }
                    sibs.first().map_or(os, |c| c.0) as u64
                }
                // Core ids are only unique inside a package; the package is part of the key.
                None => core_id as u64,
            };
            let llc = match sysfs_llc(&dir)? {
                Some(shared) => shared.first().map_or(u64::MAX, |c| c.0 as u64),
                None => u64::MAX,
            };
            raw.push(RawCpu {
                os_id: os,
                package,
                llc,
                core,
            });
        }
        assemble(&raw)
    }

    /// Check the invariants the constructors guarantee (see the type's
    /// docs). The fields are public, so a topology built or changed by
    /// hand may break them; every policy runs this check when it is built,
    /// with the same error for the same mistake.
    pub fn validate(&self) -> Result<(), SchedError> {
        crate::validate::validate_topology(self)
    }

    /// Number of logical CPUs.
    pub fn num_cpus(&self) -> usize {
        self.cpus.len()
    }

    /// The CPU with dense id `id`, if it exists.
    pub fn cpu(&self, id: CpuId) -> Option<&CpuInfo> {
        self.cpus.get(id.0 as usize)
    }

    /// Cache-locality distance between two CPUs. A CPU outside the topology
    /// is [`Distance::Remote`] from everything (this never panics).
    pub fn distance(&self, a: CpuId, b: CpuId) -> Distance {
        let (Some(x), Some(y)) = (self.cpu(a), self.cpu(b)) else {
            return Distance::Remote;
        };
        if a == b {
            Distance::SameCpu
        } else if x.core == y.core {
            Distance::SmtSibling
        } else if x.llc == y.llc {
            Distance::SameLlc
        } else if x.package == y.package {
            Distance::SamePackage
        } else {
            Distance::Remote
        }
    }

    /// All CPUs of the topology.
    pub fn all_cpus(&self) -> CpuSet {
        CpuSet::first_n(self.cpus.len() as u32)
    }

    /// The dense id of the CPU the OS calls `os_id`.
    pub fn cpu_by_os_id(&self, os_id: u32) -> Option<CpuId> {
        self.cpus.iter().find(|c| c.os_id == os_id).map(|c| c.id)
    }

    /// The sub-topology made of the given OS CPU numbers (a VMM's host CPU
    /// set), re-indexed densely; `os_id` keeps the OS number. Cores, LLCs
    /// and packages left without CPUs disappear. Errors on an empty set or
    /// an OS CPU number that is not in this topology.
    pub fn restrict(&self, os_cpus: impl IntoIterator<Item = u32>) -> Result<Topology, SchedError> {
        let mut os: Vec<u32> = os_cpus.into_iter().collect();
        os.sort_unstable();
        os.dedup();
        if os.is_empty() {
            return Err(SchedError::Topology(
                "the CPU set to restrict to is empty".into(),
            ));
        }
        let mut raw = Vec::with_capacity(os.len());
        for os_id in os {
            let Some(id) = self.cpu_by_os_id(os_id) else {
                let known = crate::format_cpu_list(self.cpus.iter().map(|c| c.os_id));
                return Err(SchedError::Topology(format!(
                    "CPU {os_id} is not in the topology (its CPUs are {known})"
                )));
            };
            let c = &self.cpus[id.0 as usize];
            raw.push(RawCpu {
                os_id: c.os_id,
                package: c.package.0 as u64,
                llc: c.llc.0 as u64,
                core: c.core.0 as u64,
            });
        }
        assemble(&raw)
    }

    /// A human-readable table (used by `pacer topology`): one row per CPU
    /// with its id, OS number, package, LLC, core and SMT index, then a
    /// summary line such as
    /// `1 package, 1 LLC, 2 cores, 2 CPUs (1 thread per core)`.
    pub fn describe(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{:>5} {:>5} {:>7} {:>5} {:>5} {:>4}",
            "cpu", "os", "package", "llc", "core", "smt"
        );
        for c in &self.cpus {
            let _ = writeln!(
                out,
                "{:>5} {:>5} {:>7} {:>5} {:>5} {:>4}",
                c.id.0, c.os_id, c.package.0, c.llc.0, c.core.0, c.smt_index
            );
        }
        out.push_str(&self.summary());
        out.push('\n');
        out
    }

    /// One-line summary, e.g. `2 packages, 2 LLCs, 44 cores, 88 CPUs (2 threads per core)`.
    pub fn summary(&self) -> String {
        fn plural(n: usize, one: &str, many: &str) -> String {
            format!("{n} {}", if n == 1 { one } else { many })
        }
        let min_t = self.cores.iter().map(|c| c.cpus.len()).min().unwrap_or(0);
        let max_t = self.cores.iter().map(|c| c.cpus.len()).max().unwrap_or(0);
        let threads = if min_t == max_t {
            format!("{} per core", plural(min_t, "thread", "threads"))
        } else {
            format!("{min_t}-{max_t} threads per core")
        };
        format!(
            "{}, {}, {}, {} ({threads})",
            plural(self.packages.len(), "package", "packages"),
            plural(self.llcs.len(), "LLC", "LLCs"),
            plural(self.cores.len(), "core", "cores"),
            plural(self.cpus.len(), "CPU", "CPUs"),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::{Path, PathBuf};

    /// Structural invariants every constructor must establish.
    fn check_invariants(t: &Topology) {
        assert!(!t.cpus.is_empty());
        for (i, c) in t.cpus.iter().enumerate() {
            assert_eq!(c.id.0 as usize, i);
            let core = &t.cores[c.core.0 as usize];
            assert_eq!(core.cpus[c.smt_index as usize], c.id);
            assert_eq!(core.llc, c.llc);
            assert_eq!(core.package, c.package);
            assert!(t.llcs[c.llc.0 as usize].cpus.contains(&c.id));
            assert_eq!(t.llcs[c.llc.0 as usize].package, c.package);
            assert!(t.packages[c.package.0 as usize].cpus.contains(&c.id));
        }
        for (i, core) in t.cores.iter().enumerate() {
            assert_eq!(core.id.0 as usize, i);
            assert!(!core.cpus.is_empty());
            // Siblings are consecutive ids.
            for w in core.cpus.windows(2) {
                assert_eq!(w[1].0, w[0].0 + 1);
            }
            assert!(t.llcs[core.llc.0 as usize].cores.contains(&core.id));
        }
        for (i, l) in t.llcs.iter().enumerate() {
            assert_eq!(l.id.0 as usize, i);
            assert!(!l.cores.is_empty());
            assert!(t.packages[l.package.0 as usize].llcs.contains(&l.id));
        }
        for (i, p) in t.packages.iter().enumerate() {
            assert_eq!(p.id.0 as usize, i);
            assert!(!p.llcs.is_empty());
        }
        let core_cpus: usize = t.cores.iter().map(|c| c.cpus.len()).sum();
        let llc_cpus: usize = t.llcs.iter().map(|c| c.cpus.len()).sum();
        let pkg_cpus: usize = t.packages.iter().map(|c| c.cpus.len()).sum();
        assert_eq!(core_cpus, t.num_cpus());
        assert_eq!(llc_cpus, t.num_cpus());
        assert_eq!(pkg_cpus, t.num_cpus());
    }

    #[test]
    fn spec_shapes_counts_adjacency_and_distance() {
        // (spec, packages, llcs per package, cores per llc, threads)
        let shapes = [
            ("1x2x1", 1, 1, 2, 1),
            ("1x2x2", 1, 1, 2, 2),
            ("1x4x2", 1, 1, 4, 2),
            ("2x22x2", 2, 1, 22, 2),
            ("1x16x8", 1, 1, 16, 8),
            ("1x8x8x2", 1, 8, 8, 2),
            ("4x64x4", 4, 1, 64, 4),
        ];
        for (spec, p, l, c, th) in shapes {
            let t = Topology::from_spec(spec).unwrap();
            check_invariants(&t);
            assert_eq!(t.packages.len(), p, "{spec}");
            assert_eq!(t.llcs.len(), p * l, "{spec}");
            assert_eq!(t.cores.len(), p * l * c, "{spec}");
            assert_eq!(t.num_cpus(), p * l * c * th, "{spec}");
            for (k, core) in t.cores.iter().enumerate() {
                let want: Vec<CpuId> = (k * th..k * th + th).map(|i| CpuId(i as u32)).collect();
                assert_eq!(core.cpus, want, "{spec} core {k}");
            }
            for cpu in &t.cpus {
                assert_eq!(cpu.os_id, cpu.id.0);
            }
            let d = |a: usize, b: usize| t.distance(CpuId(a as u32), CpuId(b as u32));
            assert_eq!(d(0, 0), Distance::SameCpu);
            if th > 1 {
                assert_eq!(d(0, 1), Distance::SmtSibling);
                assert_eq!(d(1, 0), Distance::SmtSibling);
            }
            if c > 1 {
                assert_eq!(d(0, th), Distance::SameLlc);
            }
            if l > 1 {
                assert_eq!(d(0, c * th), Distance::SamePackage);
            }
            if p > 1 {
                assert_eq!(d(0, l * c * th), Distance::Remote);
            }
            // Distance never shrinks as we move further along the id order
            // from CPU 0 (ids follow the hierarchy).
            let ds: Vec<Distance> = (0..t.num_cpus()).map(|i| d(0, i)).collect();
            assert!(ds.windows(2).all(|w| w[0] <= w[1]), "{spec}");
            assert!(t.describe().contains(&t.summary()));
        }
    }

    #[test]
    fn describe_summary_line() {
        let t = Topology::from_spec("1x2x1").unwrap();
        assert_eq!(
            t.summary(),
            "1 package, 1 LLC, 2 cores, 2 CPUs (1 thread per core)"
        );
        let d = t.describe();
        assert_eq!(d.lines().count(), 4);
        let t = Topology::from_spec("2x2x4x2").unwrap();
        assert_eq!(
            t.summary(),
            "2 packages, 4 LLCs, 16 cores, 32 CPUs (2 threads per core)"
        );
    }

    #[test]
    fn malformed_specs_are_rejected_with_syntax_help() {
        for bad in [
            "",
            "1",
            "1x2",
            "1x2x3x4x5",
            "axbxc",
            "1x0x1",
            "0x1x1",
            "1x1x0",
            "1x-1x1",
            "1x2x1x0",
            "1.5x2x1",
            "8193x1x1",
            "2x4097x1",
            "99999999999x99999999999x99999999999",
        ] {
            match Topology::from_spec(bad) {
                Err(SchedError::Topology(msg)) => {
                    assert!(
                        msg.contains("PxCxT") && msg.contains("PxLxCxT"),
                        "{bad}: {msg}"
                    )
                }
                other => panic!("{bad:?} accepted: {other:?}"),
            }
        }
        // The limit itself is fine.
        assert_eq!(Topology::from_spec("1x4096x2").unwrap().num_cpus(), 8192);
        assert!(Topology::from_spec(" 1X2X1 ").is_ok());
    }

    #[test]
    fn distance_of_unknown_cpu_is_remote() {
        let t = Topology::from_spec("1x2x1").unwrap();
        assert_eq!(t.distance(CpuId(0), CpuId(99)), Distance::Remote);
        assert!(t.cpu(CpuId(2)).is_none());
    }

    #[test]
    fn restrict_reindexes_and_drops_empty_units() {
        let t = Topology::from_spec("2x2x2x2").unwrap();
        // CPUs 0,1 (core 0, llc 0, pkg 0), 5 (core 2, llc 1, pkg 0), 14 (core 7, llc 3, pkg 1).
        let r = t.restrict([0, 1, 5, 14]).unwrap();
        check_invariants(&r);
        assert_eq!(r.num_cpus(), 4);
        assert_eq!(r.cores.len(), 3);
        assert_eq!(r.llcs.len(), 3);
        assert_eq!(r.packages.len(), 2);
        let os: Vec<u32> = r.cpus.iter().map(|c| c.os_id).collect();
        assert_eq!(os, vec![0, 1, 5, 14]);
        assert_eq!(r.distance(CpuId(0), CpuId(1)), Distance::SmtSibling);
        assert_eq!(r.distance(CpuId(0), CpuId(2)), Distance::SamePackage);
        assert_eq!(r.distance(CpuId(0), CpuId(3)), Distance::Remote);
        assert_eq!(r.cpu_by_os_id(14), Some(CpuId(3)));
        assert_eq!(r.cpu(CpuId(3)).unwrap().smt_index, 0);

        assert!(matches!(t.restrict([]), Err(SchedError::Topology(_))));
        match t.restrict([0, 99]) {
            Err(SchedError::Topology(msg)) => assert!(msg.contains("99"), "{msg}"),
            other => panic!("unknown CPU accepted: {other:?}"),
        }
    }

    /// A fake sysfs CPU tree in a unique temp directory, removed on drop.
    struct FakeSysfs(PathBuf);

    /// One fake CPU: os id, package, core_id, thread siblings, LLC shared list.
    struct FakeCpu<'a> {
        os: u32,
        pkg: i64,
        core_id: u32,
        siblings: &'a str,
        llc: &'a str,
    }

    impl FakeSysfs {
        fn new(name: &str, cpus: &[FakeCpu], online: Option<&str>, offline_dirs: &[u32]) -> Self {
            use std::sync::atomic::{AtomicU32, Ordering};
            static N: AtomicU32 = AtomicU32::new(0);
            let root = std::env::temp_dir().join(format!(
                "pacer-topo-{}-{name}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = std::fs::remove_dir_all(&root);
            std::fs::create_dir_all(&root).unwrap();
            let w = |p: &Path, s: &str| {
                std::fs::create_dir_all(p.parent().unwrap()).unwrap();
                std::fs::write(p, format!("{s}\n")).unwrap();
            };
            if let Some(list) = online {
                w(&root.join("online"), list);
            }
            for c in cpus {
                let d = root.join(format!("cpu{}", c.os));
                w(&d.join("topology/physical_package_id"), &c.pkg.to_string());
                w(&d.join("topology/core_id"), &c.core_id.to_string());
                w(&d.join("topology/thread_siblings_list"), c.siblings);
                // L1d, L1i, L2 private to the CPU's core, then the LLC.
                for (idx, level, shared) in
                    [(0, 1, c.siblings), (1, 1, c.siblings), (2, 2, c.siblings)]
                {
                    w(
                        &d.join(format!("cache/index{idx}/level")),
                        &level.to_string(),
                    );
                    w(&d.join(format!("cache/index{idx}/shared_cpu_list")), shared);
                }
                w(&d.join("cache/index3/level"), "3");
                w(&d.join("cache/index3/shared_cpu_list"), c.llc);
            }
            for os in offline_dirs {
                // Offline CPUs keep a directory but no topology.
                w(&root.join(format!("cpu{os}/online")), "0");
            }
            std::fs::create_dir_all(root.join("cpufreq")).unwrap();
            FakeSysfs(root)
        }
    }

    impl Drop for FakeSysfs {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn sysfs_smt_two_llcs_noncontiguous_ids() {
        // Intel-style numbering: siblings are (n, n+8); OS ids 0-3,8-11 online,
        // CPU 4 exists but is offline. LLC 0 = cores {0,1}, LLC 1 = cores {2,3}.
        let mut cpus = Vec::new();
        for n in 0..4u32 {
            let llc = if n < 2 { "0-1,8-9" } else { "2-3,10-11" };
            let sib = format!("{n},{}", n + 8);
            cpus.push((n, sib.clone(), llc));
            cpus.push((n + 8, sib, llc));
        }
        let fake: Vec<FakeCpu> = cpus
            .iter()
            .map(|(os, sib, llc)| FakeCpu {
                os: *os,
                pkg: 0,
                core_id: os % 8,
                siblings: sib,
                llc,
            })
            .collect();
        for online in [Some("0-3,8-11"), None] {
            let tree = FakeSysfs::new("smt2llc", &fake, online, &[4]);
            let t = Topology::from_sysfs_root(&tree.0).unwrap();
            check_invariants(&t);
            assert_eq!(t.packages.len(), 1);
            assert_eq!(t.llcs.len(), 2);
            assert_eq!(t.cores.len(), 4);
            assert_eq!(t.num_cpus(), 8);
            let os: Vec<u32> = t.cpus.iter().map(|c| c.os_id).collect();
            assert_eq!(os, vec![0, 8, 1, 9, 2, 10, 3, 11]);
            let id = |os: u32| t.cpu_by_os_id(os).unwrap();
            assert_eq!(t.distance(id(0), id(8)), Distance::SmtSibling);
            assert_eq!(t.distance(id(0), id(1)), Distance::SameLlc);
            assert_eq!(t.distance(id(9), id(0)), Distance::SameLlc);
            assert_eq!(t.distance(id(0), id(2)), Distance::SamePackage);
            assert_eq!(t.distance(id(11), id(8)), Distance::SamePackage);
            assert_eq!(t.cpu(id(10)).unwrap().smt_index, 1);
            assert!(t.cpu_by_os_id(4).is_none());
            assert_eq!(
                t.summary(),
                "1 package, 2 LLCs, 4 cores, 8 CPUs (2 threads per core)"
            );

            let r = t.restrict([0, 8, 2]).unwrap();
            check_invariants(&r);
            assert_eq!((r.cores.len(), r.llcs.len(), r.num_cpus()), (2, 2, 3));
        }
    }

    #[test]
    fn sysfs_two_packages_and_missing_cache() {
        // Two packages whose core ids repeat (core_id is per package), no SMT.
        let fake: Vec<FakeCpu> = (0..4u32)
            .map(|n| FakeCpu {
                os: n,
                pkg: (n / 2) as i64,
                core_id: n % 2,
                siblings: ["0", "1", "2", "3"][n as usize],
                llc: ["0-1", "0-1", "2-3", "2-3"][n as usize],
            })
            .collect();
        let tree = FakeSysfs::new("2pkg", &fake, Some("0-3"), &[]);
        let t = Topology::from_sysfs_root(&tree.0).unwrap();
        check_invariants(&t);
        assert_eq!((t.packages.len(), t.llcs.len(), t.cores.len()), (2, 2, 4));
        assert_eq!(t.distance(CpuId(0), CpuId(1)), Distance::SameLlc);
        assert_eq!(t.distance(CpuId(1), CpuId(2)), Distance::Remote);

        // Without cache directories every package is one LLC.
        for n in 0..4 {
            std::fs::remove_dir_all(tree.0.join(format!("cpu{n}/cache"))).unwrap();
        }
        let t = Topology::from_sysfs_root(&tree.0).unwrap();
        check_invariants(&t);
        assert_eq!((t.packages.len(), t.llcs.len(), t.cores.len()), (2, 2, 4));
    }

    #[test]
    fn sysfs_errors_are_reported() {
        let missing =
            std::env::temp_dir().join(format!("pacer-topo-missing-{}", std::process::id()));
        assert!(matches!(
            Topology::from_sysfs_root(&missing),
            Err(SchedError::Topology(_))
        ));
        let fake = [FakeCpu {
            os: 0,
            pkg: 0,
            core_id: 0,
            siblings: "0",
            llc: "0",
        }];
        // Online list names a CPU without a directory.
        let tree = FakeSysfs::new("err", &fake, Some("0-1"), &[]);
        match Topology::from_sysfs_root(&tree.0) {
            Err(SchedError::Topology(msg)) => assert!(msg.contains("cpu1"), "{msg}"),
            other => panic!("accepted: {other:?}"),
        }
        // Garbage in an attribute.
        std::fs::write(tree.0.join("online"), "0\n").unwrap();
        std::fs::write(tree.0.join("cpu0/topology/physical_package_id"), "zero\n").unwrap();
        assert!(matches!(
            Topology::from_sysfs_root(&tree.0),
            Err(SchedError::Topology(_))
        ));
    }

    #[test]
    fn sysfs_on_this_host() {
        if !Path::new("/sys/devices/system/cpu/online").exists() {
            return;
        }
        let t = Topology::from_sysfs().unwrap();
        check_invariants(&t);
        let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
        let online = CpuSet::parse_list(&online).unwrap();
        assert_eq!(t.num_cpus(), online.len());
        for c in &t.cpus {
            assert!(online.contains(CpuId(c.os_id)));
        }
        assert!(t.describe().ends_with(&format!("{}\n", t.summary())));
    }

    #[test]
    fn serde_round_trip() {
        let t = Topology::from_spec("1x8x8x2").unwrap();
        let json = serde_json::to_string(&t).unwrap();
        assert_eq!(serde_json::from_str::<Topology>(&json).unwrap(), t);
    }
}
