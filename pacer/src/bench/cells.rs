//! Cells: one point of the matrix (layout x workload x policy x
//! repetition), the order they run in, and the in-memory `Config` a Pacer
//! cell runs.
//!
//! Order: repetition-major rounds; in each round every (layout, workload)
//! pair runs once under every policy, the policies rotated by one place per
//! pair and per round. So on a host whose speed drifts (other tenants,
//! thermal state) every policy is as often early as late, and no policy
//! always follows the same neighbour.

use super::matrix::{Matrix, Runner};
use super::native;
use super::unixbench::SuiteSpec;
use super::workload::Workload;
use std::path::{Path, PathBuf};
use vcpu_sched::tunables::PRIORITY_NORMAL;
use vcpu_sched::{SchedClass, Tunables};
use vmm::boot::GuestKind;
use vmm::config::{Config, Console, HostConfig, VmConfig};
use vmm::policy::Policy;

/// One cell of the matrix (indices into the matrix's axes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cell {
    pub layout: usize,
    pub workload: usize,
    pub policy: usize,
    /// 1-based.
    pub rep: u32,
}

impl Cell {
    /// `layout/workload/policy/rN`: unique in the matrix, stable across
    /// runs (what `--resume` matches on).
    pub fn id(&self, m: &Matrix) -> String {
        format!(
            "{}/{}/{}/r{}",
            m.layouts[self.layout].name,
            m.workloads[self.workload].name,
            m.policies[self.policy].label,
            self.rep
        )
    }

    /// A directory name for the cell's logs.
    pub fn dir_name(&self, m: &Matrix) -> String {
        self.id(m)
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    }

    /// Why this cell cannot run, known before running it: a policy that
    /// cannot honour the layout's priorities or classes (as `pacer
    /// validate` would refuse it), or a Linux image that is not built.
    pub fn static_na(&self, m: &Matrix) -> Option<String> {
        let layout = &m.layouts[self.layout];
        let runner = m.policies[self.policy].runner;
        for i in 0..layout.vms.len() {
            let kind = vm_workload(m, self, i).kind;
            if kind.expected_end().is_some() && runner == Runner::Qemu {
                return Some(format!(
                    "VM {}: the {kind} workload tests Pacer's own limits (its ports and MMIO are Pacer's devices, not QEMU's)",
                    layout.vms[i].name
                ));
            }
            let suite = match (&vm_workload(m, self, i).suite, runner) {
                (None, Runner::Native) => {
                    return Some(format!(
                        "VM {}: the bench guest runs only in a VM (native runs the unixbench suite on the host)",
                        layout.vms[i].name
                    ))
                }
                (None, _) => continue,
                (Some(suite), Runner::Native) => match native::unavailable(suite) {
                    Some(why) => return Some(why),
                    None => continue,
                },
                (Some(suite), _) => suite,
            };
            let images = [Some(&suite.kernel), suite.initramfs.as_ref()];
            if let Some(missing) = images.into_iter().flatten().find(|p| !p.is_file()) {
                return Some(format!(
                    "{} is not built (bash guests/linux/build.sh)",
                    missing.display()
                ));
            }
        }
        for v in &layout.vms {
            match runner {
                Runner::Pacer { policy, .. } => {
                    if let Some(r) = policy.refuses_vm(v.class, v.priority) {
                        return Some(format!("VM {}: {}", v.name, r.explain(policy)));
                    }
                    if v.shares != vmm::config::sched_rules::Shares::default() {
                        if let Err(why) = vmm::config::sched_rules::shares_honoured(
                            policy,
                            "shares",
                            "the matrix",
                        ) {
                            return Some(format!("VM {}: {why}", v.name));
                        }
                    }
                }
                Runner::Qemu | Runner::Native => {
                    if v.shares != vmm::config::sched_rules::Shares::default() {
                        return Some(format!(
                            "VM {}: {} leaves its threads to the host kernel, which knows nothing of Pacer's weights, caps and reservations",
                            v.name,
                            m.policies[self.policy].label
                        ));
                    }
                    if v.class == SchedClass::Realtime || v.priority != PRIORITY_NORMAL {
                        return Some(format!(
                            "VM {}: {} leaves its threads to the host kernel, which knows nothing of VM priorities or classes",
                            v.name,
                            m.policies[self.policy].label
                        ));
                    }
                }
            }
        }
        None
    }
}

/// Every cell of the matrix, in run order (see the module comment).
pub fn expand(m: &Matrix) -> Vec<Cell> {
    let pairs: Vec<(usize, usize)> = m
        .layouts
        .iter()
        .enumerate()
        .flat_map(|(li, l)| l.workloads.iter().map(move |&wi| (li, wi)))
        .collect();
    let n = m.policies.len();
    let mut cells = Vec::with_capacity(pairs.len() * n * m.repetitions as usize);
    for rep in 1..=m.repetitions {
        for (g, &(layout, workload)) in pairs.iter().enumerate() {
            for k in 0..n {
                cells.push(Cell {
                    layout,
                    workload,
                    policy: (k + g + rep as usize - 1) % n,
                    rep,
                });
            }
        }
    }
    cells
}

/// The workload VM `vm` of `cell` runs (its own, or the cell's).
pub fn vm_workload<'m>(m: &'m Matrix, cell: &Cell, vm: usize) -> &'m Workload {
    let v = &m.layouts[cell.layout].vms[vm];
    &m.workloads[v.workload.unwrap_or(cell.workload)]
}

/// What a VM of a cell boots.
#[derive(Debug, Clone, PartialEq)]
pub enum VmBoot {
    /// The matrix's bench guest with these workload words (the VMM or the
    /// QEMU peer appends `tsc_khz=` and `vcpus=`).
    Bench { kernel: PathBuf, args: String },
    /// A Linux guest running the suite (its image in `suite`); `cmdline`
    /// follows the platform's own words (`console=ttyS0 reboot=k`).
    Linux { suite: SuiteSpec, cmdline: String },
}

/// What VM `vm` of `cell` boots.
pub fn vm_boot(m: &Matrix, cell: &Cell, vm: usize) -> VmBoot {
    let w = vm_workload(m, cell, vm);
    match &w.suite {
        Some(suite) => VmBoot::Linux {
            suite: suite.clone(),
            cmdline: suite.guest_cmdline(m.layouts[cell.layout].vms[vm].vcpus),
        },
        None => VmBoot::Bench {
            kernel: m.kernel.clone(),
            args: w.guest_args().join(" "),
        },
    }
}

/// The config a Pacer cell runs: the layout's VMs with their workloads,
/// under the cell's policy, every VM stopped after the cell's time limit,
/// logs in `log_dir`.
pub fn pacer_config(m: &Matrix, cell: &Cell, log_dir: &Path) -> Option<Config> {
    let Runner::Pacer {
        policy,
        mode,
        dispatch,
        kvm_poll_us,
    } = m.policies[cell.policy].runner
    else {
        return None;
    };
    let layout = &m.layouts[cell.layout];
    let vms = layout
        .vms
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let (guest, kernel, initrd, cmdline) = match vm_boot(m, cell, i) {
                VmBoot::Bench { kernel, args } => (GuestKind::Bench, kernel, None, args),
                VmBoot::Linux { suite, cmdline } => {
                    (GuestKind::Linux, suite.kernel, suite.initramfs, cmdline)
                }
            };
            VmConfig {
                name: v.name.clone(),
                guest,
                vcpus: v.vcpus,
                memory_mib: v.memory_mib,
                kernel,
                initrd,
                modules: Vec::new(),
                cpuid: Default::default(),
                cmdline,
                cpus: v.cpus.clone(),
                class: v.class,
                priority: v.priority,
                shares: v.shares,
                coschedule: v.coschedule,
                coschedule_named: v.coschedule_named,
                console: Console::Log,
                timeout: Some(m.cell_timeout),
            }
        })
        .collect::<Vec<_>>();
    // A column that names no dispatch runs each layout under the default
    // a config file without one gets.
    let tunables = Tunables::default();
    let dispatch =
        dispatch.unwrap_or_else(|| vmm::config::default_dispatch(false, &tunables, &vms));
    Some(Config {
        path: PathBuf::from(format!("{}#{}", m.path.display(), cell.id(m))),
        host: HostConfig {
            cpus: m.host_cpus.clone(),
            policy,
            mode: if policy == Policy::Host {
                Default::default()
            } else {
                mode
            },
            smt_isolation: false,
            dispatch,
            // A matrix column measures one mechanism: a cell that cannot
            // have it fails rather than measure another.
            dispatch_explicit: true,
            halt_poll_us: vmm::config::DEFAULT_HALT_POLL_US,
            kvm_poll_us,
            log_limits: Default::default(),
            tunables,
            // The default table: the dispatch picks the slices.
            low_latency_named: false,
            log_dir: log_dir.to_path_buf(),
        },
        vms,
    })
}

#[cfg(test)]
mod tests {
    use super::super::matrix::tests::{Fixture, GOOD};
    use super::*;

    #[test]
    fn every_cell_once_and_policies_rotate() {
        let fx = Fixture::new("cells");
        let m = fx.parse(GOOD).unwrap();
        let cells = expand(&m);
        // pair x {cpu, lat} + prio x {cpu} = 3 pairs, 6 policies, 3 reps.
        assert_eq!(cells.len(), 3 * 6 * 3);
        let mut ids: Vec<String> = cells.iter().map(|c| c.id(&m)).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), cells.len());
        // The policy that leads a round rotates: round offsets 0..=4
        // (3 pairs x 3 reps) put 5 of the 6 policies first.
        let firsts: std::collections::BTreeSet<usize> =
            cells.chunks(6).map(|round| round[0].policy).collect();
        assert_eq!(firsts.into_iter().collect::<Vec<_>>(), [0, 1, 2, 3, 4]);
        // A round holds one (layout, workload, rep) under all policies.
        for round in cells.chunks(6) {
            let mut p: Vec<usize> = round.iter().map(|c| c.policy).collect();
            p.sort();
            assert_eq!(p, [0, 1, 2, 3, 4, 5]);
            assert!(round.iter().all(|c| (c.layout, c.workload, c.rep)
                == (round[0].layout, round[0].workload, round[0].rep)));
        }
        assert_eq!(cells[0].id(&m), "pair/cpu/host/r1");
        assert_eq!(cells[0].dir_name(&m), "pair_cpu_host_r1");
    }

    #[test]
    fn config_and_static_na() {
        let fx = Fixture::new("cellcfg");
        let m = fx.parse(GOOD).unwrap();
        let cells = expand(&m);
        let pick = |layout: &str, workload: &str, policy: &str| {
            *cells
                .iter()
                .find(|c| {
                    m.layouts[c.layout].name == layout
                        && m.workloads[c.workload].name == workload
                        && m.policies[c.policy].label == policy
                })
                .unwrap()
        };
        // A policy table's dispatch and its watcher period reach the config.
        let kvm = pacer_config(&m, &pick("pair", "lat", "kvm"), Path::new("/tmp/x")).unwrap();
        assert_eq!(
            (kvm.host.dispatch, kvm.host.kvm_poll_us),
            (vcpu_engine::DispatchKind::KvmIrqchip, 800)
        );
        let c = pick("pair", "lat", "haiku:power-saving");
        let cfg = pacer_config(&m, &c, Path::new("/tmp/x")).unwrap();
        assert_eq!(cfg.vms.len(), 3);
        assert_eq!(cfg.vms[0].cmdline, "workload=sleep interval_us=500");
        assert_eq!(
            cfg.vms[1].cmdline,
            "workload=cpu duration_ms=300 report_ms=100"
        );
        assert_eq!(cfg.host.mode, vcpu_sched::Mode::PowerSaving);
        assert_eq!(cfg.vms[2].timeout, Some(m.cell_timeout));
        assert!(c.static_na(&m).is_none());
        assert!(pacer_config(&m, &pick("pair", "lat", "qemu"), Path::new("/")).is_none());
        // Priority 20: only haiku honours it.
        assert!(pick("prio", "cpu", "haiku").static_na(&m).is_none());
        let why = pick("prio", "cpu", "host").static_na(&m).unwrap();
        assert!(why.contains("VM hi") && why.contains("priorit"), "{why}");
        assert!(pick("prio", "cpu", "rr-w").static_na(&m).is_some());
        assert!(pick("prio", "cpu", "qemu").static_na(&m).is_some());
    }
}
