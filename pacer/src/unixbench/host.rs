//! Running the suite natively on the host (`pacer unixbench --host`): the
//! reference every guest result is compared with. Runs the `ubench`
//! binary that guests/linux/build.sh put next to the image (the same
//! static binary the guest runs), with the image's busybox for the shell
//! tests, echoes its lines as they come and returns its whole output.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum HostRunError {
    #[error(
        "{0} not found: build the Linux guest image first (bash guests/linux/build.sh) \
         or point --suite-dir at the directory holding ubench"
    )]
    NoSuite(PathBuf),
    #[error("cannot run {path}: {source}")]
    Spawn {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("reading the suite's output: {0}")]
    Read(std::io::Error),
    #[error("ubench failed ({0}); see its messages above")]
    Failed(std::process::ExitStatus),
}

/// What to run.
#[derive(Debug, Clone, Default)]
pub struct HostRun {
    /// Directory with `ubench` (and `busybox`), normally guests/out/linux.
    pub suite_dir: PathBuf,
    /// `--copies` list for ubench (e.g. "1,N"); `None`: ubench's default.
    pub copies: Option<String>,
    /// `--passes` ("P" or "L,S").
    pub passes: Option<String>,
    /// `--tests` ("a,b").
    pub tests: Option<String>,
    /// `--seconds` per test.
    pub seconds: Option<f64>,
}

/// Where build.sh puts the suite: `guests/out/linux` under the current
/// directory, or under the checkout the running binary was built in
/// (`target/<profile>/pacer` -> `../../guests/out/linux`).
pub fn default_suite_dir() -> PathBuf {
    let here = PathBuf::from("guests/out/linux");
    if here.join("ubench").exists() {
        return here;
    }
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent()?.parent()?.parent().map(Path::to_path_buf))
        .map(|root| root.join("guests/out/linux"))
        .filter(|d| d.join("ubench").exists())
        .unwrap_or(here)
}

/// The ubench command line for `run`.
pub fn command(run: &HostRun) -> Result<Command, HostRunError> {
    let ubench = run.suite_dir.join("ubench");
    if !ubench.is_file() {
        return Err(HostRunError::NoSuite(ubench));
    }
    let mut cmd = Command::new(&ubench);
    cmd.arg("run").arg("--tmpdir").arg(std::env::temp_dir());
    let busybox = run.suite_dir.join("busybox");
    if busybox.is_file() {
        cmd.arg("--busybox").arg(busybox);
    } else {
        log::warn!(
            "no busybox in {}: the shell tests use the host's /bin/sh and tools, not the guest's",
            run.suite_dir.display()
        );
    }
    for (flag, v) in [
        ("--copies", &run.copies),
        ("--passes", &run.passes),
        ("--tests", &run.tests),
    ] {
        if let Some(v) = v {
            cmd.arg(flag).arg(v);
        }
    }
    if let Some(s) = run.seconds {
        cmd.arg("--seconds").arg(s.to_string());
    }
    Ok(cmd)
}

/// Run the suite; every output line is also written to `echo` as it
/// arrives (progress). Returns the whole output.
pub fn run(run: &HostRun, echo: &mut dyn Write) -> Result<String, HostRunError> {
    let mut cmd = command(run)?;
    let mut child = cmd
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|source| HostRunError::Spawn {
            path: run.suite_dir.join("ubench"),
            source,
        })?;
    let mut text = String::new();
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out).lines() {
            let line = line.map_err(HostRunError::Read)?;
            let _ = writeln!(echo, "{line}");
            text.push_str(&line);
            text.push('\n');
        }
    }
    let status = child.wait().map_err(HostRunError::Read)?;
    // a run with failed passes still has results worth showing
    if !status.success() && text.is_empty() {
        return Err(HostRunError::Failed(status));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::unixbench::summarize;
    use vmm::unixbench::{catalog, parse_log};

    fn suite_dir() -> PathBuf {
        guests::ubench().parent().unwrap().to_path_buf()
    }

    #[test]
    fn missing_suite_is_a_clear_error() {
        let r = HostRun {
            suite_dir: "/nonexistent".into(),
            ..HostRun::default()
        };
        let e = command(&r).unwrap_err();
        assert!(e.to_string().contains("guests/linux/build.sh"), "{e}");
    }

    #[test]
    fn ubench_list_agrees_with_the_catalog() {
        let out = Command::new(guests::ubench()).arg("list").output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let listed: Vec<Vec<&str>> = text.lines().map(|l| l.split(' ').collect()).collect();
        assert_eq!(listed.len(), catalog::TESTS.len());
        for (l, t) in listed.iter().zip(catalog::TESTS.iter()) {
            assert_eq!(l[0], t.name);
            assert_eq!(l[1], t.unit);
            assert_eq!(l[2].parse::<f64>().ok(), Some(t.seconds), "{}", t.name);
            assert_eq!(l[3], if t.long_repeat { "long" } else { "short" });
        }
    }

    /// The whole host path: the real suite, every test for ~0.1 s, one pass,
    /// 1 and 2 copies, parsed and scored (a smoke run, not a measurement).
    #[test]
    fn smoke_run_of_every_test_scores_all_twelve() {
        let r = HostRun {
            suite_dir: suite_dir(),
            copies: Some("1,2".into()),
            passes: Some("1".into()),
            tests: None,
            seconds: Some(0.1),
        };
        // the test build has no busybox next to ubench: use the host's /bin/sh
        let mut sink = Vec::new();
        let text = run(&r, &mut sink).expect("ubench ran");
        assert_eq!(sink, text.as_bytes(), "lines echoed as they came");
        let log = parse_log(&text);
        assert_eq!(log.rejected, 0, "{text}");
        assert_eq!(log.copy_counts(), vec![1, 2]);
        for copies in [1, 2] {
            let run = log.run_for(copies).unwrap();
            assert!(run.begun && run.complete, "{text}");
            assert!(run.errors.is_empty(), "{:?}", run.errors);
            let s = summarize(run);
            assert!(s.full, "all twelve scored with {copies} copies: {text}");
            assert!(s.index.unwrap() > 0.0);
        }
    }
}
