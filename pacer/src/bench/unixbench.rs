//! The `unixbench` workload: a Linux guest running the UnixBench-style
//! suite (guests/linux) as a matrix cell, and the one adapter between that
//! suite and the bench's metrics.
//!
//! In: the workload's parameters (`kernel`, `initramfs`, `cmdline`,
//! `copies`, `passes`, `tests`, `seconds`) become a Linux VM (Pacer's or
//! QEMU's) whose command line carries the suite's `ub.*` words and
//! `ub.end=poweroff`, so the VM stops by itself when the suite is through.
//!
//! Out: the VM's serial console log, read with the same parser and scoring
//! as `pacer unixbench --report` (`crate::unixbench`), gives whole-VM
//! samples:
//! - `unixbench.index.copies_K` — the index of the run with K copies
//!   (`copies_vcpus` for the entry `"vcpus"`, one copy per vCPU), the
//!   headline;
//! - `unixbench.score.TEST.copies_K` — each test's score in its own unit;
//! - `unixbench.failed_passes.copies_K` — passes that failed in the guest
//!   (the test still has a score from its other passes).
//!
//! A log that lacks a requested run, a run's `UB end`, or a score for a
//! requested test is an error naming what is missing: the cell fails with
//! it rather than reporting a partial index as if it were whole.

use super::metrics::Sample;
use crate::unixbench::score;
use std::collections::BTreeMap;
use std::path::PathBuf;
use vmm::unixbench::{catalog, parse_log};

/// One entry of `copies`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Copies {
    Fixed(u32),
    /// One copy per vCPU of the VM (`"vcpus"`).
    PerVcpu,
}

impl Copies {
    fn parse(s: &str) -> Result<Copies, String> {
        if s == "vcpus" {
            return Ok(Copies::PerVcpu);
        }
        match s.parse::<u32>() {
            Ok(n) if (1..=256).contains(&n) => Ok(Copies::Fixed(n)),
            _ => Err(format!(
                "{s:?} is not a copy count (1..=256, or \"vcpus\" for one per vCPU)"
            )),
        }
    }

    /// How many copies run in a VM with `vcpus` vCPUs.
    pub fn count(self, vcpus: u32) -> u32 {
        match self {
            Copies::Fixed(n) => n,
            Copies::PerVcpu => vcpus.max(1),
        }
    }

    /// The metric-name suffix: `copies_1`, `copies_vcpus`.
    pub fn suffix(self) -> String {
        match self {
            Copies::Fixed(n) => format!("copies_{n}"),
            Copies::PerVcpu => "copies_vcpus".into(),
        }
    }
}

/// What a `unixbench` workload asks for, parsed from its parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct SuiteSpec {
    /// The Linux image (a vmlinux or a bzImage).
    pub kernel: PathBuf,
    pub initramfs: Option<PathBuf>,
    /// The user's command-line words, after the suite's.
    pub cmdline: String,
    pub copies: Vec<Copies>,
    /// `P` or `L,S` (long and short tests), as the guest's `ub.passes`.
    pub passes: Option<(u32, u32)>,
    /// The tests to run; empty for all twelve.
    pub tests: Vec<&'static str>,
    /// Seconds every pass runs instead of the test's own duration.
    pub seconds: Option<f64>,
}

/// The suite's own default: 1 copy and one per vCPU.
const DEFAULT_COPIES: [Copies; 2] = [Copies::Fixed(1), Copies::PerVcpu];

fn parse_passes(s: &str) -> Result<(u32, u32), String> {
    let one = |p: &str| match p.parse::<u32>() {
        Ok(n) if (1..=100).contains(&n) => Ok(n),
        _ => Err(format!("{s:?}: passes are P or L,S with each 1..=100")),
    };
    match s.split_once(',') {
        Some((l, short)) => Ok((one(l)?, one(short)?)),
        None => one(s).map(|p| (p, p)),
    }
}

fn parse_tests(s: &str) -> Result<Vec<&'static str>, String> {
    if s == "all" {
        return Ok(Vec::new());
    }
    s.split(',')
        .map(|name| {
            catalog::find(name).map(|t| t.name).ok_or_else(|| {
                let names: Vec<_> = catalog::TESTS.iter().map(|t| t.name).collect();
                format!(
                    "{name:?} is not one of the suite's tests ({}, or all)",
                    names.join(", ")
                )
            })
        })
        .collect()
}

impl SuiteSpec {
    /// Parse a workload's parameters; `Err` lists `(parameter, message)`
    /// for every bad one, so that the matrix can point at each.
    pub fn from_params(
        params: &BTreeMap<String, String>,
    ) -> Result<SuiteSpec, Vec<(&'static str, String)>> {
        let mut errors = Vec::new();
        let kernel = match params.get("kernel") {
            Some(k) => PathBuf::from(k),
            None => {
                errors.push((
                    "kernel",
                    "a unixbench workload needs `kernel` (the Linux image, e.g. guests/out/linux/vmlinux)"
                        .to_string(),
                ));
                PathBuf::new()
            }
        };
        let copies = match params.get("copies") {
            None => DEFAULT_COPIES.to_vec(),
            Some(c) => {
                let parsed: Result<Vec<Copies>, String> = c.split(',').map(Copies::parse).collect();
                parsed.unwrap_or_else(|e| {
                    errors.push(("copies", e));
                    Vec::new()
                })
            }
        };
        let passes = match params.get("passes").map(|p| parse_passes(p)) {
            Some(Ok(p)) => Some(p),
            Some(Err(e)) => {
                errors.push(("passes", e));
                None
            }
            None => None,
        };
        let tests = match params.get("tests").map(|t| parse_tests(t)) {
            Some(Ok(t)) => t,
            Some(Err(e)) => {
                errors.push(("tests", e));
                Vec::new()
            }
            None => Vec::new(),
        };
        let seconds = match params.get("seconds").map(|s| s.parse::<f64>()) {
            Some(Ok(s)) if s.is_finite() && s > 0.0 && s <= 3600.0 => Some(s),
            Some(_) => {
                errors.push(("seconds", "must be a number of seconds in (0, 3600]".into()));
                None
            }
            None => None,
        };
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(SuiteSpec {
            kernel,
            initramfs: params.get("initramfs").map(PathBuf::from),
            cmdline: params.get("cmdline").cloned().unwrap_or_default(),
            copies,
            passes,
            tests,
            seconds,
        })
    }

    /// Distinct copy counts a VM with `vcpus` vCPUs runs, ascending.
    pub fn copy_counts(&self, vcpus: u32) -> Vec<u32> {
        let mut c: Vec<u32> = self.copies.iter().map(|c| c.count(vcpus)).collect();
        c.sort_unstable();
        c.dedup();
        c
    }

    /// The guest's command line (after Pacer's or QEMU's platform words):
    /// the suite's `ub.*` words, then the user's.
    pub fn guest_cmdline(&self, vcpus: u32) -> String {
        let counts: Vec<String> = self.copy_counts(vcpus).iter().map(u32::to_string).collect();
        let mut words = vec![format!("ub.copies={}", counts.join(","))];
        if let Some((long, short)) = self.passes {
            words.push(format!("ub.passes={long},{short}"));
        }
        if !self.tests.is_empty() {
            words.push(format!("ub.tests={}", self.tests.join(",")));
        }
        if let Some(s) = self.seconds {
            words.push(format!("ub.seconds={s}"));
        }
        words.push("ub.end=poweroff".into());
        if !self.cmdline.is_empty() {
            words.push(self.cmdline.clone());
        }
        words.join(" ")
    }

    /// The tests a run must score.
    fn wanted_tests(&self) -> Vec<&'static catalog::TestInfo> {
        catalog::TESTS
            .iter()
            .filter(|t| self.tests.is_empty() || self.tests.contains(&t.name))
            .collect()
    }

    /// Roughly how long the suite runs in a VM with `vcpus` vCPUs (for the
    /// progress bar's estimate; boot time not included).
    pub fn estimate_s(&self, vcpus: u32) -> f64 {
        let (long, short) = self.passes.unwrap_or((10, 3));
        let one_run: f64 = self
            .wanted_tests()
            .iter()
            .map(|t| {
                let passes = if t.long_repeat { long } else { short };
                f64::from(passes) * self.seconds.unwrap_or(t.seconds)
            })
            .sum();
        one_run * self.copy_counts(vcpus).len() as f64
    }

    /// The guest has printed all it will print (`UB done`).
    pub fn finished(console: &str) -> bool {
        parse_log(console).done
    }

    /// The samples of one VM from its console log, or what is missing.
    pub fn samples(
        &self,
        console: &str,
        vm: &str,
        group: &str,
        vcpus: u32,
    ) -> Result<Vec<Sample>, String> {
        let log = parse_log(console);
        let sample = |metric: String, value: f64| Sample {
            vm: vm.to_string(),
            group: group.to_string(),
            vcpu: None,
            metric,
            value,
        };
        let mut out = Vec::new();
        for copies in &self.copies {
            let n = copies.count(vcpus);
            let Some(run) = log.run_for(n) else {
                return Err(format!("the suite printed no results with {n} copies"));
            };
            if !run.complete {
                return Err(format!(
                    "the run with {n} copies did not finish (no `UB end copies={n}`)"
                ));
            }
            let summary = score::summarize(run);
            for t in self.wanted_tests() {
                let row = summary.rows.iter().find(|r| r.test == t.name);
                if row.and_then(|r| r.score).is_none() {
                    let why = run
                        .errors
                        .iter()
                        .find(|e| e.0 == t.name)
                        .map(|e| format!(": pass {} failed ({})", e.1, e.2))
                        .unwrap_or_default();
                    return Err(format!("test {} has no score with {n} copies{why}", t.name));
                }
            }
            let suffix = copies.suffix();
            let rows = summary
                .rows
                .iter()
                .filter(|r| self.wanted_tests().iter().any(|t| t.name == r.test));
            let mut indexes = Vec::new();
            for r in rows {
                if let (Some(s), Some(i)) = (r.score, r.index) {
                    out.push(sample(format!("unixbench.score.{}.{suffix}", r.test), s));
                    indexes.push(i);
                }
            }
            let index = score::geometric_mean(&indexes)
                .ok_or_else(|| format!("no test scored with {n} copies"))?;
            out.push(sample(format!("unixbench.index.{suffix}"), index));
            out.push(sample(
                format!("unixbench.failed_passes.{suffix}"),
                run.errors.len() as f64,
            ));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1.0)
    }

    /// A recorded guest console (tests/data, also what the Linux stand-in
    /// prints in tests/bench_unixbench.rs): kernel lines around the
    /// suite's, two tests with 1 copy and with 2 copies, 3 passes each
    /// (the worst dropped).
    /// 1 copy:  dhry2reg 466800, 466800, 100 -> 466800 = 4 x 116700 -> 40
    ///          syscall 90000, 90000, 5 -> 90000 = 6 x 15000 -> 60
    ///          index sqrt(40 x 60) = sqrt(2400)
    /// 2 copies: dhry2reg 933600 (x3) -> 80; syscall 180000 (x2) and one
    ///          failed pass -> 120; index sqrt(80 x 120) = sqrt(9600)
    const CONSOLE: &str = include_str!("../../tests/data/unixbench-console.txt");

    fn two_tests() -> SuiteSpec {
        SuiteSpec::from_params(&params(&[
            ("kernel", "/k/vmlinux"),
            ("copies", "1,vcpus"),
            ("passes", "3"),
            ("tests", "dhry2reg,syscall"),
        ]))
        .unwrap()
    }

    fn value(samples: &[Sample], metric: &str) -> f64 {
        samples
            .iter()
            .find(|s| s.metric == metric)
            .unwrap_or_else(|| panic!("no {metric} in {samples:?}"))
            .value
    }

    #[test]
    fn a_recorded_console_becomes_the_cells_metrics() {
        let spec = two_tests();
        assert!(SuiteSpec::finished(CONSOLE));
        let s = spec.samples(CONSOLE, "linux-1", "linux", 2).unwrap();
        assert!(s
            .iter()
            .all(|s| s.vm == "linux-1" && s.group == "linux" && s.vcpu.is_none()));
        assert!(close(value(&s, "unixbench.index.copies_1"), 2400f64.sqrt()));
        assert!(close(
            value(&s, "unixbench.index.copies_vcpus"),
            9600f64.sqrt()
        ));
        assert!(close(
            value(&s, "unixbench.score.dhry2reg.copies_1"),
            466800.0
        ));
        assert!(close(
            value(&s, "unixbench.score.syscall.copies_vcpus"),
            180000.0
        ));
        assert_eq!(value(&s, "unixbench.failed_passes.copies_1"), 0.0);
        assert_eq!(value(&s, "unixbench.failed_passes.copies_vcpus"), 1.0);
        // The same index `pacer unixbench --report` prints for that log.
        let log = parse_log(CONSOLE);
        let report = score::summarize(log.run_for(2).unwrap()).index.unwrap();
        assert!(close(value(&s, "unixbench.index.copies_vcpus"), report));
    }

    #[test]
    fn what_is_missing_is_named() {
        let spec = two_tests();
        // A VM with 4 vCPUs wanted a run with 4 copies.
        let e = spec.samples(CONSOLE, "v", "v", 4).unwrap_err();
        assert!(e.contains("no results with 4 copies"), "{e}");
        // A log cut before the second run ends.
        let cut = &CONSOLE[..CONSOLE.find("UB end copies=2").unwrap()];
        assert!(!SuiteSpec::finished(cut));
        let e = spec.samples(cut, "v", "v", 2).unwrap_err();
        assert!(
            e.contains("did not finish") && e.contains("copies=2"),
            "{e}"
        );
        // A wanted test with no score at all.
        let all = SuiteSpec {
            tests: vec!["dhry2reg", "syscall", "pipe"],
            ..two_tests()
        };
        let e = all.samples(CONSOLE, "v", "v", 2).unwrap_err();
        assert!(e.contains("test pipe has no score with 1 copies"), "{e}");
        let failing = CONSOLE.replace(
            "UB test=syscall copies=1 pass=1 score=90000 unit=lps seconds=10.000 count=900000\r\n",
            "",
        )
        .replace("UB test=syscall copies=1 pass=2 score=5 unit=lps seconds=10.000 count=50\r\n", "UB error test=syscall copies=1 pass=2 msg=timeout\r\n")
        .replace("UB test=syscall copies=1 pass=3 score=90000 unit=lps seconds=10.000 count=900000\r\n", "");
        let e = spec.samples(&failing, "v", "v", 2).unwrap_err();
        assert!(
            e.contains("test syscall has no score") && e.contains("timeout"),
            "{e}"
        );
        // Kernel noise alone: nothing.
        let e = spec
            .samples("[ 0.0] Linux version 6.1\n", "v", "v", 2)
            .unwrap_err();
        assert!(e.contains("no results with 1 copies"), "{e}");
    }

    #[test]
    fn guest_command_line() {
        let spec = two_tests();
        assert_eq!(
            spec.guest_cmdline(2),
            "ub.copies=1,2 ub.passes=3,3 ub.tests=dhry2reg,syscall ub.end=poweroff"
        );
        // One vCPU: "1" and "vcpus" are one run.
        assert_eq!(spec.copy_counts(1), [1]);
        let user = SuiteSpec::from_params(&params(&[
            ("kernel", "k"),
            ("seconds", "0.5"),
            ("cmdline", "quiet loglevel=3"),
        ]))
        .unwrap();
        assert_eq!(
            user.guest_cmdline(4),
            "ub.copies=1,4 ub.seconds=0.5 ub.end=poweroff quiet loglevel=3"
        );
        // 12 tests, default passes 10 (5 long) / 3 (7 short), 0.5 s each, 2 runs.
        assert!(close(
            user.estimate_s(4),
            (5.0 * 10.0 + 7.0 * 3.0) * 0.5 * 2.0
        ));
    }

    #[test]
    fn bad_parameters_are_each_named() {
        let errors = SuiteSpec::from_params(&params(&[
            ("copies", "1,0,many"),
            ("passes", "10,0"),
            ("tests", "dhry2reg,dhrystone"),
            ("seconds", "-1"),
        ]))
        .unwrap_err();
        let keys: Vec<&str> = errors.iter().map(|e| e.0).collect();
        assert_eq!(keys, ["kernel", "copies", "passes", "tests", "seconds"]);
        assert!(errors[1].1.contains("\"0\""), "{errors:?}");
        assert!(errors[3].1.contains("\"dhrystone\"") && errors[3].1.contains("shell8"));
    }
}
