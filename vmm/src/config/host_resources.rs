//! What the host can give a run, so that `pacer validate` refuses a config
//! the host cannot hold instead of a VM failing half-way: total memory
//! (`/proc/meminfo`), the most vCPUs KVM allows in one VM
//! (`KVM_CAP_MAX_VCPUS`), the open-file limit (each VM holds a KVM VM fd,
//! one fd per vCPU, eventfds and its log files) and the thread limit (one
//! thread per vCPU plus a controller per VM). A fact that cannot be read
//! is `None` and not checked.

/// File descriptors a VM holds besides one per vCPU (VM fd, irqfd, console
/// log, results file, a few for the engine and the runtime).
pub const FDS_PER_VM: u64 = 8;
/// File descriptors the process holds besides its VMs (stdio, /dev/kvm,
/// the JSON output, signalfd-like helpers).
pub const FDS_BASE: u64 = 16;
/// Threads a VM needs besides one per vCPU (its controller).
pub const THREADS_PER_VM: u64 = 1;

/// Host limits a config is checked against.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostResources {
    /// MemTotal, in MiB.
    pub memory_mib: Option<u64>,
    /// KVM's most vCPUs per VM.
    pub max_vcpus_per_vm: Option<u32>,
    /// RLIMIT_NOFILE (soft).
    pub max_open_files: Option<u64>,
    /// The smaller of RLIMIT_NPROC (soft) and kernel.threads-max.
    pub max_threads: Option<u64>,
}

/// MemTotal in MiB from the text of /proc/meminfo.
pub fn parse_meminfo_total_mib(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024)
}

fn rlimit(resource: libc::__rlimit_resource_t) -> Option<u64> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit to a valid pointer.
    if unsafe { libc::getrlimit(resource, &mut r) } != 0 || r.rlim_cur == libc::RLIM_INFINITY {
        return None;
    }
    Some(r.rlim_cur)
}

impl HostResources {
    /// Read the running host's limits.
    pub fn detect() -> HostResources {
        let memory_mib = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|t| parse_meminfo_total_mib(&t));
        let max_vcpus_per_vm = kvm_ioctls::Kvm::new()
            .ok()
            .map(|k| k.get_max_vcpus() as u32)
            .filter(|&n| n > 0);
        let threads_max = std::fs::read_to_string("/proc/sys/kernel/threads-max")
            .ok()
            .and_then(|t| t.trim().parse::<u64>().ok());
        let max_threads = match (rlimit(libc::RLIMIT_NPROC), threads_max) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        HostResources {
            memory_mib,
            max_vcpus_per_vm,
            max_open_files: rlimit(libc::RLIMIT_NOFILE),
            max_threads,
        }
    }
}

/// One VM's demand, in config order.
#[derive(Debug, Clone, Copy)]
pub struct VmDemand {
    pub vcpus: u32,
    pub memory_mib: u64,
}

/// A limit a VM crosses: the field to blame and `expected ..., found ...`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shortfall {
    /// Index of the VM in the config.
    pub vm: usize,
    /// `vcpus` or `memory_mib`.
    pub field: &'static str,
    pub message: String,
}

/// Check every VM against the host; each limit is reported once, at the
/// VM where the run's running total first crosses it.
pub fn check(host: &HostResources, vms: &[VmDemand]) -> Vec<Shortfall> {
    let mut out = Vec::new();
    let (mut mem, mut fds, mut threads) = (0u64, FDS_BASE, 0u64);
    let (mut mem_done, mut fds_done, mut threads_done) = (false, false, false);
    for (i, v) in vms.iter().enumerate() {
        if let Some(max) = host.max_vcpus_per_vm {
            if v.vcpus > max {
                out.push(Shortfall {
                    vm: i,
                    field: "vcpus",
                    message: format!(
                        "expected at most {max} vCPUs (KVM's limit per VM on this host), found {}",
                        v.vcpus
                    ),
                });
            }
        }
        mem = mem.saturating_add(v.memory_mib);
        if let Some(total) = host.memory_mib {
            if !mem_done && mem > total {
                mem_done = true;
                let message = if i == 0 || v.memory_mib > total {
                    format!(
                        "expected at most the host's {total} MiB of memory, found {}",
                        v.memory_mib
                    )
                } else {
                    format!(
                        "expected the VMs together to fit in the host's {total} MiB of memory, found {mem} MiB up to this VM"
                    )
                };
                out.push(Shortfall {
                    vm: i,
                    field: "memory_mib",
                    message,
                });
            }
        }
        fds = fds.saturating_add(u64::from(v.vcpus) + FDS_PER_VM);
        if let Some(max) = host.max_open_files {
            if !fds_done && fds > max {
                fds_done = true;
                out.push(Shortfall {
                    vm: i,
                    field: "vcpus",
                    message: format!(
                        "expected the VMs up to this one to need at most {max} open files (ulimit -n), found {fds} ({FDS_PER_VM} per VM + 1 per vCPU + {FDS_BASE})"
                    ),
                });
            }
        }
        threads = threads.saturating_add(u64::from(v.vcpus) + THREADS_PER_VM);
        if let Some(max) = host.max_threads {
            if !threads_done && threads > max {
                threads_done = true;
                out.push(Shortfall {
                    vm: i,
                    field: "vcpus",
                    message: format!(
                        "expected the VMs up to this one to need at most {max} threads (ulimit -u, kernel.threads-max), found {threads}"
                    ),
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo() {
        let t = "MemTotal:       24576000 kB\nMemFree:         1000 kB\n";
        assert_eq!(parse_meminfo_total_mib(t), Some(24000));
        assert_eq!(parse_meminfo_total_mib("nothing"), None);
    }

    #[test]
    fn limits_are_reported_at_the_crossing_vm() {
        let host = HostResources {
            memory_mib: Some(1000),
            max_vcpus_per_vm: Some(8),
            max_open_files: Some(60),
            max_threads: Some(100),
        };
        let vm = |vcpus, memory_mib| VmDemand { vcpus, memory_mib };
        assert_eq!(check(&host, &[vm(2, 400), vm(2, 400)]), vec![]);
        let s = check(&host, &[vm(2, 400), vm(2, 700), vm(1, 10)]);
        assert_eq!(s.len(), 1);
        assert_eq!((s[0].vm, s[0].field), (1, "memory_mib"));
        assert!(s[0].message.contains("1100 MiB"), "{}", s[0].message);
        let s = check(&host, &[vm(9, 10)]);
        assert_eq!((s[0].vm, s[0].field), (0, "vcpus"));
        // Open files: 16 + (8 + 8) * 3 = 64 > 60 at the third VM.
        let s = check(&host, &[vm(8, 1), vm(8, 1), vm(8, 1)]);
        assert_eq!(s.len(), 1, "{s:?}");
        assert_eq!(s[0].vm, 2);
        assert!(s[0].message.contains("open files"));
        assert!(check(&HostResources::default(), &[vm(1000, u64::MAX)]).is_empty());
    }
}
