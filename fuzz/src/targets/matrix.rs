//! The bench matrix parser (`pacer bench MATRIX`): any text as a matrix
//! file, validated as `pacer bench` validates it before the first cell,
//! every VM of it through the host config's own checks (`vm_check.rs`).
//! Invariants: a rejected matrix gives one line per diagnostic, each with a
//! position inside the text, a field path and none of serde's or toml's
//! internals, no line longer than a readable length; an accepted one
//! describes itself and expands into cells whose configs build, without a
//! panic.

use crate::driver::Target;
use pacer::bench::cells;
use pacer::bench::matrix::{Matrix, MatrixError};

pub struct MatrixTarget {
    files: super::GuestDir,
}

impl MatrixTarget {
    pub fn new() -> MatrixTarget {
        MatrixTarget {
            files: super::GuestDir::new("matrix", "guest.elf"),
        }
    }
}

impl Default for MatrixTarget {
    fn default() -> Self {
        Self::new()
    }
}

const SEEDS: &[&str] = &[
    r#"[matrix]
name = "smoke"
description = "Every policy, CPU-bound VMs."
kernel = "guest.elf"
host_cpus = "0-1"
repetitions = 2
cell_timeout_s = 30
baseline = ["host", "qemu"]
policies = ["host", "haiku", "haiku:power-saving", "global-rr", "pinned", "qemu", { label = "rr-w", policy = "global-rr", dispatch = "workers" }]
memory_mib = 16
trace = true

[[workload]]
name = "cpu"
kind = "cpu"
duration_ms = 300
report_ms = 100

[[workload]]
name = "sleep"
kind = "sleep"
duration_ms = 300
interval_us = 1000
apic = "xapic"

[[workload]]
name = "mix"
kind = "mixed"
mixed = "cpu,sleep"
args = "cs_ns=5"

[[layout]]
name = "one-per-cpu"
workloads = ["cpu"]
under_test = "all"
headline = { metric = "cpu.units_per_s", better = "higher" }
vm = [
  { name = "a", vcpus = 1, cpus = "0" },
  { name = "b", vcpus = 1, cpus = "1", class = "realtime", priority = 110 },
]

[[layout]]
name = "noisy"
workloads = ["sleep"]
under_test = "lat"
headline = [{ metric = "sleep.wake_latency.p99_ns", better = "lower" }, "cpu.units_per_s"]
vm = [
  { name = "lat", vcpus = 1, cpus = "0-1", memory_mib = 8 },
  { name = "hog", count = 2, vcpus = 2, cpus = "0-1", workload = "mix" },
]
"#,
    "[matrix]\nname='m'\nkernel='guest.elf'\npolicies=['host']\n[[workload]]\nname='w'\nkind='burst'\nperiod_us=100\nrun_us=50\n[[layout]]\nname='l'\nvm=[{name='v',vcpus=1}]\n",
    "[matrix]\nname = \"u\"\nkernel = \"guest.elf\"\npolicies = [\"native\", \"haiku\"]\n\n[[workload]]\nname = \"ub\"\nkind = \"unixbench\"\nkernel = \"vmlinux\"\ncopies = [1, \"vcpus\"]\npasses = \"10,3\"\n\n[[layout]]\nname = \"l\"\n[[layout.vm]]\nname = \"linux\"\nvcpus = 2\n",
];

impl Target for MatrixTarget {
    fn name(&self) -> &'static str {
        "matrix"
    }

    fn seeds(&self) -> Vec<Vec<u8>> {
        SEEDS.iter().map(|s| s.as_bytes().to_vec()).collect()
    }

    fn run(&mut self, data: &[u8]) -> Result<(), String> {
        let text = String::from_utf8_lossy(data);
        let path = self.files.dir.join("m.toml");
        match Matrix::parse(&text, &path, &self.files.host) {
            Ok(m) => {
                let _ = m.describe();
                let all = cells::expand(&m);
                // Every (layout, workload) once is enough: the policy and
                // the repetition change no VM.
                for c in all.iter().filter(|c| c.rep == 1).take(64) {
                    let _ = c.id(&m);
                    let _ = c.static_na(&m);
                    let _ = cells::pacer_config(&m, c, &self.files.dir);
                }
                Ok(())
            }
            Err(MatrixError::Invalid { diagnostics, .. }) => {
                let shown = MatrixError::Invalid {
                    path: path.clone(),
                    diagnostics: diagnostics.clone(),
                }
                .to_string();
                super::config::rejection_is_readable(&text, &shown, &diagnostics, Some(1200))
            }
            Err(e) => Err(format!("unexpected error kind: {e}")),
        }
    }
}
