//! The `native` column: the `unixbench` suite run on the host itself, with
//! no VM — the ceiling a guest's index is read against (UnixBench's usual
//! guest/host ratio), beside the `host` policy (Pacer's VMs under the host
//! kernel's scheduler) and the `qemu` peer.
//!
//! Each VM of a layout becomes one `ubench run` on the VM's core set, with
//! the copy counts the VM would run (one per vCPU for `"vcpus"`) and the
//! workload's passes, tests and seconds; the VMs of a cell run at once, so
//! two VMs sharing the CPUs stay two suites sharing them. `ubench` and its
//! `busybox` are the ones the Linux image carries, next to the kernel
//! where guests/linux/build.sh puts them. A layout with a bench-guest VM
//! has no native form (the bench guest needs a VM): those cells are `n/a`.

use super::procs::{self, Look, Proc, ProcOutcome};
use super::unixbench::SuiteSpec;
use crate::unixbench::host::{self, HostRun, HostRunError};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use vcpu_engine::host_cpus::HostCpuSet;

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum NativeError {
    #[error("{0}")]
    Suite(#[from] HostRunError),
    #[error("cannot start ubench: {0}")]
    Spawn(std::io::Error),
    #[error("{0}")]
    Io(std::io::Error),
    #[error("stopped by a signal")]
    Stopped,
}

/// One VM's suite, run natively.
#[derive(Debug, Clone)]
pub struct NativeRun {
    pub name: String,
    pub group: String,
    /// The VM's vCPUs: the copy count of `"vcpus"`.
    pub vcpus: u32,
    pub cpus: HostCpuSet,
    pub suite: SuiteSpec,
}

/// Where the suite's host binaries are for `suite`: beside its kernel.
pub fn suite_dir(suite: &SuiteSpec) -> PathBuf {
    suite
        .kernel
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// Why `suite` cannot run natively here, if it cannot.
pub fn unavailable(suite: &SuiteSpec) -> Option<String> {
    let ubench = suite_dir(suite).join("ubench");
    (!ubench.is_file()).then(|| {
        format!(
            "{} is not built (bash guests/linux/build.sh)",
            ubench.display()
        )
    })
}

impl NativeRun {
    /// The `ubench run` arguments this VM stands for.
    pub fn host_run(&self) -> HostRun {
        let counts: Vec<String> = self
            .suite
            .copy_counts(self.vcpus)
            .iter()
            .map(u32::to_string)
            .collect();
        HostRun {
            suite_dir: suite_dir(&self.suite),
            copies: Some(counts.join(",")),
            passes: self.suite.passes.map(|(l, s)| format!("{l},{s}")),
            tests: (!self.suite.tests.is_empty()).then(|| self.suite.tests.join(",")),
            seconds: self.suite.seconds,
        }
    }
}

/// Run the suites of one cell at once; their output (`NAME.ubench.log`)
/// and messages (`NAME.stderr.log`) go to `dir`.
pub fn run(
    runs: &[NativeRun],
    dir: &Path,
    limit: Duration,
    should_stop: &dyn Fn() -> bool,
) -> Result<Vec<ProcOutcome>, NativeError> {
    std::fs::create_dir_all(dir).map_err(NativeError::Io)?;
    let start = Instant::now();
    let mut procs = Vec::new();
    for r in runs {
        let mut cmd = host::command(&r.host_run())?;
        let output = dir.join(format!("{}.ubench.log", r.name));
        let log = dir.join(format!("{}.stderr.log", r.name));
        // Dropping what started already stops it.
        procs.push(
            Proc::spawn(&r.name, &mut cmd, &r.cpus, output, log, true)
                .map_err(NativeError::Spawn)?,
        );
    }
    // ubench exits when its runs are through.
    let running = |_: usize, _: &str, _: &str| Look::Running;
    let timed_out = procs::watch(&mut procs, start, limit, should_stop, &running)
        .map_err(|_| NativeError::Stopped)?;
    let samples = |i: usize, text: &str| {
        let r = &runs[i];
        r.suite.samples(text, &r.name, &r.group, r.vcpus)
    };
    Ok(procs::outcomes(&procs, timed_out, limit, &samples, &|_| {
        false
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn spec(kernel: &Path, extra: &[(&str, &str)]) -> SuiteSpec {
        let mut p: BTreeMap<String, String> = extra
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        p.insert("kernel".into(), kernel.display().to_string());
        SuiteSpec::from_params(&p).unwrap()
    }

    #[test]
    fn arguments_follow_the_vm() {
        let r = NativeRun {
            name: "a".into(),
            group: "a".into(),
            vcpus: 4,
            cpus: HostCpuSet::new(),
            suite: spec(
                Path::new("/img/linux/vmlinux"),
                &[("passes", "2"), ("tests", "pipe,spawn"), ("seconds", "0.5")],
            ),
        };
        let h = r.host_run();
        assert_eq!(h.suite_dir, PathBuf::from("/img/linux"));
        assert_eq!(h.copies.as_deref(), Some("1,4"));
        assert_eq!(h.passes.as_deref(), Some("2,2"));
        assert_eq!(h.tests.as_deref(), Some("pipe,spawn"));
        assert_eq!(h.seconds, Some(0.5));
        let missing = unavailable(&r.suite).unwrap();
        assert!(
            missing.contains("/img/linux/ubench is not built"),
            "{missing}"
        );
    }

    /// The real suite natively, two tests for 0.1 s, 1 pass, as one VM of
    /// 2 vCPUs: both runs scored (a smoke run, not a measurement).
    #[test]
    fn the_suite_runs_natively_and_is_scored() {
        let ubench = guests::ubench();
        let suite = spec(
            &ubench.with_file_name("vmlinux"),
            &[
                ("passes", "1"),
                ("tests", "syscall,pipe"),
                ("seconds", "0.1"),
            ],
        );
        assert_eq!(unavailable(&suite), None);
        let dir = std::env::temp_dir().join(format!("pacer-native-{}", std::process::id()));
        let runs = [NativeRun {
            name: "linux".into(),
            group: "linux".into(),
            vcpus: 2,
            cpus: vcpu_engine::host_cpus::online_cpus().unwrap(),
            suite,
        }];
        let out = run(&runs, &dir, Duration::from_secs(120), &|| false).unwrap();
        assert!(out[0].error.is_none(), "{:?}", out[0].error);
        let index = |m: &str| {
            out[0]
                .samples
                .iter()
                .find(|s| s.metric == m)
                .map(|s| s.value)
        };
        assert!(index("unixbench.index.copies_1").is_some_and(|v| v > 0.0));
        assert!(index("unixbench.index.copies_vcpus").is_some_and(|v| v > 0.0));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
