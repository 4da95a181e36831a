//! `pacer unixbench`: the suite's host reference run and the report on a
//! guest's console log.
//!
//! ```text
//! pacer unixbench --host [--copies 1,N] [--passes P|L,S] [--tests a,b] [--seconds S]
//!                        [--suite-dir DIR] [--save FILE] [--json FILE]
//! pacer unixbench --report CONSOLE_LOG [--host-ref FILE] [--user-out FILE] [--json FILE]
//! ```
//! `--host` prints the suite's lines on stderr as they come and the table
//! on stdout; `--save` keeps the raw lines, which `--host-ref` takes back.
//! Exit codes as the rest of the CLI: 0 ok, 1 the suite failed or some
//! passes failed, 2 bad input (missing files, no results in the log).

use crate::output::{out, EXIT_BAD_INPUT, EXIT_OK, EXIT_VM_FAILED};
use crate::unixbench::host::{self, HostRun};
use crate::unixbench::report;
use clap::Args;
use std::path::{Path, PathBuf};
use vmm::unixbench::parse::{parse_log, Log};

/// The closing text of `pacer unixbench --help`.
pub const HELP: &str = "Examples:
  pacer unixbench --host --save results/host-ub.log            the host reference
  pacer unixbench --host --copies 1 --passes 1 --seconds 2     a quick host run
  pacer unixbench --report deb.console.log --host-ref results/host-ub.log --json ub.json

The table goes to stdout; with --host the suite's own lines go to stderr
as they come (not with -q). --json writes a pacer-unixbench document
(schemas/).

Exit codes:
  0  every test scored
  1  the suite failed, or some passes failed
  2  bad input: missing files, no results in the log";

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("mode").required(true).args(["host", "report"])))]
pub struct UnixbenchArgs {
    /// Run the suite natively on this host (the reference for guests).
    #[arg(long)]
    pub host: bool,
    /// Score a guest's console log (or any saved output of the suite).
    #[arg(long, value_name = "CONSOLE_LOG")]
    pub report: Option<PathBuf>,
    /// With --report: a host run's saved output (--save) to compare with.
    #[arg(long, value_name = "FILE", requires = "report")]
    pub host_ref: Option<PathBuf>,
    /// With --report: write the user command's output (ub.user_cmd) here.
    #[arg(long, value_name = "FILE", requires = "report")]
    pub user_out: Option<PathBuf>,
    /// Copy counts, e.g. "1,2"; N means the host's CPU count [default: 1,N].
    #[arg(long, value_name = "COUNTS", requires = "host")]
    pub copies: Option<String>,
    /// Passes: P for every test, or L,S for long and short tests [default: 10,3].
    #[arg(long, value_name = "P|L,S", requires = "host")]
    pub passes: Option<String>,
    /// Tests to run, e.g. "dhry2reg,syscall" [default: all twelve].
    #[arg(long, value_name = "TESTS", requires = "host")]
    pub tests: Option<String>,
    /// Run every test this many seconds instead of its own duration.
    #[arg(long, value_name = "SECONDS", requires = "host")]
    pub seconds: Option<f64>,
    /// Where ubench and busybox are [default: guests/out/linux].
    #[arg(long, value_name = "DIR", requires = "host")]
    pub suite_dir: Option<PathBuf>,
    /// With --host: save the suite's raw output here (for --host-ref).
    #[arg(long, value_name = "FILE", requires = "host")]
    pub save: Option<PathBuf>,
    /// Also write the scored sections as one JSON document here (schema
    /// pacer-unixbench, schemas/).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

/// Errors of this module (file access; the suite's own errors are
/// [`host::HostRunError`]).
#[derive(Debug, thiserror::Error)]
pub enum UnixbenchCliError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

fn read_log(path: &Path) -> Result<Log, UnixbenchCliError> {
    let bytes = vmm::input::read_regular_file(path, vmm::input::MAX_LOG_BYTES, "a console log")
        .map_err(|source| UnixbenchCliError::Read {
            path: path.into(),
            source,
        })?;
    Ok(parse_log(&String::from_utf8_lossy(&bytes)))
}

fn write_file(path: &Path, text: &str) -> Result<(), UnixbenchCliError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        let _ = std::fs::create_dir_all(dir);
    }
    vmm::whole_file::write(path, text).map_err(|source| UnixbenchCliError::Write {
        path: path.into(),
        source,
    })
}

fn finish(log: &Log, reference: Option<&Log>, what: &str, a: &UnixbenchArgs) -> i32 {
    let sections = report::sections(log, reference);
    if sections.is_empty() {
        eprintln!(
            "pacer unixbench: no UnixBench-style results found ({} malformed UB lines)",
            log.rejected
        );
        return EXIT_BAD_INPUT;
    }
    out(&report::render(&sections, what));
    if log.rejected > 0 {
        out(&format!("({} malformed UB lines skipped)\n", log.rejected));
    }
    if let Some(path) = &a.json {
        let doc = crate::documents::unixbench::UnixbenchDocument::new(
            what,
            a.report.clone(),
            a.host_ref.clone(),
            &sections,
        );
        let json = serde_json::to_string_pretty(&doc).unwrap_or_default();
        if let Err(e) = write_file(path, &(json + "\n")) {
            eprintln!("pacer unixbench: {e}");
            return EXIT_VM_FAILED;
        }
    }
    let failed = sections
        .iter()
        .any(|s| s.result.rows.iter().any(|r| r.failed_passes > 0) || !s.result.complete);
    if failed {
        EXIT_VM_FAILED
    } else {
        EXIT_OK
    }
}

/// Run `pacer unixbench`; returns the exit code.
pub fn run(a: &UnixbenchArgs) -> i32 {
    if a.host {
        let run = HostRun {
            suite_dir: a.suite_dir.clone().unwrap_or_else(host::default_suite_dir),
            copies: a.copies.clone(),
            passes: a.passes.clone(),
            tests: a.tests.clone(),
            seconds: a.seconds,
        };
        // The suite's lines as they come are status: none with -q.
        let mut progress: Box<dyn std::io::Write> = if crate::output::quiet() {
            Box::new(std::io::sink())
        } else {
            Box::new(std::io::stderr())
        };
        let text = match host::run(&run, &mut progress) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("pacer unixbench: {e}");
                return match e {
                    host::HostRunError::NoSuite(_) => EXIT_BAD_INPUT,
                    _ => EXIT_VM_FAILED,
                };
            }
        };
        if let Some(path) = &a.save {
            if let Err(e) = write_file(path, &text) {
                eprintln!("pacer unixbench: {e}");
                return EXIT_VM_FAILED;
            }
        }
        return finish(&parse_log(&text), None, "host", a);
    }
    let Some(report_path) = &a.report else {
        eprintln!("pacer unixbench: give --host or --report CONSOLE_LOG");
        return EXIT_BAD_INPUT;
    };
    let log = match read_log(report_path) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("pacer unixbench: {e}");
            return EXIT_BAD_INPUT;
        }
    };
    let reference = match a.host_ref.as_deref().map(read_log).transpose() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("pacer unixbench: {e}");
            return EXIT_BAD_INPUT;
        }
    };
    if let Some(path) = &a.user_out {
        match &log.user_output {
            Some(text) => {
                if let Err(e) = write_file(path, text) {
                    eprintln!("pacer unixbench: {e}");
                    return EXIT_VM_FAILED;
                }
            }
            None => eprintln!("pacer unixbench: the log has no user command output"),
        }
    }
    finish(&log, reference.as_ref(), "guest", a)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(report: &Path) -> UnixbenchArgs {
        UnixbenchArgs {
            host: false,
            report: Some(report.into()),
            host_ref: None,
            user_out: None,
            copies: None,
            passes: None,
            tests: None,
            seconds: None,
            suite_dir: None,
            save: None,
            json: None,
        }
    }

    #[test]
    fn report_exit_codes_and_outputs() {
        let dir = std::env::temp_dir().join(format!("pacer-ubcli-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ok = dir.join("ok.log");
        std::fs::write(
            &ok,
            "UB begin copies=1 cpus=2\n\
             UB test=syscall copies=1 pass=1 score=30000 unit=lps\n\
             UB end copies=1 status=ok\n\
             UB user begin\nhello\nUB user end status=0\n",
        )
        .unwrap();
        let mut a = args(&ok);
        a.user_out = Some(dir.join("user.txt"));
        a.json = Some(dir.join("out.json"));
        a.host_ref = Some(ok.clone());
        assert_eq!(run(&a), EXIT_OK);
        assert_eq!(
            std::fs::read_to_string(dir.join("user.txt")).unwrap(),
            "hello\n"
        );
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("out.json")).unwrap()).unwrap();
        assert_eq!(json["schema"], "pacer-unixbench");
        // syscall index 30000 / 15000 x 10 = 20, host ref the same log
        for side in ["result", "reference"] {
            let index = json["sections"][0][side]["index"].as_f64().unwrap();
            assert!((index - 20.0).abs() < 1e-9, "{side} index {index}");
        }

        let failed = dir.join("failed.log");
        std::fs::write(
            &failed,
            "UB test=syscall copies=1 pass=1 score=30000 unit=lps\n\
             UB error test=spawn copies=1 pass=1 msg=timeout\n",
        )
        .unwrap();
        assert_eq!(run(&args(&failed)), EXIT_VM_FAILED);

        let empty = dir.join("empty.log");
        std::fs::write(&empty, "[ 0.0] Linux version 6.1\nUB garbage\n").unwrap();
        assert_eq!(run(&args(&empty)), EXIT_BAD_INPUT);
        assert_eq!(run(&args(&dir.join("missing.log"))), EXIT_BAD_INPUT);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
